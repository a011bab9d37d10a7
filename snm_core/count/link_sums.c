/* The count's sums (snm_core/count/counting.py): a batch's feature occurrences summed
 * into links, a bucket's partial links summed, and its partial feature rows made
 * distinct, each in one sort of 16-byte records that carry their payload
 * (snm_core/io/record_sort.c). */
#include <stdint.h>
#include <string.h>

#include "../io/record_sort.h"
#include "../text/hash64.h"

/* Partial links (key, word, count) summed: out_* get one row a distinct (key, word), in
 * that order.  Words are 2 or 4 bytes (word_bytes), counts 4 or 8 (count_bytes), each at
 * most 2^32 - 1 (the caller splits larger ones into rows).  `buffer` holds 2n records.
 * Returns the rows written, or -1 for a count out of range. */
int64_t sum_links(const uint64_t *key, const void *word, int64_t word_bytes, const void *count,
                  int64_t count_bytes, int64_t n, record_t *buffer, uint64_t *out_key,
                  int32_t *out_word, int64_t *out_count) {
    record_t *rows = buffer, *spare = buffer + n;
    uint64_t low;
    int shift;
    key_span(key, n, &low, &shift);
    for (int64_t i = 0; i < n; i++) {
        uint64_t c = count_bytes == 8 ? (uint64_t)((const int64_t *)count)[i]
                                      : (uint64_t)(uint32_t)((const int32_t *)count)[i];
        if (c > UINT32_MAX) return -1;
        rows[i].key = (key[i] - low) << shift;
        rows[i].minor = word_bytes == 2 ? ((const uint16_t *)word)[i]
                                        : (uint32_t)((const int32_t *)word)[i];
        rows[i].value = (uint32_t)c;
    }
    sort_records(rows, spare, n);
    int64_t out = -1;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && rows[i].key == rows[i - 1].key && rows[i].minor == rows[i - 1].minor) {
            out_count[out] += rows[i].value;
        } else {
            out++;
            out_key[out] = (rows[i].key >> shift) + low;
            out_word[out] = (int32_t)rows[i].minor;
            out_count[out] = rows[i].value;
        }
    }
    return out + 1;
}

static inline int32_t word_at(const void *words, int64_t word_bytes, int64_t i) {
    return word_bytes == 2 ? (int32_t)((const uint16_t *)words)[i]
                           : ((const int32_t *)words)[i];
}

/* Feature rows (key, type, and `width[i]` words each, stored one after another in
 * `words`) made distinct: the first row of each key in row order, sorted by key.
 * `offsets` holds m + 1 int64 (filled here), `buffer` 2m records.  out_words gets the
 * kept rows' words one after another, out_width their counts.  *collisions: rows that
 * share a key with the row before them (in row order among that key's rows) but name
 * another feature (type or words).  Returns the distinct keys, or -1 for m >= 2^32. */
int64_t distinct_feature_rows(const uint64_t *key, const int32_t *type, const uint8_t *width,
                              const void *words, int64_t word_bytes, int64_t m,
                              int64_t *offsets, record_t *buffer, uint64_t *out_key,
                              int32_t *out_type, uint8_t *out_width, int32_t *out_words,
                              int64_t *collisions) {
    if (m >= ((int64_t)1 << 32)) return -1;
    record_t *rows = buffer, *spare = buffer + m;
    uint64_t low;
    int shift;
    key_span(key, m, &low, &shift);
    offsets[0] = 0;
    for (int64_t i = 0; i < m; i++) {
        offsets[i + 1] = offsets[i] + width[i];
        rows[i].key = (key[i] - low) << shift;
        rows[i].minor = (uint32_t)i;
        rows[i].value = 0;
    }
    sort_records(rows, spare, m);
    int64_t out = -1, written = 0, differ = 0;
    for (int64_t i = 0; i < m; i++) {
        uint32_t r = rows[i].minor;
        if (i > 0 && rows[i].key == rows[i - 1].key) {
            uint32_t p = rows[i - 1].minor;
            int same = type[r] == type[p] && width[r] == width[p];
            for (int64_t j = 0; same && j < width[r]; j++)
                same = word_at(words, word_bytes, offsets[r] + j) ==
                       word_at(words, word_bytes, offsets[p] + j);
            differ += !same;
            continue;
        }
        out++;
        out_key[out] = key[r];
        out_type[out] = type[r];
        out_width[out] = width[r];
        for (int64_t j = 0; j < width[r]; j++)
            out_words[written++] = word_at(words, word_bytes, offsets[r] + j);
    }
    *collisions = differ;
    return out + 1;
}

/* A batch's occurrences (key[i], the word target[event[i]]) summed into links (out_key,
 * out_word, out_count: one row a distinct (key, word), in that order) and its distinct
 * keys (feature_key, sorted; feature_first: the index of each key's first
 * occurrence; feature_links: its links).  `buffer` holds 2n records.  Returns the
 * links (the features are *features), or -1 for n >= 2^32. */
int64_t batch_links(const uint64_t *key, const int64_t *event, const int32_t *target,
                    int64_t n, record_t *buffer, uint64_t *out_key, int32_t *out_word,
                    int64_t *out_count, uint64_t *feature_key, int64_t *feature_first,
                    int64_t *feature_links, int64_t *features) {
    if (n >= ((int64_t)1 << 32)) return -1;
    record_t *rows = buffer, *spare = buffer + n;
    uint64_t low;
    int shift;
    key_span(key, n, &low, &shift);
    for (int64_t i = 0; i < n; i++) {
        rows[i].key = (key[i] - low) << shift;
        rows[i].minor = (uint32_t)target[event[i]];
        rows[i].value = (uint32_t)i;
    }
    sort_records(rows, spare, n);
    int64_t link = -1, feature = -1;
    for (int64_t i = 0; i < n; i++) {
        int new_key = i == 0 || rows[i].key != rows[i - 1].key;
        if (new_key) {
            feature++;
            feature_key[feature] = (rows[i].key >> shift) + low;
            feature_first[feature] = rows[i].value;
            feature_links[feature] = 0;
        } else if (rows[i].value < feature_first[feature]) {
            feature_first[feature] = rows[i].value;
        }
        if (new_key || rows[i].minor != rows[i - 1].minor) {
            link++;
            feature_links[feature]++;
            out_key[link] = feature_key[feature];
            out_word[link] = (int32_t)rows[i].minor;
            out_count[link] = 1;
        } else {
            out_count[link]++;
        }
    }
    *features = feature + 1;
    return link + 1;
}

/* A feature key as snm_core.text.features.FeatureExtractor.keys_for makes it: the
 * adjacent words folded newest first from `seed`, then (a skip-gram) the remote words'
 * own fold folded in, then mixed with the type id's salt. */
static inline uint64_t feature_key(const int32_t *words, int num_words, int remote,
                                   uint64_t seed, uint64_t salt) {
    uint64_t base = seed;
    for (int col = num_words - 1; col >= remote; col--)
        base = hash64_combine(base, (uint64_t)(int64_t)words[col]);
    if (remote) {
        uint64_t far = seed;
        for (int col = remote - 1; col >= 0; col--)
            far = hash64_combine(far, (uint64_t)(int64_t)words[col]);
        base = hash64_combine(base, far);
    }
    return hash64_mix(base ^ salt);
}

/* Continuation names (Kneser-Ney's N1+(. f w)): every link (f', w) of a feature row
 * whose type extends another names (f, w), f being f' without its oldest word.  Rows
 * (m, sorted by key, each with its tag, type index, list offsets into `words`, and its
 * `diversity` links in `link_word`, in row order) give out_feature[k], out_word[k] for
 * each link that names one.  Per type index: `parent` (-1: none), `num_words`,
 * `remote`; `salt` per type id (tag-major, n_types a tag); `seed` the word sequences'
 * (hashing.SEQUENCE_SEED).  Returns the names, or -1 when a row's words or links do not
 * match its type's. */
int64_t extension_names(const int64_t *parent, const int32_t *num_words, const int32_t *remote,
                        const uint64_t *salt, int64_t n_types, uint64_t seed, const int16_t *tag,
                        const int16_t *type, const int32_t *offsets, const int32_t *words,
                        const int64_t *diversity, int64_t m, const int32_t *link_word,
                        int64_t n_links, uint64_t *out_feature, int32_t *out_word) {
    int64_t link = 0, out = 0;
    for (int64_t i = 0; i < m; i++) {
        int64_t t = type[i], p = t >= 0 && t < n_types ? parent[t] : -2;
        if (p == -2 || offsets[i + 1] - offsets[i] != num_words[t] ||
            diversity[i] < 0 || link + diversity[i] > n_links)
            return -1;
        if (p >= 0) {
            uint64_t key = feature_key(words + offsets[i] + 1, num_words[p], remote[p], seed,
                                       salt[tag[i] * n_types + p]);
            for (int64_t j = 0; j < diversity[i]; j++) {
                out_feature[out] = key;
                out_word[out++] = link_word[link + j];
            }
        }
        link += diversity[i];
    }
    return link == n_links ? out : -1;
}

/* A key's key-range bucket of num_buckets (at most 2^16), as
 * snm_core.io.key_ranges.bucket_of takes it (the product cannot overflow). */
static inline int64_t key_bucket(uint64_t key, int64_t num_buckets) {
    return (int64_t)(((key >> 16) * (uint64_t)num_buckets) >> 48);
}

/* Names (key, word: n) grouped by the key-range bucket of their key (of `num_buckets`,
 * as snm_core.io.key_ranges.bucket_of), in their order within a bucket: out_key[n] and
 * out_word[n] (`word_bytes` 2 or 4: the scratch's width), bucket b's rows
 * bounds[b]:bounds[b + 1].  One pass counts the buckets, one places the rows: an argsort
 * by bucket and gathers of both columns cost several times that.  Returns 0, or -1 when
 * num_buckets is outside [1, 2^16] or a word does not fit its width. */
int64_t names_by_bucket(const uint64_t *key, const int32_t *word, int64_t n, int64_t num_buckets,
                        int64_t word_bytes, uint64_t *out_key, void *out_word, int64_t *bounds) {
    if (num_buckets < 1 || num_buckets > (1 << 16) || (word_bytes != 2 && word_bytes != 4))
        return -1;
    memset(bounds, 0, (size_t)(num_buckets + 1) * sizeof *bounds);
    for (int64_t i = 0; i < n; i++) {
        if (word_bytes == 2 && (word[i] < 0 || word[i] > 65535)) return -1;
        bounds[key_bucket(key[i], num_buckets) + 1]++;
    }
    for (int64_t b = 0; b < num_buckets; b++) bounds[b + 1] += bounds[b];
    int64_t *at = bounds; /* each bucket's next row, restored below */
    for (int64_t i = 0; i < n; i++) {
        int64_t row = at[key_bucket(key[i], num_buckets)]++;
        out_key[row] = key[i];
        if (word_bytes == 2)
            ((uint16_t *)out_word)[row] = (uint16_t)word[i];
        else
            ((int32_t *)out_word)[row] = word[i];
    }
    for (int64_t b = num_buckets; b > 0; b--) bounds[b] = bounds[b - 1];
    bounds[0] = 0;
    return 0;
}

/* How many names (name_key, name_word: m, any order) each link (link_key, link_word: n,
 * sorted by (key, word)) has, added to continuation[n]; names of no link are not counted.
 * `buffer` holds 2m records.  Returns 0, or -1 when the links are not sorted or
 * m >= 2^32. */
int64_t count_names(const uint64_t *link_key, const int32_t *link_word, int64_t n,
                    const uint64_t *name_key, const void *name_word, int64_t word_bytes,
                    int64_t m, record_t *buffer, int64_t *continuation) {
    if (m >= ((int64_t)1 << 32)) return -1;
    for (int64_t i = 1; i < n; i++)
        if (link_key[i] < link_key[i - 1] ||
            (link_key[i] == link_key[i - 1] && link_word[i] <= link_word[i - 1]))
            return -1;
    record_t *rows = buffer, *spare = buffer + m;
    uint64_t low;
    int shift;
    key_span(name_key, m, &low, &shift);
    for (int64_t i = 0; i < m; i++) {
        rows[i].key = (name_key[i] - low) << shift;
        rows[i].minor = (uint32_t)word_at(name_word, word_bytes, i);
        rows[i].value = 0;
    }
    sort_records(rows, spare, m);
    int64_t at = 0;
    for (int64_t i = 0; i < m && at < n; i++) {
        uint64_t key = (rows[i].key >> shift) + low;
        uint32_t word = rows[i].minor;
        while (at < n && (link_key[at] < key ||
                          (link_key[at] == key && (uint32_t)link_word[at] < word)))
            at++;
        if (at < n && link_key[at] == key && (uint32_t)link_word[at] == word)
            continuation[at]++;
    }
    return 0;
}
