/* The hashed layout's loops, for snm_core/scoring/layouts/hashed_build_kernels.py (the
 * build's scatter records) and hashed_kernels.py (lookups and scoring), which
 * document them and check their arguments.
 *
 * Lookups run in passes over a block of queries, so that the cache misses of many
 * queries are in flight at once (a loop doing one query at a time waits for each
 * miss in turn): the slot bounds, then each slot's first key (branch-free), then
 * the matching, where the few queries past their slot's first key scan on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../text/hash64.h"

/* Queries looked up per pass: enough loads in flight, temporaries in the L1/L2 cache. */
#define BLOCK 1024
#define STORED_BITS 32
#define PACKED_STORED_BITS 16
/* A match that the overflow table must settle (its next entry has the same stored bits). */
#define TWIN (-2)

/* --- the build ------------------------------------------------------------------------------ */

/* A scatter record: hashed_build.py's RECORD. */
typedef struct {
    uint64_t key;
    float m;
    float c;
} Record;

/* Scatter records of n links with feature rows `rows`: the link key & mask, M_fw,
 * and c(w | f) = count / the feature's count (a float64 quotient, rounded to float32,
 * as numpy's true division and cast). */
void fill_records(const uint64_t *feature_keys, const int64_t *feature_counts,
                  const int32_t *rows, const int32_t *words, const float *m,
                  const int64_t *counts, int64_t n, uint64_t mask, Record *records) {
    for (int64_t i = 0; i < n; i++) {
        int32_t row = rows[i];
        records[i].key = hash64_combine(feature_keys[row], (uint64_t)(int64_t)words[i]) & mask;
        records[i].m = m[i];
        records[i].c = (float)((double)counts[i] / (double)feature_counts[row]);
    }
}

/* records (n, 2) (a key, then its 8 bytes of values) into grouped by key bits
 * [shift, shift + bits), each group's records in their order; bounds (2^bits + 1)
 * the groups' bounds.  Returns -1 when out of memory. */
int64_t group_by_bits(const uint64_t *records, int64_t n, int64_t shift, int64_t bits,
                   uint64_t *grouped, int64_t *bounds) {
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    int64_t groups = (int64_t)1 << bits;
    memset(bounds, 0, sizeof(int64_t) * (groups + 1));
    for (int64_t i = 0; i < n; i++)
        bounds[((records[2 * i] >> shift) & mask) + 1]++;
    for (int64_t g = 0; g < groups; g++)
        bounds[g + 1] += bounds[g];
    int64_t *at = malloc(sizeof(int64_t) * groups);
    if (!at)
        return -1;
    memcpy(at, bounds, sizeof(int64_t) * groups);
    for (int64_t i = 0; i < n; i++) {
        int64_t g = (int64_t)((records[2 * i] >> shift) & mask);
        grouped[2 * at[g]] = records[2 * i];
        grouped[2 * at[g] + 1] = records[2 * i + 1];
        at[g]++;
    }
    free(at);
    return 0;
}

/* --- a KeyIndex (whole keys, sorted) ---------------------------------------------------------- */

/* find_keys32 and find_keys64 (the index's starts int32 or int64): found[j] = the
 * position of queries[j] among the n_keys keys, or -1. */
#define FIND_KEYS(NAME, START)                                                                   \
    static inline int64_t NAME##_one(const uint64_t *keys, const START *start, int64_t shift,  \
                                     uint64_t query) {                                          \
        int64_t slot = (int64_t)(query >> shift);                                               \
        for (int64_t p = start[slot]; p < start[slot + 1]; p++) {                               \
            if (keys[p] >= query)                                                               \
                return keys[p] == query ? p : -1;                                               \
        }                                                                                       \
        return -1;                                                                              \
    }                                                                                           \
                                                                                                \
    void NAME(const uint64_t *keys, int64_t n_keys, const START *start, int64_t shift,          \
              const uint64_t *queries, int64_t n, int64_t *found) {                             \
        int64_t position[BLOCK], end[BLOCK];                                                    \
        uint64_t first[BLOCK];                                                                  \
        for (int64_t lo = 0; lo < n; lo += BLOCK) {                                             \
            int64_t m = n - lo < BLOCK ? n - lo : BLOCK;                                        \
            const uint64_t *q = queries + lo;                                                   \
            int64_t *out = found + lo;                                                          \
            if (n_keys == 0) {                                                                  \
                for (int64_t j = 0; j < m; j++)                                                 \
                    out[j] = -1;                                                                \
                continue;                                                                       \
            }                                                                                   \
            for (int64_t j = 0; j < m; j++) {                                                   \
                int64_t slot = (int64_t)(q[j] >> shift);                                        \
                position[j] = start[slot];                                                      \
                end[j] = start[slot + 1];                                                       \
            }                                                                                   \
            for (int64_t j = 0; j < m; j++)                                                     \
                first[j] = keys[position[j] < n_keys - 1 ? position[j] : n_keys - 1];           \
            for (int64_t j = 0; j < m; j++) {                                                   \
                out[j] = -1;                                                                    \
                if (position[j] < end[j] && first[j] <= q[j])                                   \
                    out[j] = first[j] == q[j] ? position[j]                                     \
                                              : NAME##_one(keys, start, shift, q[j]);           \
            }                                                                                   \
        }                                                                                       \
    }

FIND_KEYS(find_keys32, int32_t)
FIND_KEYS(find_keys64, int64_t)

/* --- an EntryTable (stored bits of keys, two-level slot index, overflow) ---------------------- */

typedef struct {
    /* entry p: remainder words[2p], value bits words[2p + 1] (uint32 words); in a packed
     * table (a codebook given), bytes 3p and 3p + 1 the 16 stored bits (little-endian),
     * byte 3p + 2 the value's code in `codebook` */
    const void *words;
    int64_t n_entries;
    const uint16_t *offsets;
    const int64_t *blocks;
    int64_t block_bits; /* 2^block_bits slots a block of the two-level slot index */
    int64_t shift;
    const uint64_t *overflow_keys;
    const int64_t *overflow_rows;
    int64_t n_overflow;
    const float *codebook; /* a packed table's value of each code; NULL: float32 values */
} Table;

/* The stored key bits of entry p. */
static inline uint32_t stored_at(const Table *t, int64_t p) {
    if (t->codebook) {
        const uint8_t *entry = (const uint8_t *)t->words + 3 * p;
        return (uint32_t)entry[0] | ((uint32_t)entry[1] << 8);
    }
    return ((const uint32_t *)t->words)[2 * p];
}

/* The value of entry p. */
static inline double value_at(const Table *t, int64_t p) {
    return t->codebook ? t->codebook[((const uint8_t *)t->words)[3 * p + 2]]
                       : ((const float *)t->words)[2 * p + 1];
}

/* The lower bound of query in sorted keys[0..n). */
static inline int64_t lower_bound(const uint64_t *keys, int64_t n, uint64_t query) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < query)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static inline int64_t overflow_row(const Table *t, uint64_t query) {
    int64_t i = lower_bound(t->overflow_keys, t->n_overflow, query);
    return i < t->n_overflow && t->overflow_keys[i] == query ? t->overflow_rows[i] : -1;
}

/* found[j] = the row of queries[j] (j < n <= BLOCK), or -1. */
static void entry_positions(const Table *t, const uint64_t *queries, int64_t n, int64_t *found) {
    int64_t position[BLOCK], end[BLOCK];
    uint32_t first[BLOCK], wanted[BLOCK];
    int64_t low = t->shift - (t->codebook ? PACKED_STORED_BITS : STORED_BITS);
    uint64_t stored_mask = t->codebook ? 0xFFFF : 0xFFFFFFFF;
    if (t->n_entries == 0) {
        for (int64_t j = 0; j < n; j++)
            found[j] = -1;
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t slot = (int64_t)(queries[j] >> t->shift);
        position[j] = t->blocks[slot >> t->block_bits] + t->offsets[slot];
        end[j] = t->blocks[(slot + 1) >> t->block_bits] + t->offsets[slot + 1];
        wanted[j] = (uint32_t)((queries[j] >> low) & stored_mask);
    }
    int64_t last = t->n_entries - 1;
    for (int64_t j = 0; j < n; j++)
        first[j] = stored_at(t, position[j] < last ? position[j] : last);
    int64_t twins = 0;
    for (int64_t j = 0; j < n; j++) {
        found[j] = -1;
        if (position[j] >= end[j] || first[j] > wanted[j])
            continue;
        for (int64_t p = position[j]; p < end[j]; p++) {
            uint32_t stored = stored_at(t, p);
            if (stored >= wanted[j]) {
                if (stored == wanted[j]) {
                    int twin = p + 1 < end[j] && stored_at(t, p + 1) == stored;
                    found[j] = twin ? TWIN : p;
                    twins += twin;
                }
                break;
            }
        }
    }
    /* A match whose next entry has the same stored bits (rare): settled by whole keys. */
    if (twins) {
        for (int64_t j = 0; j < n; j++) {
            if (found[j] == TWIN)
                found[j] = overflow_row(t, queries[j]);
        }
    }
}

void find_entries(const Table *t, const uint64_t *queries, int64_t n, int64_t *found) {
    for (int64_t lo = 0; lo < n; lo += BLOCK)
        entry_positions(t, queries + lo, n - lo < BLOCK ? n - lo : BLOCK, found + lo);
}

/* The links several links' key shares: by (key, feature, word) ascending. */
typedef struct {
    const float *link_c; /* c(w|f) of each link; NULL in a packed model (no unadjusted) */
    uint64_t mask; /* the link key bits the table keeps (all but in tests) */
    const uint64_t *keys;
    const uint64_t *features;
    const int64_t *words;
    const float *m;
    const float *c;
    int64_t n;
} Links;

/* The row of link (feature, word), whose key `query` several links share, or -1. */
static inline int64_t collision_row(const Links *l, uint64_t query, uint64_t feature,
                                    int64_t word) {
    for (int64_t i = lower_bound(l->keys, l->n, query); i < l->n && l->keys[i] == query; i++) {
        if (l->features[i] == feature && l->words[i] == word)
            return i;
    }
    return -1;
}

/* A model as scoring reads it: its two tables, the link values and collisions, and
 * what the features of states need (hashed_kernels.Scorer fills it). */
typedef struct {
    Table features;
    Table links;
    Links values;
    const int64_t *prerequisite; /* (n_types,): the type id that must be found first, or -1 */
    int64_t n_types;
    const int64_t *windows; /* (n_windows, 3): (r, s, a) of each generator, by type */
    const int64_t *type_windows; /* (types + 1,) */
    int64_t types, tags;
    const uint64_t *salts;        /* (tags, types) */
    const int64_t *link_length;   /* (n_types,): n-gram length of each type id's links */
    int64_t minimal, width;
    uint64_t seed;
} Scorer;

/* The feature half of a block of n pairs (n <= BLOCK), pair j of feature key keys[j],
 * type id types[j] and event events[j] (events NULL: every pair of event 0).  The
 * features are looked up together; then, in order, a found one whose type's
 * prerequisite was found for its event adds M_f* to m_star_sum[event] (and 1 to
 * n_features[event], unless NULL), marks row_found (n_types, n_events), and sets
 * kept[j]; kept[j] is 0 for the others. */
static void feature_block(const Scorer *sc, const uint64_t *keys, const int64_t *types,
                          const int64_t *events, int64_t n, int64_t n_events,
                          double *m_star_sum, int64_t *n_features, uint8_t *row_found,
                          uint8_t *kept) {
    const Table *features = &sc->features;
    int64_t row[BLOCK];
    double value[BLOCK];
    entry_positions(features, keys, n, row);
    /* Branch-free gathers first (their cache misses overlap), sums after. */
    for (int64_t j = 0; j < n; j++)
        value[j] = value_at(features, row[j] > 0 ? row[j] : 0);
    for (int64_t j = 0; j < n; j++) {
        int64_t event = events ? events[j] : 0, before = sc->prerequisite[types[j]];
        kept[j] = row[j] >= 0 && (before < 0 || row_found[before * n_events + event]);
        if (!kept[j])
            continue;
        m_star_sum[event] += value[j];
        if (n_features)
            n_features[event] += 1;
        row_found[types[j] * n_events + event] = 1;
    }
}

/* The link half of a block of k found features (k <= BLOCK), feature j of key keys[j],
 * type id types[j] and event events[j] (NULL: event 0): the links (keys[j],
 * target[event]) are looked up together; then, in order, a found one whose type's
 * prerequisite link was found for its event adds M_fw to link_m_sum[event] (and c(w|f)
 * to link_c_sum[event], unless NULL) and marks link_found (n_types, n_events). */
static void link_block(const Scorer *sc, const uint64_t *keys, const int64_t *types,
                       const int64_t *events, int64_t k, const int32_t *target,
                       int64_t n_events, double *link_m_sum, double *link_c_sum,
                       uint8_t *link_found) {
    const Table *links = &sc->links;
    const Links *l = &sc->values;
    uint64_t query[BLOCK];
    int64_t link[BLOCK];
    double value[BLOCK], value_c[BLOCK];
    if (k <= 0)
        return;
    for (int64_t j = 0; j < k; j++)
        query[j] = hash64_combine(keys[j], (uint64_t)(int64_t)target[events ? events[j] : 0])
                   & l->mask;
    entry_positions(links, query, k, link);
    for (int64_t j = 0; j < k; j++) {
        int64_t r = link[j] > 0 ? link[j] : 0;
        value[j] = value_at(links, r);
        value_c[j] = l->link_c ? l->link_c[r] : 0.0;
    }
    for (int64_t j = 0; j < k; j++) {
        int64_t event = events ? events[j] : 0, before = sc->prerequisite[types[j]];
        if (link[j] < 0 || (before >= 0 && !link_found[before * n_events + event]))
            continue;
        if (value[j] < 0) { /* a shared key (rare): settled by (feature, word) */
            int64_t r = collision_row(l, query[j], keys[j], target[event]);
            if (r < 0)
                continue;
            value[j] = l->m[r];
            value_c[j] = l->c[r];
        }
        link_m_sum[event] += value[j];
        if (link_c_sum)
            link_c_sum[event] += value_c[j];
        link_found[types[j] * n_events + event] = 1;
    }
}

/* The n-gram length of the longest link found for `event` (link_found (n_types,
 * n_events)); 0 for none or skip-grams only. */
static int64_t longest_link(const Scorer *sc, const uint8_t *link_found, int64_t n_events,
                            int64_t event) {
    int64_t matched = 0;
    for (int64_t t = 0; t < sc->n_types; t++) {
        if (link_found[t * n_events + event] && sc->link_length[t] > matched)
            matched = sc->link_length[t];
    }
    return matched;
}

/* Per-event sums over the pairs whose feature (and link) the model holds; see
 * hashed_kernels.Scorer.event_sums.  Sums run over the pairs in their order.  row_found
 * and link_found: (n_types, n_events), zeros.
 *
 * The pairs are looked up BLOCK at a time, whatever their types, so that the cache
 * misses of one state's few pairs a type overlap (a decoder asks about one state at a
 * time).  A pair whose prerequisite's pairs all came in earlier blocks is looked up only
 * where the prerequisite was found; one whose prerequisite is in its own block is looked
 * up, then dropped in order where the prerequisite was not found: the same sums. */
static void sums(const Scorer *sc, const uint64_t *pair_key, const int64_t *pair_event,
                 const int64_t *type_bounds, const int32_t *target, int64_t n_events,
                 double *m_star_sum, double *link_m_sum, double *link_c_sum,
                 int64_t *n_features, uint8_t *row_found, uint8_t *link_found) {
    const int64_t *prerequisite = sc->prerequisite;
    int64_t n_pairs = type_bounds[sc->n_types];
    int64_t type[BLOCK], event[BLOCK];
    uint64_t key[BLOCK];
    uint8_t kept[BLOCK];
    int64_t t = 0;
    for (int64_t lo = 0; lo < n_pairs; lo += BLOCK) {
        int64_t hi = lo + BLOCK < n_pairs ? lo + BLOCK : n_pairs;
        int64_t n = 0;
        for (int64_t i = lo; i < hi; i++) {
            while (i >= type_bounds[t + 1])
                t++;
            int64_t before = prerequisite[t];
            if (before >= 0 && type_bounds[before + 1] <= lo &&
                !row_found[before * n_events + pair_event[i]])
                continue;
            key[n] = pair_key[i];
            type[n] = t;
            event[n] = pair_event[i];
            n++;
        }
        feature_block(sc, key, type, event, n, n_events, m_star_sum, n_features, row_found,
                      kept);
        int64_t k = 0; /* the found features whose links are looked up, in place */
        for (int64_t j = 0; j < n; j++) {
            int64_t before = prerequisite[type[j]];
            if (!kept[j] || (before >= 0 && type_bounds[before + 1] <= lo &&
                             !link_found[before * n_events + event[j]]))
                continue;
            key[k] = key[j];
            type[k] = type[j];
            event[k] = event[j];
            k++;
        }
        link_block(sc, key, type, event, k, target, n_events, link_m_sum, link_c_sum,
                   link_found);
    }
}

/* --- the features of states (left-to-right scoring) ------------------------------------------- */

/* Each window's hash (before the salt) and whether it gives a pair, for each of n
 * states (words (n, width), right-aligned; length: the words each holds, <S>
 * included): base, remote (n_windows, n), valid, fresh (n_windows, n) zeros.  A
 * window (r, s, a) is extracted where r + s + a <= length, as the extractor's depth
 * rule; a tied type's window whose remote words an earlier (shorter-skip) window of
 * the same type saw gives no pair (a feature once an event). */
static void state_windows(const Scorer *sc, const int32_t *words, int64_t n,
                             const int64_t *length, uint64_t *base, uint64_t *remote,
                             uint8_t *valid, uint8_t *fresh) {
    const int64_t *windows = sc->windows, *type_windows = sc->type_windows;
    int64_t types = sc->types, width = sc->width;
    uint64_t seed = sc->seed;
    for (int64_t t = 0; t < types; t++) {
        for (int64_t g = type_windows[t]; g < type_windows[t + 1]; g++) {
            int64_t r = windows[3 * g], s = windows[3 * g + 1], a = windows[3 * g + 2];
            for (int64_t i = 0; i < n; i++) {
                if (length[i] < r + s + a)
                    continue;
                const int32_t *state = words + i * width;
                valid[g * n + i] = 1;
                uint64_t h = seed;
                for (int64_t k = 0; k < a; k++) /* newest first, as the extractor folds a run */
                    h = hash64_combine(h, (uint64_t)(int64_t)state[width - 1 - k]);
                if (r) {
                    uint64_t far = seed;
                    for (int64_t k = 0; k < r; k++)
                        far = hash64_combine(far, (uint64_t)(int64_t)state[width - 1 - a - s - k]);
                    remote[g * n + i] = far;
                    h = hash64_combine(h, far);
                }
                uint8_t is_fresh = 1;
                for (int64_t before = type_windows[t]; before < g; before++) {
                    if (valid[before * n + i] && remote[before * n + i] == remote[g * n + i])
                        is_fresh = 0;
                }
                fresh[g * n + i] = is_fresh;
                base[g * n + i] = h;
            }
        }
    }
}

/* The pairs of state_windows' windows in the order in which the extractor gives an
 * event's pairs (tag, type, window), so that they are summed in its order: key, event
 * (tags * total), and type_bounds (tags * types + 1). */
static void state_pairs(const Scorer *sc, const uint64_t *base, const uint8_t *fresh, int64_t n,
                        uint64_t *key, int64_t *event, int64_t *type_bounds) {
    const int64_t *type_windows = sc->type_windows;
    const uint64_t *salts = sc->salts;
    int64_t tags = sc->tags, types = sc->types;
    int64_t p = 0;
    type_bounds[0] = 0;
    for (int64_t tag = 0; tag < tags; tag++) {
        for (int64_t t = 0; t < types; t++) {
            uint64_t salt = salts[tag * types + t];
            for (int64_t g = type_windows[t]; g < type_windows[t + 1]; g++) {
                for (int64_t i = 0; i < n; i++) {
                    if (fresh[g * n + i]) {
                        key[p] = hash64_mix(base[g * n + i] ^ salt);
                        event[p] = i;
                        p++;
                    }
                }
            }
            type_bounds[tag * types + t + 1] = p;
        }
    }
}

/* --- what hashed_kernels.Scorer calls -------------------------------------------------------- */

/* Per-event sums (float64 and int64 (n_events,), zeros) of the pairs; link_found (n_types,
 * n_events) zeros, or NULL.  Returns -1 when out of memory. */
int64_t scorer_event_sums(const Scorer *sc, const uint64_t *pair_key, const int64_t *pair_event,
                          const int64_t *type_bounds, const int32_t *target, int64_t n_events,
                          double *m_star_sum, double *link_m_sum, double *link_c_sum,
                          int64_t *n_features, uint8_t *link_found) {
    size_t cells = (size_t)(sc->n_types * n_events);
    uint8_t *row_found = calloc(cells ? cells : 1, 1);
    uint8_t *own_link_found = link_found ? NULL : calloc(cells ? cells : 1, 1);
    if (!row_found || (!link_found && !own_link_found)) {
        free(row_found);
        free(own_link_found);
        return -1;
    }
    sums(sc, pair_key, pair_event, type_bounds, target, n_events, m_star_sum, link_m_sum,
         link_c_sum, n_features, row_found, link_found ? link_found : own_link_found);
    free(row_found);
    free(own_link_found);
    return 0;
}

/* M_fw and c(w|f) (0 where absent) of the n links (feature_keys[i], words[i]), a shared
 * key settled in the collision table as the sums settle it.  Returns -1 when out of
 * memory. */
int64_t scorer_link_values(const Scorer *sc, const uint64_t *feature_keys, const int64_t *words,
                           int64_t n, double *m, double *c) {
    const Links *l = &sc->values;
    uint64_t *queries = malloc(sizeof(uint64_t) * (n ? n : 1));
    int64_t *rows = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!queries || !rows) {
        free(queries);
        free(rows);
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        queries[i] = hash64_combine(feature_keys[i], (uint64_t)words[i]) & l->mask;
    find_entries(&sc->links, queries, n, rows);
    for (int64_t i = 0; i < n; i++) {
        m[i] = c[i] = 0.0;
        if (rows[i] < 0)
            continue;
        m[i] = value_at(&sc->links, rows[i]);
        c[i] = l->link_c ? l->link_c[rows[i]] : 0.0;
        if (m[i] < 0) {
            int64_t r = collision_row(l, queries[i], feature_keys[i], words[i]);
            m[i] = r >= 0 ? l->m[r] : 0.0;
            c[i] = r >= 0 ? l->c[r] : 0.0;
        }
    }
    free(queries);
    free(rows);
    return 0;
}

/* The state after target, into row (width int32): the words of the longest n-gram found
 * (matched) in a minimal model, else one word more than the state (at most the width);
 * -1 before them, so that equal states have equal rows (trie_loops.c's shift_states does
 * it for many states of the trie layouts and the log-linear family).  Returns its length. */
int64_t scorer_next_state(const Scorer *sc, const int32_t *words, int64_t length, int32_t target,
                          int64_t matched, int32_t *row) {
    int64_t width = sc->width, keep = sc->minimal ? matched : length + 1;
    int64_t k = keep < 0 ? 0 : keep > width ? width : keep;
    for (int64_t j = 0; j < width; j++)
        row[j] = -1;
    for (int64_t j = width - k; j < width - 1; j++)
        row[j] = words[j + 1];
    if (k)
        row[width - 1] = target;
    return k;
}

/* One event after each of n states (words (n, width), length (n,)); `out` holds, in
 * turn, prob (n float64) = P(target), matched (n int64) = the n-gram length of the
 * longest link found, and the states after the target (scorer_next_state), new_length
 * (n int64) and new_words (n, width int32).  One output buffer, so that a decoder's call
 * of one state addresses four arrays.  Returns -1 when out of memory. */
int64_t scorer_advance(const Scorer *sc, const int32_t *words, const int64_t *length,
                       const int32_t *target, int64_t n, void *out) {
    int64_t n_windows = sc->type_windows[sc->types], width = sc->width;
    double *prob = out;
    int64_t *matched = (int64_t *)(prob + n), *new_length = matched + n;
    int32_t *new_words = (int32_t *)(new_length + n);
    /* One zeroed allocation for every temporary (a decoder calls this once a word). */
    size_t cells = (size_t)(n_windows * n), found_cells = (size_t)(sc->n_types * n);
    size_t pairs = (size_t)(sc->tags * n_windows * n), bounds = (size_t)(sc->tags * sc->types + 1);
    size_t words8 = 2 * cells + 3 * (size_t)n + (size_t)n + bounds + 2 * pairs;
    uint64_t *space = calloc(words8 + (2 * cells + 2 * found_cells + 7) / 8 + 1, 8);
    if (!space)
        return -1;
    uint64_t *base = space, *remote = base + cells;
    double *m_star_sum = (double *)(remote + cells);
    double *link_m_sum = m_star_sum + n, *link_c_sum = m_star_sum + 2 * n;
    int64_t *n_features = (int64_t *)(m_star_sum + 3 * n);
    int64_t *type_bounds = n_features + n;
    uint64_t *key = (uint64_t *)(type_bounds + bounds);
    int64_t *event = (int64_t *)(key + pairs);
    uint8_t *valid = (uint8_t *)(event + pairs), *fresh = valid + cells;
    uint8_t *row_found = fresh + cells, *link_found = row_found + found_cells;
    state_windows(sc, words, n, length, base, remote, valid, fresh);
    state_pairs(sc, base, fresh, n, key, event, type_bounds);
    sums(sc, key, event, type_bounds, target, n, m_star_sum, link_m_sum, link_c_sum, n_features,
         row_found, link_found);
    for (int64_t i = 0; i < n; i++) {
        matched[i] = longest_link(sc, link_found, n, i);
        prob[i] = link_m_sum[i] / m_star_sum[i];
        new_length[i] = scorer_next_state(sc, words + i * width, length[i], target[i],
                                          matched[i], new_words + i * width);
    }
    free(space);
    return 0;
}

/* --- one state at a time (a decoder's LM: snm/decoding/flashlight_native.cpp) ---------------
 * A decoder asks about many words after each state it extends: the state's features are
 * found once (scorer_state_features), then each word costs its links' lookups only
 * (scorer_state_word).  The sums are scorer_advance's, in its order. */

/* The features of one state (words: width int32, right-aligned; length) that the model
 * holds, in scorer_advance's pair order: keys and type ids (room for tags * windows of
 * each), M_f* summed in that order (*m_star_sum).  Returns how many, -1 when out of
 * memory. */
int64_t scorer_state_features(const Scorer *sc, const int32_t *words, int64_t length,
                              uint64_t *keys, int64_t *types, double *m_star_sum) {
    int64_t n_windows = sc->type_windows[sc->types], n_types = sc->n_types;
    size_t cells = (size_t)n_windows, pairs = (size_t)(sc->tags * n_windows);
    size_t bounds = (size_t)(sc->tags * sc->types + 1);
    uint64_t *space = calloc(2 * cells + bounds + 2 * pairs + (2 * cells + n_types + 7) / 8 + 1,
                             8);
    if (!space)
        return -1;
    uint64_t *base = space, *remote = base + cells;
    int64_t *type_bounds = (int64_t *)(remote + cells);
    uint64_t *key = (uint64_t *)(type_bounds + bounds);
    int64_t *event = (int64_t *)(key + pairs);
    uint8_t *valid = (uint8_t *)(event + pairs), *fresh = valid + cells;
    uint8_t *row_found = fresh + cells;
    state_windows(sc, words, 1, &length, base, remote, valid, fresh);
    state_pairs(sc, base, fresh, 1, key, event, type_bounds);
    int64_t n_pairs = type_bounds[n_types], found = 0, t = 0;
    int64_t type[BLOCK];
    uint8_t kept[BLOCK];
    *m_star_sum = 0.0;
    for (int64_t lo = 0; lo < n_pairs; lo += BLOCK) {
        int64_t n = (n_pairs - lo < BLOCK ? n_pairs - lo : BLOCK);
        for (int64_t j = 0; j < n; j++) {
            while (lo + j >= type_bounds[t + 1])
                t++;
            type[j] = t;
        }
        feature_block(sc, key + lo, type, NULL, n, 1, m_star_sum, NULL, row_found, kept);
        for (int64_t j = 0; j < n; j++) {
            if (kept[j]) {
                keys[found] = key[lo + j];
                types[found] = type[j];
                found++;
            }
        }
    }
    free(space);
    return found;
}

/* P(target | the state) from its n features (scorer_state_features) and their m_star_sum;
 * *matched: the n-gram length of the longest link found.  Returns -1.0 when out of
 * memory. */
double scorer_state_word(const Scorer *sc, const uint64_t *keys, const int64_t *types,
                         int64_t n, double m_star_sum, int32_t target, int64_t *matched) {
    uint8_t local[256];
    uint8_t *link_found = sc->n_types <= 256 ? local : malloc((size_t)sc->n_types);
    if (!link_found)
        return -1.0;
    memset(link_found, 0, (size_t)sc->n_types);
    double link_m_sum = 0.0;
    for (int64_t lo = 0; lo < n; lo += BLOCK)
        link_block(sc, keys + lo, types + lo, NULL, n - lo < BLOCK ? n - lo : BLOCK, &target, 1,
                   &link_m_sum, NULL, link_found);
    *matched = longest_link(sc, link_found, 1, 0);
    if (link_found != local)
        free(link_found);
    return link_m_sum / m_star_sum;
}
