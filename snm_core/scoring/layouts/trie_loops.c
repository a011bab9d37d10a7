/* The n-gram trie layouts' loops: scoring (snm_core/scoring/layouts/trie_loops.py) and
 * the build (trie_build_kernels.py), whose modules document them and check their
 * arguments.
 *
 * Both layouts store, per order, the entries (context, word) of the n-grams the model
 * has; an event's contexts are the entries found for the event before it (the forward
 * trie's state, as in KenLM).  The trie layout finds an entry by a binary search of its
 * context's records; the small layout decodes a block of Huffman-coded entries.  A bit
 * stream of the small layout is read most significant bit first: bit p is bit
 * 63 - p % 64 of word p / 64; it ends with two zero words, so a reader may always look
 * 64 bits ahead.  Sums are added in the order numpy's reference adds them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sentences scored side by side: their lookups are independent, so the memory reads of
 * one overlap those of the others. */
#define LANES 8
/* The fields of a small entry, each with a code per order: code = 4 * (order - 1) + field. */
#define FIELD_CONTEXT_STEP 0
#define FIELD_WORD_GAP 1
#define FIELD_WORD 2
#define FIELD_VALUE 3
#define FIELDS 4
/* huffman.MAX_CODE_BITS: a code table has MAX_CODE_BITS + 1 columns. */
#define MAX_CODE_BITS 30

typedef struct {
    int32_t small; /* 0: the trie layout, 1: the small layout */
    int64_t radix;
    /* the trie layout: packed records (word uint16/uint32, value float32) and
     * (start uint32, m_star index uint16/uint32) */
    const uint8_t *entries;
    int64_t entry_bytes, word_bytes;
    const int64_t *order_entries;
    const uint8_t *contexts;
    int64_t context_bytes, m_star_bytes;
    const int64_t *order_contexts;
    const double *m_star_values;
    const int32_t *first_order; /* (tags, radix): each tag's empty-context entry by word */
    /* the small layout */
    const uint64_t *bits;
    const int64_t *block_keys, *block_offsets, *order_blocks, *small_order_entries;
    const int64_t *span_context;
    const double *span_sum;
    const int64_t *order_spans;
    int64_t block_entries, escape;
    const uint64_t *limit;
    const int64_t *first, *base, *symbols;
    const double *level_values;
    const int32_t *first_entry; /* (tags, radix), as first_order */
    const double *first_value;  /* (tags, radix) */
    const double *first_m_star; /* (tags,) */
} Tables;

static inline __attribute__((always_inline)) int64_t unsigned_at(const uint8_t *p, int64_t bytes) {
    if (bytes == 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline __attribute__((always_inline)) float float_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* --- the trie layout ------------------------------------------------------------------------ */

static inline __attribute__((always_inline)) const uint8_t *context_record(const Tables *t, int64_t order, int64_t context) {
    return t->contexts + (t->order_contexts[order] + context) * t->context_bytes;
}

static inline __attribute__((always_inline)) int64_t context_start(const uint8_t *record) { return unsigned_at(record, 4); }

/* Entry (context, word) of `order`: its index or -1; its value and M_context*. */
static inline __attribute__((always_inline)) int64_t trie_child(const Tables *t, int64_t order, int64_t context, int64_t word,
                                 double *value, double *m_star) {
    const uint8_t *record = context_record(t, order, context);
    int64_t base = t->order_entries[order];
    int64_t lo = base + context_start(record);
    int64_t n = base + context_start(record + t->context_bytes) - lo;
    *m_star = t->m_star_values[unsigned_at(record + 4, t->m_star_bytes)];
    *value = 0.0;
    if (n == 0) return -1;
    /* Branch-free: the last position whose word is at most the one sought. */
    while (n > 1) {
        int64_t half = n >> 1;
        lo = unsigned_at(t->entries + (lo + half) * t->entry_bytes, t->word_bytes) <= word
                 ? lo + half : lo;
        n -= half;
    }
    const uint8_t *entry = t->entries + lo * t->entry_bytes;
    if (unsigned_at(entry, t->word_bytes) != word) return -1;
    *value = (double)float_at(entry + t->word_bytes);
    return lo - base;
}

/* trie_child of a tag's empty context (its entries are `order`): by word, directly. */
static inline __attribute__((always_inline)) int64_t trie_first(const Tables *t, int64_t order, int64_t tag, int64_t word,
                                 double *value, double *m_star) {
    int64_t entry = t->first_order[tag * t->radix + word];
    *m_star = t->m_star_values[unsigned_at(context_record(t, order, 0) + 4, t->m_star_bytes)];
    *value = entry < 0 ? 0.0
                       : (double)float_at(t->entries + (t->order_entries[order] + entry)
                                          * t->entry_bytes + t->word_bytes);
    return entry;
}

/* --- the small layout ----------------------------------------------------------------------- */

static inline __attribute__((always_inline)) uint64_t peek(const uint64_t *bits, int64_t pos) {
    int64_t word = pos >> 6, offset = pos & 63;
    if (offset == 0) return bits[word];
    return (bits[word] << offset) | (bits[word + 1] >> (64 - offset));
}

/* The symbol of the canonical Huffman code `code` at `pos`; *n gets its bits. */
static inline __attribute__((always_inline)) int64_t decode(const Tables *t, int64_t pos, int64_t code, int64_t *n) {
    const int64_t columns = MAX_CODE_BITS + 1;
    uint64_t window = peek(t->bits, pos) >> 32;
    int64_t length = 1;
    while (length < MAX_CODE_BITS && window >= t->limit[code * columns + length]) length++;
    *n = length;
    return t->symbols[t->base[code * columns + length] + (int64_t)(window >> (32 - length))
                      - t->first[code * columns + length]];
}

/* decode, for the tests' round trip of the codes. */
int64_t small_decode(const Tables *t, int64_t pos, int64_t code, int64_t *n) {
    return decode(t, pos, code, n);
}

/* A symbol of `code`; the escape symbol is followed by the Elias gamma code of the value
 * less the escape plus one (n zeros, then the value in n + 1 bits). */
static inline __attribute__((always_inline)) int64_t escaped(const Tables *t, int64_t pos, int64_t code, int64_t *n) {
    int64_t symbol = decode(t, pos, code, n);
    if (symbol < t->escape) return symbol;
    pos += *n;
    int64_t zeros = 0; /* at most 30 in a stream as written: damage stays in the stream */
    while (zeros < 30 && (peek(t->bits, pos + zeros) >> 63) == 0) zeros++;
    int64_t width = 2 * zeros + 1;
    *n += width;
    return t->escape + (int64_t)(peek(t->bits, pos) >> (64 - width)) - 1;
}

/* Decode entry i of a block (its first entry's key is the block's): the position after
 * it; *context and *word move on, *value gets its value. */
static inline __attribute__((always_inline)) int64_t small_entry(const Tables *t, int64_t pos, int64_t i, int64_t *context,
                                  int64_t *word, int64_t code_base, double *value) {
    int64_t n;
    if (i) {
        int64_t step = escaped(t, pos, code_base + FIELD_CONTEXT_STEP, &n);
        pos += n;
        if (step == 0) {
            *word += escaped(t, pos, code_base + FIELD_WORD_GAP, &n);
        } else {
            *context += step;
            *word = decode(t, pos, code_base + FIELD_WORD, &n);
        }
        pos += n;
    }
    int64_t level = decode(t, pos, code_base + FIELD_VALUE, &n);
    *value = t->level_values[level];
    return pos + n;
}

/* The last index i in [lo, hi) with keys[i] <= query, or lo - 1. */
static inline __attribute__((always_inline)) int64_t last_at_most(const int64_t *keys, int64_t lo, int64_t hi, int64_t query) {
    while (lo < hi) {
        int64_t mid = (lo + hi) >> 1;
        if (keys[mid] <= query) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

/* Entry (context, word) of `order`: its index or -1; its value and M_context*, the sum
 * of the values of every entry of that context. */
static inline __attribute__((always_inline)) int64_t small_child(const Tables *t, int64_t order, int64_t context, int64_t word,
                                  double *value, double *m_star) {
    int64_t lo = t->order_blocks[order], hi = t->order_blocks[order + 1];
    int64_t s = last_at_most(t->span_context, t->order_spans[order], t->order_spans[order + 1],
                             context);
    int spans = s >= t->order_spans[order] && t->span_context[s] == context;
    *m_star = spans ? t->span_sum[s] : 0.0;
    *value = 0.0;
    /* A context within one block: the block of its last possible key holds all its entries. */
    int64_t b = last_at_most(t->block_keys, lo, hi,
                             context * t->radix + (spans ? word : t->radix - 1));
    if (b < lo) return -1;
    int64_t first_entry = (b - lo) * t->block_entries;
    int64_t n = t->small_order_entries[order] - first_entry;
    if (n > t->block_entries) n = t->block_entries;
    int64_t key = t->block_keys[b];
    int64_t c = key / t->radix, w = key % t->radix, pos = t->block_offsets[b];
    int64_t found = -1, code_base = FIELDS * (order - 1);
    for (int64_t i = 0; i < n; i++) {
        double v;
        pos = small_entry(t, pos, i, &c, &w, code_base, &v);
        if (c > context || (spans && c == context && w > word)) break;
        if (c == context) {
            if (!spans) *m_star += v;
            if (w == word) {
                found = first_entry + i;
                *value = v;
            }
        }
    }
    return found;
}

static inline __attribute__((always_inline)) int64_t small_first(const Tables *t, int64_t tag, int64_t word, double *value,
                                  double *m_star) {
    *value = t->first_value[tag * t->radix + word];
    *m_star = t->first_m_star[tag];
    return t->first_entry[tag * t->radix + word];
}

/* Each tag's empty-context entries by word rank, decoded once when a small model is
 * loaded (entry index or -1, value; M*), so that an event's first lookup reads no block.
 * Returns 0 if a decoded word is outside the vocabulary (a damaged stream), else 1. */
int64_t small_first_order(const Tables *t, int64_t tags, int64_t max_n, int32_t *entry,
                          double *value, double *m_star) {
    for (int64_t i = 0; i < tags * t->radix; i++) {
        entry[i] = -1;
        value[i] = 0.0;
    }
    for (int64_t tag = 0; tag < tags; tag++) {
        int64_t order = tag * (max_n + 1) + 1;
        double unused;
        small_child(t, order, 0, 0, &unused, &m_star[tag]);
        int64_t code_base = FIELDS * (order - 1);
        for (int64_t b = t->order_blocks[order]; b < t->order_blocks[order + 1]; b++) {
            int64_t first_entry = (b - t->order_blocks[order]) * t->block_entries;
            int64_t n = t->small_order_entries[order] - first_entry;
            if (n > t->block_entries) n = t->block_entries;
            int64_t key = t->block_keys[b];
            int64_t c = key / t->radix, w = key % t->radix, pos = t->block_offsets[b];
            for (int64_t i = 0; i < n; i++) {
                double v;
                pos = small_entry(t, pos, i, &c, &w, code_base, &v);
                if (w < 0 || w >= t->radix) return 0;
                entry[tag * t->radix + w] = (int32_t)(first_entry + i);
                value[tag * t->radix + w] = v;
            }
        }
    }
    return 1;
}

/* --- either layout -------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) int64_t lookup(const Tables *t, int64_t order, int64_t context, int64_t word,
                             double *value, double *m_star) {
    return t->small ? small_child(t, order, context, word, value, m_star)
                    : trie_child(t, order, context, word, value, m_star);
}

static inline __attribute__((always_inline)) int64_t first_lookup(const Tables *t, int64_t order, int64_t tag, int64_t word,
                                   double *value, double *m_star) {
    return t->small ? small_first(t, tag, word, value, m_star)
                    : trie_first(t, order, tag, word, value, m_star);
}

/* A trie lookup's reads, asked for ahead: the context's record (step 0), then the middle
 * entry of its entries, which a binary search reads first and, for the few entries most
 * contexts have, ends on (step 1).  The small layout's reads are a block's, decoded at
 * once: nothing to ask for early. */
static inline __attribute__((always_inline)) void prefetch(const Tables *t, int step, int64_t order, int64_t context) {
    if (t->small) return;
    const uint8_t *record = context_record(t, order, context);
    if (step == 0) {
        __builtin_prefetch(record, 0, 3);
    } else {
        int64_t start = context_start(record), end = context_start(record + t->context_bytes);
        __builtin_prefetch(t->entries + (t->order_entries[order] + start + ((end - start) >> 1))
                                            * t->entry_bytes, 0, 3);
    }
}

/* A lane's contexts (tags x width) at a sentence's start: the empty context and <S>'s. */
static inline __attribute__((always_inline)) void start_sentence(int64_t *context, int64_t tags, int64_t width,
                                  const int64_t *bos_entry) {
    for (int64_t tag = 0; tag < tags; tag++) {
        int64_t *c = context + tag * width;
        for (int64_t k = 0; k < width; k++) c[k] = -1;
        c[0] = 0;
        c[1] = bos_entry[tag];
    }
}

/* Sum of M_fw and of M_f* over the present n-gram features of every event, those of every
 * tag.  `words` are the sentences' word ranks back to back (`offsets` bound each); a
 * sentence of n words has n + 1 events, the last predicting `eos`.  The tries of a model's
 * tags are stored one after the other: order j of tag t is t * (max_n + 1) + j.  LANES
 * sentences go side by side, an event of each per step.  Returns -1 out of memory. */
static inline __attribute__((always_inline)) int64_t event_sums(
    const Tables *t, const int64_t *words, const int64_t *offsets, int64_t n_sentences,
    int64_t bos, int64_t eos, int64_t min_n, int64_t max_n, int64_t tags, double *numerator,
    double *denominator) {
    const int64_t orders = max_n + 1, width = orders + 1;
    int64_t *context = malloc(sizeof(int64_t) * ((LANES * tags + 1) * width + tags));
    if (!context) return -1;
    int64_t *following = context + LANES * tags * width, *bos_entry = following + width;
    int64_t position[LANES], sentence[LANES];
    for (int64_t i = 0; i < offsets[n_sentences] + n_sentences; i++)
        numerator[i] = denominator[i] = 0.0;
    for (int64_t tag = 0; tag < tags; tag++) {
        double value, m_star;
        bos_entry[tag] = first_lookup(t, tag * orders + 1, tag, bos, &value, &m_star);
    }
    int64_t started = 0, busy = 0;
    for (int lane = 0; lane < LANES; lane++) {
        position[lane] = -1;
        if (started < n_sentences) {
            start_sentence(context + lane * tags * width, tags, width, bos_entry);
            sentence[lane] = started;
            position[lane] = offsets[started++];
            busy++;
        }
    }
    while (busy) {
        for (int step = 0; step < 2; step++) /* every lane's context reads, then its entries' */
            for (int lane = 0; lane < LANES; lane++) {
                if (position[lane] < 0) continue;
                for (int64_t tag = 0; tag < tags; tag++) {
                    const int64_t *c = context + (lane * tags + tag) * width;
                    for (int64_t k = 1; k < orders; k++)
                        if (c[k] >= 0) prefetch(t, step, tag * orders + k + 1, c[k]);
                }
            }
        for (int lane = 0; lane < LANES; lane++) {
            int64_t at = position[lane];
            if (at < 0) continue;
            int64_t s = sentence[lane];
            int64_t target = at < offsets[s + 1] ? words[at] : eos;
            int64_t event = at + s;
            for (int64_t tag = 0; tag < tags; tag++) {
                int64_t *c = context + (lane * tags + tag) * width;
                double value, m_star;
                for (int64_t k = 0; k < width; k++) following[k] = -1;
                following[0] = 0;
                following[1] = first_lookup(t, tag * orders + 1, tag, target, &value, &m_star);
                if (min_n == 0) {
                    numerator[event] += value;
                    denominator[event] += m_star;
                }
                for (int64_t k = 1; k < orders; k++) {
                    if (c[k] < 0) continue; /* longer contexts may be there (pruned) */
                    following[k + 1] = lookup(t, tag * orders + k + 1, c[k], target, &value,
                                              &m_star);
                    if (k >= min_n) {
                        numerator[event] += value;
                        denominator[event] += m_star;
                    }
                }
                memcpy(c, following, sizeof(int64_t) * width);
            }
            if (at < offsets[s + 1]) {
                position[lane] = at + 1;
            } else if (started < n_sentences) {
                start_sentence(context + lane * tags * width, tags, width, bos_entry);
                sentence[lane] = started;
                position[lane] = offsets[started++];
            } else {
                position[lane] = -1;
                busy--;
            }
        }
    }
    free(context);
    return 0;
}

/* The tables with the layout's record widths as constants, so that each layout's loop
 * is compiled for them (runtime widths in the binary search's loads cost 40%). */
#define WITH_LAYOUT(call)                                                                     \
    do {                                                                                      \
        Tables fixed = *t;                                                                    \
        const Tables *t = &fixed;                                                             \
        if (fixed.small) {                                                                    \
            fixed.small = 1;                                                                  \
            return call;                                                                      \
        }                                                                                     \
        fixed.small = 0;                                                                      \
        if (fixed.word_bytes == 2 && fixed.m_star_bytes == 2) {                               \
            fixed.word_bytes = 2, fixed.entry_bytes = 6;                                      \
            fixed.m_star_bytes = 2, fixed.context_bytes = 6;                                  \
            return call;                                                                      \
        }                                                                                     \
        if (fixed.word_bytes == 2) {                                                          \
            fixed.word_bytes = 2, fixed.entry_bytes = 6;                                      \
            fixed.m_star_bytes = 4, fixed.context_bytes = 8;                                  \
            return call;                                                                      \
        }                                                                                     \
        if (fixed.m_star_bytes == 2) {                                                        \
            fixed.word_bytes = 4, fixed.entry_bytes = 8;                                      \
            fixed.m_star_bytes = 2, fixed.context_bytes = 6;                                  \
            return call;                                                                      \
        }                                                                                     \
        fixed.word_bytes = 4, fixed.entry_bytes = 8;                                          \
        fixed.m_star_bytes = 4, fixed.context_bytes = 8;                                      \
        return call;                                                                          \
    } while (0)

int64_t trie_event_sums(const Tables *t, const int64_t *words, const int64_t *offsets,
                        int64_t n_sentences, int64_t bos, int64_t eos, int64_t min_n,
                        int64_t max_n, int64_t tags, double *numerator, double *denominator) {
    WITH_LAYOUT(event_sums(t, words, offsets, n_sentences, bos, eos, min_n, max_n, tags,
                           numerator, denominator));
}

/* The states after `target`: each row of `words` (n, width; right-aligned, -1 before)
 * shifted left with `target` last, holding min(keep, width) words and -1 before them, so
 * that equal states have equal rows. */
void shift_states(const int32_t *words, int64_t n, int64_t width, const int32_t *target,
                  const int64_t *keep, int32_t *new_words, int64_t *length) {
    for (int64_t i = 0; i < n; i++) {
        int64_t k = keep[i] < 0 ? 0 : keep[i];
        if (k > width) k = width;
        length[i] = k;
        const int32_t *row = words + i * width;
        int32_t *out = new_words + i * width;
        for (int64_t j = 0; j < width; j++) out[j] = -1;
        for (int64_t j = width - k; j < width - 1; j++) out[j] = row[j + 1];
        if (k) out[width - 1] = target[i];
    }
}

/* One event after each of n states: P(target | state), the longest entry found (the
 * n-gram of the target and its context of ngram - 1 words; 0: not even the word), the
 * entries of the contexts after the target (n, tags, max_n + 2; column max_n + 1, a
 * whole n-gram, is no context: -1), and the new states' words.  `context` is the states'
 * entries as `following`; `words` (n, state_width) their words. */
static inline __attribute__((always_inline)) int64_t advance(
    const Tables *t, const int64_t *context, const int32_t *words, int64_t state_width,
    const int32_t *target, const int64_t *rank, int64_t n, int64_t min_n, int64_t max_n,
    int64_t tags, double *prob, int64_t *ngram, int64_t *following, int32_t *new_words,
    int64_t *length) {
    const int64_t orders = max_n + 1, width = orders + 1;
    int64_t *keep = malloc(sizeof(int64_t) * (n ? n : 1));
    if (!keep) return -1;
    for (int64_t i = 0; i < n * tags * width; i++) following[i] = -1;
    for (int64_t i = 0; i < n; i++) {
        double numerator = 0.0, denominator = 0.0;
        ngram[i] = 0;
        for (int64_t tag = 0; tag < tags; tag++) {
            const int64_t *c = context + (i * tags + tag) * width;
            int64_t *f = following + (i * tags + tag) * width;
            double value, m_star;
            f[0] = 0;
            f[1] = first_lookup(t, tag * orders + 1, tag, rank[i], &value, &m_star);
            if (f[1] >= 0 && ngram[i] < 1) ngram[i] = 1;
            if (min_n == 0) {
                numerator += value;
                denominator += m_star;
            }
            for (int64_t k = 1; k < orders; k++) {
                if (c[k] < 0) continue;
                int64_t entry = lookup(t, tag * orders + k + 1, c[k], rank[i], &value, &m_star);
                if (entry >= 0) {
                    if (ngram[i] < k + 1) ngram[i] = k + 1;
                    if (k + 1 < orders) f[k + 1] = entry;
                }
                if (k >= min_n) {
                    numerator += value;
                    denominator += m_star;
                }
            }
        }
        prob[i] = numerator / denominator;
        keep[i] = 0;
        for (int64_t k = 1; k < orders; k++)
            for (int64_t tag = 0; tag < tags; tag++)
                if (following[(i * tags + tag) * width + k] >= 0) keep[i] = k;
    }
    shift_states(words, n, state_width, target, keep, new_words, length);
    free(keep);
    return 0;
}

int64_t trie_advance(const Tables *t, const int64_t *context, const int32_t *words,
                     int64_t state_width, const int32_t *target, const int64_t *rank,
                     int64_t n, int64_t min_n, int64_t max_n, int64_t tags, double *prob,
                     int64_t *ngram, int64_t *following, int32_t *new_words, int64_t *length) {
    WITH_LAYOUT(advance(t, context, words, state_width, target, rank, n, min_n, max_n, tags,
                        prob, ngram, following, new_words, length));
}

/* --- the build ------------------------------------------------------------------------------ */

/* An n-gram's sort key is `width` uint64 words, the most significant first: its tag in
 * tag_bits bits, then one slot_bits field a word, oldest first, holding the word's rank
 * plus one (0: no word).  A field is at most 63 bits. */
static inline __attribute__((always_inline)) uint64_t get_field(const uint64_t *row, int64_t offset, int64_t bits) {
    int64_t word = offset >> 6, end = (offset & 63) + bits;
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    if (end <= 64) return (row[word] >> (64 - end)) & mask;
    int64_t low = end - 64;
    return ((row[word] << low) | (row[word + 1] >> (64 - low))) & mask;
}

static inline __attribute__((always_inline)) void set_field(uint64_t *row, int64_t offset, int64_t bits, uint64_t value) {
    int64_t word = offset >> 6, end = (offset & 63) + bits;
    if (end <= 64) {
        row[word] |= value << (64 - end);
    } else {
        int64_t low = end - 64;
        row[word] |= value >> low;
        row[word + 1] |= value << (64 - low);
    }
}

/* Sort keys (n_links, width; zeroed) of the n-grams of links: feature i (its words
 * flat[offsets[i]:offsets[i + 1]], its tag) has diversity[i] links, in order, whose words
 * are `target`.  Returns the longest feature's words (a feature of `slots` words or more
 * has no key: the caller refuses it). */
int64_t trie_gram_keys(const int64_t *offsets, const int32_t *flat, const int64_t *diversity,
                       const int64_t *tag, int64_t n_features, const int32_t *target,
                       const int64_t *rank, int64_t tag_bits, int64_t slot_bits, int64_t slots,
                       int64_t width, uint64_t *keys) {
    int64_t link = 0, longest = 0;
    for (int64_t i = 0; i < n_features; i++) {
        int64_t length = offsets[i + 1] - offsets[i];
        if (length > longest) longest = length;
        if (length >= slots) continue;
        for (int64_t d = 0; d < diversity[i]; d++, link++) {
            uint64_t *row = keys + link * width;
            if (tag_bits) set_field(row, 0, tag_bits, (uint64_t)tag[i]);
            for (int64_t j = 0; j < length; j++)
                set_field(row, tag_bits + j * slot_bits, slot_bits,
                          (uint64_t)(rank[flat[offsets[i] + j]] + 1));
            set_field(row, tag_bits + length * slot_bits, slot_bits,
                      (uint64_t)(rank[target[link]] + 1));
        }
    }
    return longest;
}

/* The tag of each of n keys. */
void trie_key_tags(const uint64_t *keys, int64_t n, int64_t width, int64_t tag_bits,
                   int64_t *tags) {
    for (int64_t i = 0; i < n; i++)
        tags[i] = tag_bits ? (int64_t)get_field(keys + i * width, 0, tag_bits) : 0;
}

/* The trie entries that n sorted n-grams (`keys` of one tag, M `m`) add, order by order:
 * entry (c, w) of order j + 1 goes to row j of out_keys (slots, capacity) as
 * c * radix + rank(w), beside its value in out_values (M of the n-gram it is, else 0),
 * out_count[j] of them.  digit[j], ident[j]: the field and entry index of order j + 1 of
 * the last n-gram's path; count[j]: entries of order j + 1 so far; all carried from call
 * to call.  An n-gram's entries are those of its path below the longest prefix it shares
 * with the previous n-gram.  Returns how many n-grams equal the one before (none in a
 * model). */
int64_t trie_stream(const uint64_t *keys, const float *m, int64_t n, int64_t width,
                    int64_t tag_bits, int64_t slot_bits, int64_t radix, int64_t *digit,
                    int64_t *ident, int64_t *count, int64_t slots, int64_t *out_keys,
                    float *out_values, int64_t capacity, int64_t *out_count) {
    int64_t repeated = 0;
    for (int64_t j = 0; j < slots; j++) out_count[j] = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t *row = keys + i * width;
        int new = 0;
        int64_t length = 0;
        for (int64_t j = 0; j < slots; j++) {
            int64_t d = (int64_t)get_field(row, tag_bits + j * slot_bits, slot_bits);
            if (d == 0) break;
            length = j + 1;
            if (!new && d == digit[j]) continue;
            new = 1;
            int64_t parent = j ? ident[j - 1] : 0;
            out_keys[j * capacity + out_count[j]] = parent * radix + d - 1;
            out_values[j * capacity + out_count[j]] = 0.0f;
            out_count[j]++;
            digit[j] = d;
            ident[j] = count[j];
            count[j]++;
        }
        if (new) out_values[(length - 1) * capacity + out_count[length - 1] - 1] = m[i];
        else repeated++;
        for (int64_t j = length; j < slots; j++) digit[j] = 0;
    }
    return repeated;
}

/* Each context's record from its order's entries, streamed: where its entries start (a
 * context without entries: where the next context's do) and the float64 sum of their
 * values, added in order.  `context`, `values`: n of the order's entries (sorted), the
 * first of them entry `base`; from entry state[0] on.  state = {i, c, open_start, k}: c the
 * next context to write, below `last`; open_start (-1: none yet) and *open_sum its
 * entries so far.  Writes at most `capacity` records; k gets how many: context c stays
 * open at the chunk's end (more of its entries may follow). */
void trie_context_records(const int64_t *context, const float *values, int64_t n, int64_t base,
                          int64_t last, int64_t *state, double *open_sum, int64_t *out_start,
                          double *out_sum, int64_t capacity) {
    int64_t i = state[0], c = state[1], open_start = state[2], k = 0;
    double sum = *open_sum;
    while (k < capacity && c < last) {
        if (i < n && context[i] == c) {
            if (open_start < 0) open_start = base + i;
            sum += (double)values[i];
            i++;
            continue;
        }
        if (i == n) break;
        out_start[k] = open_start >= 0 ? open_start : base + i;
        out_sum[k] = sum;
        k++;
        c++;
        open_start = -1;
        sum = 0.0;
    }
    state[0] = i;
    state[1] = c;
    state[2] = open_start;
    state[3] = k;
    *open_sum = sum;
}

/* The contexts whose entries span blocks of `block` entries, streamed: `context` n of an
 * order's entries (sorted) from entry `base` on, `values` their (rounded) values; run =
 * {context (-1: none), start} and *run_sum the run open before the chunk, carried on.
 * Writes the spanning contexts and their float64 sums in order; returns how many. */
int64_t trie_spanning_runs(const int64_t *context, const double *values, int64_t n,
                           int64_t base, int64_t block, int64_t *run, double *run_sum,
                           int64_t *spans, double *sums) {
    int64_t k = 0, run_context = run[0], run_start = run[1];
    double sum = *run_sum;
    for (int64_t i = 0; i < n; i++) {
        if (context[i] != run_context) {
            if (run_context >= 0 && run_start / block != (base + i - 1) / block) {
                spans[k] = run_context;
                sums[k] = sum;
                k++;
            }
            run_context = context[i];
            run_start = base + i;
            sum = 0.0;
        }
        sum += values[i];
    }
    run[0] = run_context;
    run[1] = run_start;
    *run_sum = sum;
    return k;
}

static inline __attribute__((always_inline)) void put_bits(uint64_t *bits, int64_t pos, uint64_t value, int64_t n) {
    int64_t word = pos >> 6, free = 64 - (pos & 63);
    if (n <= free) {
        if (n < 64) value &= ((uint64_t)1 << n) - 1;
        bits[word] |= value << (free - n);
    } else {
        bits[word] |= value >> (n - free);
        bits[word + 1] |= value << (64 - (n - free));
    }
}

/* Write fields[i, f] (right-aligned, lengths[i, f] bits, up to 64) of each of n entries
 * from bit positions[i] on, field after field, into `bits` (zeroed). */
void trie_pack(const uint64_t *fields, const uint8_t *lengths, const int64_t *positions,
               int64_t n, int64_t n_fields, uint64_t *bits) {
    for (int64_t i = 0; i < n; i++) {
        int64_t pos = positions[i];
        for (int64_t f = 0; f < n_fields; f++) {
            int64_t length = lengths[i * n_fields + f];
            if (length) {
                put_bits(bits, pos, fields[i * n_fields + f], length);
                pos += length;
            }
        }
    }
}

/* The sum of values[starts[i]:ends[i]] for each of n runs, added in order as the scorer
 * adds them (so a stored M* is bit for bit the one decoding would give). */
void trie_run_sums(const double *values, const int64_t *starts, const int64_t *ends, int64_t n,
                   double *sums) {
    for (int64_t i = 0; i < n; i++) {
        double total = 0.0;
        for (int64_t j = starts[i]; j < ends[i]; j++) total += values[j];
        sums[i] = total;
    }
}
