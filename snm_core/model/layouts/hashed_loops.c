/* The hashed layout's loops, for snm_core/model/layouts/hashed_build_kernels.py (the
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
 * the groups' bounds. */
void group_by_bits(const uint64_t *records, int64_t n, int64_t shift, int64_t bits,
                   uint64_t *grouped, int64_t *bounds) {
    uint64_t mask = ((uint64_t)1 << bits) - 1;
    int64_t groups = (int64_t)1 << bits;
    memset(bounds, 0, sizeof(int64_t) * (groups + 1));
    for (int64_t i = 0; i < n; i++)
        bounds[((records[2 * i] >> shift) & mask) + 1]++;
    for (int64_t g = 0; g < groups; g++)
        bounds[g + 1] += bounds[g];
    int64_t *at = malloc(sizeof(int64_t) * groups);
    memcpy(at, bounds, sizeof(int64_t) * groups);
    for (int64_t i = 0; i < n; i++) {
        int64_t g = (int64_t)((records[2 * i] >> shift) & mask);
        grouped[2 * at[g]] = records[2 * i];
        grouped[2 * at[g] + 1] = records[2 * i + 1];
        at[g]++;
    }
    free(at);
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
    const uint32_t *words; /* entry p: remainder words[2p], value bits words[2p + 1] */
    int64_t n_entries;
    const uint16_t *offsets;
    const int64_t *blocks;
    int64_t block_bits; /* 2^block_bits slots a block of the two-level slot index */
    int64_t shift;
    const uint64_t *overflow_keys;
    const int64_t *overflow_rows;
    int64_t n_overflow;
} Table;

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
    int64_t low = t->shift - STORED_BITS;
    if (t->n_entries == 0) {
        for (int64_t j = 0; j < n; j++)
            found[j] = -1;
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t slot = (int64_t)(queries[j] >> t->shift);
        position[j] = t->blocks[slot >> t->block_bits] + t->offsets[slot];
        end[j] = t->blocks[(slot + 1) >> t->block_bits] + t->offsets[slot + 1];
        wanted[j] = (uint32_t)(queries[j] >> low);
    }
    int64_t last = t->n_entries - 1;
    for (int64_t j = 0; j < n; j++)
        first[j] = t->words[2 * (position[j] < last ? position[j] : last)];
    int64_t twins = 0;
    for (int64_t j = 0; j < n; j++) {
        found[j] = -1;
        if (position[j] >= end[j] || first[j] > wanted[j])
            continue;
        for (int64_t p = position[j]; p < end[j]; p++) {
            uint32_t stored = t->words[2 * p];
            if (stored >= wanted[j]) {
                if (stored == wanted[j]) {
                    int twin = p + 1 < end[j] && t->words[2 * p + 2] == stored;
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
    const float *link_m; /* the link entries as float32: M_fw of row r at 2r + 1 */
    const float *link_c;
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

/* M_fw and c(w|f) (0 where absent) of the n links (feature_keys[i], words[i]). */
void link_values(const Table *t, const Links *l, const uint64_t *feature_keys,
                 const int64_t *words, int64_t n, uint64_t *queries, int64_t *rows, double *m,
                 double *c) {
    for (int64_t i = 0; i < n; i++)
        queries[i] = hash64_combine(feature_keys[i], (uint64_t)words[i]) & l->mask;
    find_entries(t, queries, n, rows);
    for (int64_t i = 0; i < n; i++) {
        m[i] = c[i] = 0.0;
        if (rows[i] < 0)
            continue;
        m[i] = l->link_m[2 * rows[i] + 1];
        c[i] = l->link_c[rows[i]];
        if (m[i] < 0) {
            int64_t r = collision_row(l, queries[i], feature_keys[i], words[i]);
            m[i] = r >= 0 ? l->m[r] : 0.0;
            c[i] = r >= 0 ? l->c[r] : 0.0;
        }
    }
}

/* Per-event sums over the pairs whose feature (and link) the model holds; see
 * hashed_kernels.event_sums.  Sums run over the pairs in their order.  row_found and
 * link_found: (n_types, n_events), zeros. */
void event_sums(const uint64_t *pair_key, const int64_t *pair_event, const int64_t *type_bounds,
                const int64_t *prerequisite, int64_t n_types, const int32_t *target,
                int64_t n_events, const Table *features, const float *m_star,
                const Table *links, const Links *l, double *m_star_sum, double *link_m_sum,
                double *link_c_sum, int64_t *n_features, uint8_t *row_found,
                uint8_t *link_found) {
    int64_t pair[BLOCK], row[BLOCK], linked[BLOCK], link[BLOCK];
    uint64_t query[BLOCK];
    double value[BLOCK], value_c[BLOCK];
    for (int64_t t = 0; t < n_types; t++) {
        int64_t before = prerequisite[t];
        const uint8_t *row_before = before >= 0 ? row_found + before * n_events : NULL;
        const uint8_t *link_before = before >= 0 ? link_found + before * n_events : NULL;
        uint8_t *row_here = row_found + t * n_events, *link_here = link_found + t * n_events;
        for (int64_t lo = type_bounds[t]; lo < type_bounds[t + 1]; lo += BLOCK) {
            int64_t hi = lo + BLOCK < type_bounds[t + 1] ? lo + BLOCK : type_bounds[t + 1];
            int64_t n = 0;
            for (int64_t i = lo; i < hi; i++) {
                if (!row_before || row_before[pair_event[i]]) {
                    pair[n] = i;
                    query[n] = pair_key[i];
                    n++;
                }
            }
            entry_positions(features, query, n, row);
            /* Branch-free gathers first (their cache misses overlap), sums after. */
            for (int64_t j = 0; j < n; j++)
                value[j] = m_star[2 * (row[j] > 0 ? row[j] : 0) + 1];
            int64_t k = 0;
            for (int64_t j = 0; j < n; j++) {
                if (row[j] < 0)
                    continue;
                int64_t i = pair[j], event = pair_event[i];
                m_star_sum[event] += value[j];
                n_features[event] += 1;
                row_here[event] = 1;
                if (!link_before || link_before[event]) {
                    linked[k] = i;
                    query[k] = hash64_combine(pair_key[i], (uint64_t)(int64_t)target[event])
                               & l->mask;
                    k++;
                }
            }
            entry_positions(links, query, k, link);
            for (int64_t j = 0; j < k; j++) {
                int64_t r = link[j] > 0 ? link[j] : 0;
                value[j] = l->link_m[2 * r + 1];
                value_c[j] = l->link_c[r];
            }
            for (int64_t j = 0; j < k; j++) {
                if (link[j] < 0)
                    continue;
                int64_t event = pair_event[linked[j]];
                if (value[j] < 0) { /* a shared key (rare): settled by (feature, word) */
                    int64_t r = collision_row(l, query[j], pair_key[linked[j]], target[event]);
                    if (r < 0)
                        continue;
                    value[j] = l->m[r];
                    value_c[j] = l->c[r];
                }
                link_m_sum[event] += value[j];
                link_c_sum[event] += value_c[j];
                link_here[event] = 1;
            }
        }
    }
}

/* --- the features of states (left-to-right scoring) ------------------------------------------- */

/* Each window's hash (before the salt) and whether it gives a pair, for each of n
 * states: base, remote (n_windows, n) uint64, valid, fresh (n_windows, n) zeros; see
 * hashed_kernels.state_pairs.  Returns the pairs of one tag. */
int64_t state_windows(const int32_t *words, int64_t n, int64_t width, const int64_t *length,
                      const int64_t *windows, const int64_t *type_windows, int64_t types,
                      uint64_t seed, uint64_t *base, uint64_t *remote, uint8_t *valid,
                      uint8_t *fresh) {
    int64_t total = 0;
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
                total += is_fresh;
                base[g * n + i] = h;
            }
        }
    }
    return total;
}

/* The pairs of state_windows' windows, tag-major: key, event (tags * total), and
 * type_bounds (tags * types + 1). */
void state_pairs(const uint64_t *base, const uint8_t *fresh, int64_t n, const int64_t *type_windows,
                 const uint64_t *salts, int64_t tags, int64_t types, uint64_t *key,
                 int64_t *event, int64_t *type_bounds) {
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
