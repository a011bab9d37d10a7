/* Compiled loops of the adjustment model: meta-feature entries, the fit's
 * batches (forward, gradient, AdaGrad) and the apply stage's M_fw.
 *
 * Loaded with ctypes by snm_core/fit/kernels.py, which documents the functions
 * and checks their arguments.  A batch runs in one call on `threads` POSIX
 * threads; every sum is taken in an order that does not depend on their
 * number, so results do not either.
 *
 * The meta-feature definition is snm_core/fit/metafeatures.py's (hashes, the
 * conjunction fold, the two log2 buckets of a count and their weights); the
 * tests hold these loops to that numpy code.  Entries of a link split into
 *
 *   row entries         L: feature?, type, feature count, diversity?
 *   untargeted entries  per link-count bucket s: s, s.L; per continuation
 *                       bucket c: c, c.u for u in L + s + s.L
 *   targeted entries    (lexicalized) t, t.L, and per bucket s: s.t, s.t.L
 *
 * where a.b is the conjunction (hash a * CONJOIN + b, weights multiplied)
 * and t the target word.  Untargeted entries are the same for every link of
 * a class (row, C(f,w), continuation): they are enumerated once per class,
 * their theta positions stored once per fit.  Targeted entries are hashed
 * as they are used.  "Pruned" enumeration drops the zero-weight second
 * bucket of a count that is an exact power of two (and every conjunction it
 * is part of); "full" enumeration keeps it, so every class has the same
 * number of untargeted entries (the stored width).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../text/hash64.h"

#define CONJOIN 0x9FB21C651E98DF25ULL

/* Upper bounds of the entry lists: L 6, untargeted 2 * 7 + 2 * 21,
 * targeted 7 + 2 * 7. */
#define MAX_L 6
#define MAX_UNTARGETED_LIST 20
#define MAX_ENTRIES 80
#define MAX_THREADS 16
/* Counts below this take their log2 buckets from a table. */
#define LOG_TABLE 4096
/* Links whose targeted entries are hashed, then prefetched, together. */
#define LINK_BLOCK 4
/* Targeted entries of a link at most: 7 + 2 * 7. */
#define MAX_TARGETED 21
/* Gradient pairs are sorted into buckets of 2**BUCKET_SHIFT positions
 * (256 KiB of float64 gradient: a core's L2 cache holds one). */
#define BUCKET_SHIFT 15
/* The direct path splits a batch's rows into this many lanes, whatever the
 * number of threads; each lane sums its own gradient, and the lanes are
 * added in lane order. */
#define LANES 8
/* Pairs between a gradient prefetch and its use. */
#define APPLY_AHEAD 16

typedef struct {
    int32_t feature_identity; /* 'feature' in L (lexicalized, feature-only) */
    int32_t target;           /* lexicalized */
    int32_t link_count;       /* all but feature-only */
    int32_t diversity;
    int32_t continuation;
    int32_t padding;
    uint64_t hash_size;
    uint64_t ns_feature, ns_type, ns_feature_count, ns_diversity, ns_target, ns_link_count,
        ns_continuation;
} Spec;

/* Small M compiled for training.  Rows are features; a row's classes are its
 * links grouped by (C(f,w), continuation); a unit is what M is computed for:
 * a class (unlexicalized, feature-only) or a link (lexicalized, grouped by
 * class). */
typedef struct {
    int64_t num_rows;
    const uint64_t *row_key;
    const uint64_t *row_type;     /* type fingerprint */
    const int64_t *row_count;     /* C(f,*) */
    const int64_t *row_diversity;
    const int64_t *row_class_ptr; /* classes of row r: [ptr[r], ptr[r+1]) */
    const int64_t *row_unit_ptr;  /* units of row r: [ptr[r], ptr[r+1]) */
    const int64_t *class_count;   /* C(f,w) */
    const int64_t *class_continuation; /* NULL unless spec.continuation */
    const int32_t *class_mult;    /* links in the class */
    const int64_t *class_link_ptr; /* lexicalized: links of class c: [ptr[c], ptr[c+1]) */
    const int32_t *link_word;     /* lexicalized */
    int64_t width;                /* stored untargeted entries per class */
    const uint16_t *pos16;        /* their theta positions (one of the two), width a */
    const int32_t *pos32;         /* row: of class c, or of signature class_signature[c] */
    const int32_t *class_signature; /* NULL: a row of positions per class */
    /* Slot -> position, one cache line a lookup: line k (8 words) covers
     * slots [448 k, 448 (k+1)); its word 0 is the position of the first slot
     * in use there, words 1-7 mark the slots in use (bit i of word 1 + j is
     * slot 448 k + 64 j + i).  A slot's position adds the marks below it.
     * NULL: theta is the whole table, the position of a slot is the slot. */
    const uint64_t *slot_index;
    int64_t num_params;
    /* At most this many positions: the gradient is added in place, by
     * position ranges (it fits a core's cache); more: through sorted pairs. */
    int64_t direct_params;
    /* Units whose gradient pairs are sorted at once (rounds of a batch). */
    int64_t round_units;
} Problem;

/* One batch: the rows its events touch and its pairs (event, feature). */
typedef struct {
    int64_t n_rows;
    const int64_t *rows;        /* global row of each local row */
    const int64_t *offset;      /* first unit of each local row in m (n_rows + 1) */
    int64_t n_events;
    const int64_t *event_pairs; /* CSR over the pairs (n_events + 1) */
    const int64_t *pair_local;  /* local row of each pair */
    const int64_t *pair_unit;   /* index in m of the target's unit, -1 if unseen */
    const double *stale;        /* M_f* of each local row to use in y(e), or NULL */
} Batch;

/* A thread's gradient pairs, one stream per bucket of positions: each pair
 * packs a position (high 32 bits) and a float32 value (low 32). */
typedef struct {
    uint64_t **data;
    int64_t *n, *cap;
    int64_t n_buckets;
} Streams;

/* Buffers kept between batches (allocation and page faults once, not per batch). */
typedef struct {
    double *m;
    int64_t m_cap;
    double *m_star, *alpha;
    int64_t rows_cap;
    int64_t *first_at;
    double *first_value;
    int64_t first_cap;
    Streams streams[MAX_THREADS];
    double *lanes; /* LANES gradients of num_params (the direct path) */
    int64_t lanes_cap;
    int failed;
    /* Seconds spent in each phase of batch_step (see PHASES in kernels.py). */
    double seconds[8];
} Workspace;

typedef struct {
    uint64_t h;
    double w;
} Entry;

typedef struct {
    Entry L[MAX_L]; /* pruned */
    int nL;
    Entry F[MAX_L]; /* full */
    int nF;
} Row;

static double log_frac[LOG_TABLE];
static int32_t log_floor[LOG_TABLE];

static inline uint64_t slot_of(uint64_t raw, uint64_t hash_size) {
    return ((hash64_mix(raw) >> 32) * hash_size) >> 32;
}

#define INDEX_SLOTS 448 /* slots a line of the slot index covers */

static inline const uint64_t *index_line(const Problem *p, uint64_t slot) {
    return p->slot_index + (slot / INDEX_SLOTS) * 8;
}

static inline int64_t position_of(const Problem *p, uint64_t slot) {
    if (!p->slot_index)
        return (int64_t)slot;
    const uint64_t *line = index_line(p, slot);
    uint64_t offset = slot % INDEX_SLOTS;
    int word = (int)(offset >> 6);
    int64_t position = (int64_t)line[0];
    for (int i = 0; i < word; i++)
        position += __builtin_popcountll(line[1 + i]);
    return position + __builtin_popcountll(line[1 + word] & ((1ULL << (offset & 63)) - 1));
}

static inline int64_t entry_position(const Spec *s, const Problem *p, uint64_t raw) {
    return position_of(p, slot_of(raw, s->hash_size));
}

/* The two log2 buckets of count >= 1 and their weights; returns how many are
 * kept (1 at an exact power of two when pruned, else 2). */
static inline int count_buckets(int64_t count, int prune, uint64_t *bucket, double *weight) {
    double low, frac;
    if (count < LOG_TABLE) {
        low = log_floor[count];
        frac = log_frac[count];
    } else {
        double level = log2((double)count);
        low = floor(level);
        frac = level - low;
    }
    bucket[0] = (uint64_t)(int64_t)low;
    if (frac == 0.0) {
        bucket[1] = bucket[0];
        weight[0] = 1.0;
        weight[1] = 0.0;
        return prune ? 1 : 2;
    }
    bucket[1] = bucket[0] + 1;
    weight[0] = 1.0 - frac;
    weight[1] = frac;
    return 2;
}

static void fill_log_table(void) {
    for (int c = 1; c < LOG_TABLE; c++) {
        double level = log2((double)c);
        double low = floor(level);
        log_floor[c] = (int32_t)low;
        log_frac[c] = level - low;
    }
}

static int feature_list(const Spec *s, uint64_t key, uint64_t type, int64_t count,
                        int64_t diversity, int prune, Entry *out) {
    uint64_t b[2];
    double w[2];
    int n = 0;
    if (s->feature_identity) {
        out[n].h = hash64_combine(s->ns_feature, key);
        out[n++].w = 1.0;
    }
    out[n].h = hash64_combine(s->ns_type, type);
    out[n++].w = 1.0;
    int k = count_buckets(count, prune, b, w);
    for (int i = 0; i < k; i++) {
        out[n].h = hash64_combine(s->ns_feature_count, b[i]);
        out[n++].w = w[i];
    }
    if (s->diversity) {
        k = count_buckets(diversity, prune, b, w);
        for (int i = 0; i < k; i++) {
            out[n].h = hash64_combine(s->ns_diversity, b[i]);
            out[n++].w = w[i];
        }
    }
    return n;
}

static inline void row_lists(const Spec *s, uint64_t key, uint64_t type, int64_t count,
                             int64_t diversity, Row *row) {
    row->nL = feature_list(s, key, type, count, diversity, 1, row->L);
    row->nF = feature_list(s, key, type, count, diversity, 0, row->F);
}

/* Untargeted entries of a class of a row with feature list L (n_l entries). */
static inline int untargeted_entries(const Spec *s, const Entry *L, int n_l, int64_t count,
                                     int64_t continuation, int prune, Entry *out) {
    Entry unt[MAX_UNTARGETED_LIST];
    uint64_t b[2];
    double w[2];
    int n = 0, n_unt = n_l;
    memcpy(unt, L, sizeof(Entry) * n_l);
    if (s->link_count) {
        int k = count_buckets(count, prune, b, w);
        for (int j = 0; j < k; j++) {
            uint64_t c = hash64_combine(s->ns_link_count, b[j]);
            out[n].h = unt[n_unt].h = c;
            out[n++].w = unt[n_unt++].w = w[j];
            for (int i = 0; i < n_l; i++) {
                out[n].h = unt[n_unt].h = c * CONJOIN + L[i].h;
                out[n++].w = unt[n_unt++].w = w[j] * L[i].w;
            }
        }
    }
    if (s->continuation) {
        int k = count_buckets(continuation + 1, prune, b, w);
        for (int j = 0; j < k; j++) {
            uint64_t c = hash64_combine(s->ns_continuation, b[j]);
            out[n].h = c;
            out[n++].w = w[j];
            for (int i = 0; i < n_unt; i++) {
                out[n].h = c * CONJOIN + unt[i].h;
                out[n++].w = w[j] * unt[i].w;
            }
        }
    }
    return n;
}

/* Targeted entries of a link (lexicalized; none otherwise). */
static inline int targeted_entries(const Spec *s, const Entry *L, int n_l, int32_t word,
                                   int64_t count, int prune, Entry *out) {
    if (!s->target)
        return 0;
    uint64_t t = hash64_combine(s->ns_target, (uint64_t)(int64_t)word);
    int n = 0;
    out[n].h = t;
    out[n++].w = 1.0;
    for (int i = 0; i < n_l; i++) {
        out[n].h = t * CONJOIN + L[i].h;
        out[n++].w = L[i].w;
    }
    int n_t = n;
    if (s->link_count) {
        uint64_t b[2];
        double w[2];
        int k = count_buckets(count, prune, b, w);
        for (int j = 0; j < k; j++) {
            uint64_t c = hash64_combine(s->ns_link_count, b[j]);
            for (int i = 0; i < n_t; i++) {
                out[n].h = c * CONJOIN + out[i].h;
                out[n++].w = w[j] * out[i].w;
            }
        }
    }
    return n;
}

static inline void load_row(const Spec *s, const Problem *p, int64_t r, Row *row) {
    row_lists(s, p->row_key[r], p->row_type[r], p->row_count[r], p->row_diversity[r], row);
}

static inline int64_t class_continuation(const Problem *p, int64_t c) {
    return p->class_continuation ? p->class_continuation[c] : 0;
}

/* --- threads ----------------------------------------------------------------------- */

typedef void (*task_fn)(void *context, int thread, int threads);

typedef struct {
    task_fn fn;
    void *context;
    int thread, threads;
} TaskArgs;

static void *task_trampoline(void *arg) {
    TaskArgs *a = (TaskArgs *)arg;
    a->fn(a->context, a->thread, a->threads);
    return NULL;
}

/* Runs fn(context, t, n) for t < n, on n threads (the caller's among them). */
static void run_threads(int n, task_fn fn, void *context) {
    pthread_t handles[MAX_THREADS];
    TaskArgs args[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 1; t < n; t++) {
        args[t] = (TaskArgs){fn, context, t, n};
        started[t] = pthread_create(&handles[t], NULL, task_trampoline, &args[t]) == 0;
    }
    fn(context, 0, n);
    for (int t = 1; t < n; t++) {
        if (started[t])
            pthread_join(handles[t], NULL);
        else
            fn(context, t, n);
    }
}

/* Thread t's share of local rows [row_lo, row_hi): about equal numbers of
 * units (offset[i] is local row i's first unit). */
static void split_rows(const int64_t *offset, int64_t row_lo, int64_t row_hi, int t, int threads,
                       int64_t *lo, int64_t *hi) {
    int64_t first = offset[row_lo], total = offset[row_hi] - first;
    int64_t bounds[2];
    for (int k = 0; k < 2; k++) {
        int64_t target = first + (int64_t)((double)total * (t + k) / threads);
        int64_t a = row_lo, b = row_hi; /* the first row whose offset >= target */
        while (a < b) {
            int64_t mid = (a + b) / 2;
            if (offset[mid] < target)
                a = mid + 1;
            else
                b = mid;
        }
        bounds[k] = (t + k == threads) ? row_hi : a;
    }
    *lo = bounds[0];
    *hi = bounds[1];
}

/* --- building ---------------------------------------------------------------------- */

static inline void mark(uint64_t *bits, uint64_t slot) { bits[slot >> 6] |= 1ULL << (slot & 63); }

/* Sets the bit of every slot some entry of rows [lo, hi) has a non-zero weight for. */
int64_t mark_used_slots(const Spec *s, const Problem *p, int64_t lo, int64_t hi,
                        uint64_t *bits) {
    Row row;
    Entry e[MAX_ENTRIES];
    for (int64_t r = lo; r < hi; r++) {
        load_row(s, p, r, &row);
        for (int i = 0; i < row.nL; i++)
            mark(bits, slot_of(row.L[i].h, s->hash_size));
        for (int64_t c = p->row_class_ptr[r]; c < p->row_class_ptr[r + 1]; c++) {
            int n = untargeted_entries(s, row.L, row.nL, p->class_count[c],
                                       class_continuation(p, c), 1, e);
            for (int i = 0; i < n; i++)
                mark(bits, slot_of(e[i].h, s->hash_size));
            if (!s->target)
                continue;
            for (int64_t l = p->class_link_ptr[c]; l < p->class_link_ptr[c + 1]; l++) {
                n = targeted_entries(s, row.L, row.nL, p->link_word[l], p->class_count[c], 1,
                                     e);
                for (int i = 0; i < n; i++)
                    mark(bits, slot_of(e[i].h, s->hash_size));
            }
        }
    }
    return 0;
}

/* What a class's untargeted entries depend on when L has no feature identity
 * (unlexicalized): its row's type id and, for each count (feature, diversity,
 * link, continuation), its low bucket and whether it is a power of two (the
 * second bucket then has weight 0 and position 0).  out[c] for the classes
 * of rows [lo, hi). */
int64_t class_signatures(const Spec *s, const Problem *p, const int64_t *row_type_id, int64_t lo,
                         int64_t hi, int64_t *out) {
    uint64_t b[2];
    double w[2];
    for (int64_t r = lo; r < hi; r++) {
        int64_t row_part = row_type_id[r];
        int64_t counts[2] = {p->row_count[r], s->diversity ? p->row_diversity[r] : 1};
        for (int k = 0; k < 2; k++) {
            count_buckets(counts[k], 0, b, w);
            row_part = (row_part << 7) | (int64_t)(b[0] << 1) | (w[1] == 0.0);
        }
        for (int64_t c = p->row_class_ptr[r]; c < p->row_class_ptr[r + 1]; c++) {
            int64_t key = row_part;
            int64_t class_counts[2] = {p->class_count[c], class_continuation(p, c) + 1};
            for (int k = 0; k < 2; k++) {
                count_buckets(class_counts[k], 0, b, w);
                key = (key << 7) | (int64_t)(b[0] << 1) | (w[1] == 0.0);
            }
            out[c] = key;
        }
    }
    return 0;
}

/* Stores the theta positions of the full untargeted entries of classes[j]
 * (in row rows[j]), j in [lo, hi): width a class at out + j * width, position
 * 0 where the weight is 0 (such a slot need not be in use). */
int64_t store_positions(const Spec *s, const Problem *p, const int64_t *rows,
                        const int64_t *classes, int64_t lo, int64_t hi, uint16_t *pos16,
                        int32_t *pos32) {
    Row row;
    Entry e[MAX_ENTRIES];
    int64_t loaded = -1;
    for (int64_t j = lo; j < hi; j++) {
        if (rows[j] != loaded) {
            load_row(s, p, rows[j], &row);
            loaded = rows[j];
        }
        int64_t c = classes[j];
        int n = untargeted_entries(s, row.F, row.nF, p->class_count[c], class_continuation(p, c),
                                   0, e);
        if (n != p->width)
            return -1;
        for (int i = 0; i < n; i++) {
            int64_t pos = e[i].w > 0 ? entry_position(s, p, e[i].h) : 0;
            if (pos16)
                pos16[j * n + i] = (uint16_t)pos;
            else
                pos32[j * n + i] = (int32_t)pos;
        }
    }
    return 0;
}

/* --- A and M ------------------------------------------------------------------------ */

static inline double row_sum(const Spec *s, const Problem *p, const Row *row,
                             const float *theta) {
    double a = 0.0;
    for (int i = 0; i < row->nL; i++)
        a += theta[entry_position(s, p, row->L[i].h)] * row->L[i].w;
    return a;
}

/* Sum of the class's stored entries, of weights w (the full enumeration's). */
static inline int64_t positions_row(const Problem *p, int64_t c) {
    return p->class_signature ? p->class_signature[c] : c;
}

static inline double class_sum(const Problem *p, int64_t c, const double *w, int n,
                               const float *theta) {
    double a = 0.0;
    if (p->pos16) {
        const uint16_t *pos = p->pos16 + positions_row(p, c) * n;
        for (int i = 0; i < n; i++)
            a += theta[pos[i]] * w[i];
    } else {
        const int32_t *pos = p->pos32 + positions_row(p, c) * n;
        for (int i = 0; i < n; i++)
            a += theta[pos[i]] * w[i];
    }
    return a;
}

/* The weights of untargeted_entries(row->F, ..., full), without their hashes
 * (the positions are stored): the same products in the same order. */
static inline int class_weights(const Spec *s, const Problem *p, const Row *row, int64_t c,
                                double *out) {
    if (!p->width)
        return 0;
    double unt[MAX_UNTARGETED_LIST], w[2];
    uint64_t b[2];
    int n = 0, n_unt = row->nF;
    for (int i = 0; i < row->nF; i++)
        unt[i] = row->F[i].w;
    if (s->link_count) {
        count_buckets(p->class_count[c], 0, b, w);
        for (int j = 0; j < 2; j++) {
            out[n++] = unt[n_unt++] = w[j];
            for (int i = 0; i < row->nF; i++)
                out[n++] = unt[n_unt++] = w[j] * row->F[i].w;
        }
    }
    if (s->continuation) {
        count_buckets(class_continuation(p, c) + 1, 0, b, w);
        for (int j = 0; j < 2; j++) {
            out[n++] = w[j];
            for (int i = 0; i < n_unt; i++)
                out[n++] = w[j] * unt[i];
        }
    }
    return n;
}

/* An unlexicalized class's part of A, factored.  Its full untargeted entries
 * are groups of 1 + nF: a head of weight P_g, a product of the class's
 * link-count and continuation bucket weights (s0, s1; then for each
 * continuation weight c: c, c s0, c s1), and the row's full list F scaled by
 * P_g (the layout of class_weights).  So the part is sum_g P_g T_g with
 * T_g = theta[head] + sum_i F_i theta[pos_i], the same for every class of a
 * row with the same signature: T is computed once per (row, signature), and
 * a row's gradient is summed per (row, signature) and group before it is
 * spread over the entries. */
#define MAX_GROUPS 8
#define SIG_BITS 8
#define SIG_SLOTS (1 << SIG_BITS)
#define SIG_FILL 192

static inline int class_prefixes(const Spec *s, const Problem *p, int64_t c, double *out) {
    double sw[2], cw[2];
    uint64_t b[2];
    int n = 0;
    if (s->link_count) {
        count_buckets(p->class_count[c], 0, b, sw);
        out[n++] = sw[0];
        out[n++] = sw[1];
    }
    if (s->continuation) {
        count_buckets(class_continuation(p, c) + 1, 0, b, cw);
        for (int l = 0; l < 2; l++) {
            out[n++] = cw[l];
            if (s->link_count) {
                out[n++] = cw[l] * sw[0];
                out[n++] = cw[l] * sw[1];
            }
        }
    }
    return n;
}

typedef struct {
    int64_t stamp;
    int32_t signature;
    double v[MAX_GROUPS];
} SigEntry;

/* The (row, signature) entries of one row at a time: a slot is empty unless its
 * stamp is the current one; `order` keeps the entries in the order first seen. */
typedef struct {
    SigEntry e[SIG_SLOTS];
    int16_t order[SIG_FILL];
    int n;
    int64_t stamp;
} SigCache;

static void sig_reset(SigCache *cache) {
    cache->stamp++;
    cache->n = 0;
}

static void sig_init(SigCache *cache) {
    for (int i = 0; i < SIG_SLOTS; i++)
        cache->e[i].stamp = -1;
    cache->stamp = 0;
    cache->n = 0;
}

/* The entry of `signature`, *fresh set if it was made now; NULL when the cache is full. */
static inline SigEntry *sig_find(SigCache *cache, int32_t signature, int *fresh) {
    uint32_t i = ((uint32_t)signature * 0x9E3779B1u) >> (32 - SIG_BITS);
    for (;; i = (i + 1) & (SIG_SLOTS - 1)) {
        SigEntry *e = &cache->e[i];
        if (e->stamp != cache->stamp) {
            if (cache->n == SIG_FILL)
                return NULL;
            e->stamp = cache->stamp;
            e->signature = signature;
            cache->order[cache->n++] = (int16_t)i;
            *fresh = 1;
            return e;
        }
        if (e->signature == signature) {
            *fresh = 0;
            return e;
        }
    }
}

/* T_g of class c's signature in a row with full list F (nF entries). */
static inline void group_sums(const Problem *p, int64_t c, const Row *row, int n_groups,
                              const float *theta, double *out) {
    int64_t at = (int64_t)p->class_signature[c] * p->width;
    int group = 1 + row->nF;
    for (int g = 0; g < n_groups; g++, at += group) {
        double t;
        if (p->pos16) {
            const uint16_t *pos = p->pos16 + at;
            t = theta[pos[0]];
            for (int i = 0; i < row->nF; i++)
                t += theta[pos[1 + i]] * row->F[i].w;
        } else {
            const int32_t *pos = p->pos32 + at;
            t = theta[pos[0]];
            for (int i = 0; i < row->nF; i++)
                t += theta[pos[1 + i]] * row->F[i].w;
        }
        out[g] = t;
    }
}

/* Whether class parts are factored (unlexicalized: positions shared by signature). */
static inline int factored(const Spec *s, const Problem *p) {
    return p->class_signature && !s->target && p->width;
}

/* The class part of A of class c (factored; see above), T from the cache when it has it. */
static inline double factored_part(const Spec *s, const Problem *p, const Row *row, int64_t c,
                                   const float *theta, SigCache *cache) {
    double prefix[MAX_GROUPS], fresh_sums[MAX_GROUPS];
    int n_groups = class_prefixes(s, p, c, prefix);
    int fresh = 0;
    SigEntry *e = sig_find(cache, p->class_signature[c], &fresh);
    double *sums = e ? e->v : fresh_sums;
    if (!e || fresh)
        group_sums(p, c, row, n_groups, theta, sums);
    double a = 0.0;
    for (int g = 0; g < n_groups; g++)
        a += prefix[g] * sums[g];
    return a;
}

/* Where a row's gradient pairs go: added in place to positions [lo, hi) of
 * grad, or appended to the streams of their buckets. */
typedef struct {
    double *grad;
    int64_t lo, hi;
    Streams *streams;
    int failed;
} Sink;

static int grow(void **array, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap)
        return 0;
    int64_t cap2 = *cap ? *cap : 1024;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*array, (size_t)cap2 * size);
    if (!p)
        return -1;
    *array = p;
    *cap = cap2;
    return 0;
}

static int streams_prepare(Streams *q, int64_t n_buckets) {
    if (q->n_buckets < n_buckets) {
        uint64_t **data = realloc(q->data, sizeof(uint64_t *) * n_buckets);
        if (data)
            q->data = data;
        int64_t *n = realloc(q->n, sizeof(int64_t) * n_buckets);
        if (n)
            q->n = n;
        int64_t *cap = realloc(q->cap, sizeof(int64_t) * n_buckets);
        if (cap)
            q->cap = cap;
        if (!data || !n || !cap)
            return -1;
        for (int64_t b = q->n_buckets; b < n_buckets; b++) {
            q->data[b] = NULL;
            q->cap[b] = 0;
        }
        q->n_buckets = n_buckets;
    }
    memset(q->n, 0, sizeof(int64_t) * q->n_buckets);
    return 0;
}

static void streams_free(Streams *q) {
    for (int64_t b = 0; b < q->n_buckets; b++)
        free(q->data[b]);
    free(q->data);
    free(q->n);
    free(q->cap);
}

static inline void emit(Sink *sink, int64_t pos, double value) {
    if (sink->streams) {
        Streams *q = sink->streams;
        int64_t b = pos >> BUCKET_SHIFT;
        if (q->n[b] == q->cap[b] && grow((void **)&q->data[b], &q->cap[b], q->n[b] + 1,
                                         sizeof(uint64_t))) {
            sink->failed = 1;
            return;
        }
        float v = (float)value;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        q->data[b][q->n[b]++] = ((uint64_t)pos << 32) | bits;
    } else if (pos >= sink->lo && pos < sink->hi) {
        sink->grad[pos] += value;
    }
}

/* The targeted entries of the links [l0, l1) of class c, in three stages a
 * block of links apart, so that the cache misses of many entries are in
 * flight at once: hash the entries (and prefetch their slots' bits); find
 * their positions (and prefetch theta, or nothing); use them.  Forward
 * (sink NULL): out[k] = M of link l0 + k, whose untargeted part of A is
 * a_class.  Gradient: emits each entry's position with g[k] times its weight. */
static inline void link_pass(const Spec *s, const Problem *p, const Row *row, int64_t c,
                             int64_t l0, int64_t l1, double a_class, double rel,
                             const float *theta, double *out, const double *g, Sink *sink) {
    enum { B = LINK_BLOCK, E = MAX_TARGETED };
    uint64_t slot[3][B * E];
    int32_t pos[3][B * E];
    double wt[3][B * E];
    int count[3][B];
    Entry e[MAX_ENTRIES];
    int64_t n_blocks = (l1 - l0 + B - 1) / B;
    for (int64_t k = 0; k < n_blocks + 2; k++) {
        if (k < n_blocks) {
            int z = (int)(k % 3), m = 0;
            int64_t b0 = l0 + k * B, b1 = b0 + B < l1 ? b0 + B : l1;
            for (int64_t l = b0; l < b1; l++) {
                int n = targeted_entries(s, row->L, row->nL, p->link_word[l], p->class_count[c],
                                         1, e);
                count[z][l - b0] = n;
                for (int j = 0; j < n; j++, m++) {
                    slot[z][m] = slot_of(e[j].h, s->hash_size);
                    wt[z][m] = e[j].w;
                    if (p->slot_index)
                        __builtin_prefetch(index_line(p, slot[z][m]));
                }
            }
        }
        if (k >= 1 && k - 1 < n_blocks) {
            int z = (int)((k - 1) % 3), m = 0;
            int64_t b0 = l0 + (k - 1) * B, b1 = b0 + B < l1 ? b0 + B : l1;
            for (int64_t l = b0; l < b1; l++)
                for (int j = 0; j < count[z][l - b0]; j++, m++) {
                    pos[z][m] = (int32_t)position_of(p, slot[z][m]);
                    if (!sink)
                        __builtin_prefetch(theta + pos[z][m]);
                }
        }
        if (k >= 2) {
            int z = (int)((k - 2) % 3), m = 0;
            int64_t b0 = l0 + (k - 2) * B, b1 = b0 + B < l1 ? b0 + B : l1;
            for (int64_t l = b0; l < b1; l++) {
                if (sink) {
                    for (int j = 0; j < count[z][l - b0]; j++, m++)
                        emit(sink, pos[z][m], g[l - l0] * wt[z][m]);
                    continue;
                }
                double a = a_class;
                for (int j = 0; j < count[z][l - b0]; j++, m++)
                    a += theta[pos[z][m]] * wt[z][m];
                out[l - l0] = rel * exp(a);
            }
        }
    }
}

static inline void link_values(const Spec *s, const Problem *p, const Row *row, int64_t c,
                               int64_t l0, int64_t l1, double a_class, double rel,
                               const float *theta, double *out) {
    link_pass(s, p, row, c, l0, l1, a_class, rel, theta, out, NULL, NULL);
}

/* M of every unit of row r into m (NULL: not kept); returns M_f*. */
static double row_values(const Spec *s, const Problem *p, int64_t r, const float *theta,
                         double *m, SigCache *cache) {
    Row row;
    double cw[MAX_ENTRIES];
    double scratch[256];
    load_row(s, p, r, &row);
    sig_reset(cache);
    int by_signature = factored(s, p);
    double a_row = row_sum(s, p, &row, theta), total = (double)p->row_count[r], sum = 0.0;
    int64_t unit = 0;
    for (int64_t c = p->row_class_ptr[r]; c < p->row_class_ptr[r + 1]; c++) {
        double a_class;
        if (by_signature) {
            a_class = a_row + factored_part(s, p, &row, c, theta, cache);
        } else {
            int n = class_weights(s, p, &row, c, cw);
            a_class = a_row + class_sum(p, c, cw, n, theta);
        }
        double rel = p->class_count[c] / total;
        if (!s->target) {
            double value = rel * exp(a_class);
            if (m)
                m[unit] = value;
            unit++;
            sum += p->class_mult[c] * value;
            continue;
        }
        int64_t l0 = p->class_link_ptr[c], l1 = p->class_link_ptr[c + 1];
        int64_t chunk = m ? l1 - l0 : 256;
        for (int64_t b0 = l0; b0 < l1; b0 += chunk) {
            int64_t b1 = b0 + chunk < l1 ? b0 + chunk : l1;
            double *out = m ? m + unit : scratch;
            link_values(s, p, &row, c, b0, b1, a_class, rel, theta, out);
            for (int64_t k = 0; k < b1 - b0; k++)
                sum += out[k];
            unit += b1 - b0;
        }
    }
    return sum;
}

typedef struct {
    const Spec *s;
    const Problem *p;
    const float *theta;
    const int64_t *rows, *offset;
    int64_t n_rows;
    double *m, *m_star;
} ForwardTask;

static void forward_task(void *context, int t, int threads) {
    ForwardTask *f = (ForwardTask *)context;
    int64_t lo, hi;
    SigCache cache;
    sig_init(&cache);
    split_rows(f->offset, 0, f->n_rows, t, threads, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        f->m_star[i] = row_values(f->s, f->p, f->rows ? f->rows[i] : i, f->theta,
                                  f->m ? f->m + f->offset[i] : NULL, &cache);
}

/* M_f* of rows (local rows i < n_rows; rows NULL: every row, offset =
 * row_unit_ptr) and, unless m is NULL, the M of their units at m + offset[i]. */
int64_t forward(const Spec *s, const Problem *p, const float *theta, const int64_t *rows,
                const int64_t *offset, int64_t n_rows, int64_t threads, double *m,
                double *m_star) {
    ForwardTask task = {s, p, theta, rows, offset, n_rows, m, m_star};
    run_threads((int)threads, forward_task, &task);
    return 0;
}

/* M of single units: out[j] = M of unit (row rows[j], class classes[j], link
 * links[j] if lexicalized), j < n; consecutive units of one row or class
 * share its entries. */
int64_t unit_values(const Spec *s, const Problem *p, const float *theta, const int64_t *rows,
                    const int64_t *classes, const int64_t *links, int64_t n, double *out) {
    Row row;
    double cw[MAX_ENTRIES];
    int64_t loaded_row = -1, loaded_class = -1;
    double a_row = 0.0, a_class = 0.0, rel = 0.0;
    SigCache cache;
    sig_init(&cache);
    for (int64_t j = 0; j < n; j++) {
        int64_t r = rows[j], c = classes[j];
        if (r != loaded_row) {
            load_row(s, p, r, &row);
            a_row = row_sum(s, p, &row, theta);
            sig_reset(&cache);
            loaded_row = r;
            loaded_class = -1;
        }
        if (c != loaded_class) {
            if (factored(s, p)) {
                a_class = a_row + factored_part(s, p, &row, c, theta, &cache);
            } else {
                int k = class_weights(s, p, &row, c, cw);
                a_class = a_row + class_sum(p, c, cw, k, theta);
            }
            rel = p->class_count[c] / (double)p->row_count[r];
            loaded_class = c;
        }
        if (s->target)
            link_values(s, p, &row, c, links[j], links[j] + 1, a_class, rel, theta, out + j);
        else
            out[j] = rel * exp(a_class);
    }
    return 0;
}

/* --- the events -------------------------------------------------------------------- */

/* Sum of log P over the events: pair j of event e adds norm[norm_index[j]]
 * (M_f*) to y(e) and, with m_index[j] >= 0, m[m_index[j]] (M_ft) to y_t(e).
 * With alpha: adds 1/y(e) to alpha[alpha_index[j]] and writes the first
 * gradient terms (m index, M_ft / y_t(e)) of the pairs with a target, in
 * pair order; *n_first is set to their number. */
double events_pass(int64_t n_events, const int64_t *event_pairs, const int64_t *norm_index,
                   const double *norm, const int64_t *m_index, const double *m,
                   const int64_t *alpha_index, double *alpha, int64_t *first_at,
                   double *first_value, int64_t *n_first) {
    double loglik = 0.0;
    int64_t k = 0;
    for (int64_t e = 0; e < n_events; e++) {
        double y = 0.0, y_t = 0.0;
        for (int64_t j = event_pairs[e]; j < event_pairs[e + 1]; j++) {
            y += norm[norm_index[j]];
            if (m_index[j] >= 0)
                y_t += m[m_index[j]];
        }
        loglik += log(y_t) - log(y);
        if (!alpha)
            continue;
        for (int64_t j = event_pairs[e]; j < event_pairs[e + 1]; j++) {
            alpha[alpha_index[j]] += 1.0 / y;
            if (m_index[j] >= 0) {
                first_at[k] = m_index[j];
                first_value[k++] = m[m_index[j]] / y_t;
            }
        }
    }
    if (n_first)
        *n_first = k;
    return loglik;
}

/* --- the gradient ------------------------------------------------------------------- */

/* Emits the (row, signature) gradient sums the cache holds, group by group, and
 * empties it. */
static void flush_groups(const Problem *p, const Row *row, SigCache *cache, Sink *sink) {
    int group = 1 + row->nF, n_groups = (int)(p->width / group);
    for (int k = 0; k < cache->n; k++) {
        const SigEntry *e = &cache->e[cache->order[k]];
        int64_t at = (int64_t)e->signature * p->width;
        for (int g = 0; g < n_groups; g++, at += group) {
            double v = e->v[g];
            if (v == 0.0)
                continue;
            emit(sink, p->pos16 ? p->pos16[at] : p->pos32[at], v);
            for (int i = 0; i < row->nF; i++)
                if (row->F[i].w != 0.0)
                    emit(sink, p->pos16 ? p->pos16[at + 1 + i] : p->pos32[at + 1 + i],
                         v * row->F[i].w);
        }
    }
    sig_reset(cache);
}

/* The class entries of classes [from, to) of row r (factored, added in
 * place): each class's gradient times its prefixes, summed per signature.
 * The cache is empty on entry and left empty. */
static void emit_factored(const Spec *s, const Problem *p, int64_t r, const Row *row,
                          const double *g, int64_t from, int64_t to, Sink *sink,
                          SigCache *cache) {
    double prefix[MAX_GROUPS];
    int64_t first = p->row_class_ptr[r];
    for (int64_t c = first + from; c < first + to; c++) {
        int n_groups = class_prefixes(s, p, c, prefix), fresh = 0;
        SigEntry *e = sig_find(cache, p->class_signature[c], &fresh);
        if (!e) {
            flush_groups(p, row, cache, sink);
            e = sig_find(cache, p->class_signature[c], &fresh);
        }
        if (fresh)
            memset(e->v, 0, sizeof(e->v));
        for (int k = 0; k < n_groups; k++)
            e->v[k] += g[c - first] * prefix[k];
    }
    flush_groups(p, row, cache, sink);
}

/* The gradient pairs of row r's units [from, to) (units' gradients g[0...]):
 * the row's own entries go with its first unit, a class's untargeted entries
 * with the class's first unit, so any cut of a row's units emits the pairs in
 * the order the whole row would.  Added in place, factored classes are summed
 * per (row, signature) within the cut instead: the lanes are cut by units
 * alone, so the sums' order still does not depend on the threads; in streams,
 * cut by threads, every class emits its own pairs. */
static int emit_row(const Spec *s, const Problem *p, int64_t r, const double *g, int64_t from,
                    int64_t to, Sink *sink, SigCache *cache) {
    Row row;
    double cw[MAX_ENTRIES];
    load_row(s, p, r, &row);
    if (from == 0) {
        int64_t n_units = p->row_unit_ptr[r + 1] - p->row_unit_ptr[r];
        double g_row = 0.0;
        for (int64_t u = 0; u < n_units; u++)
            g_row += g[u];
        for (int j = 0; j < row.nL; j++)
            emit(sink, entry_position(s, p, row.L[j].h), g_row * row.L[j].w);
    }
    if (factored(s, p) && !sink->streams) {
        emit_factored(s, p, r, &row, g, from, to, sink, cache);
        return sink->failed ? -1 : 0;
    }
    int64_t unit = 0;
    for (int64_t c = p->row_class_ptr[r]; c < p->row_class_ptr[r + 1] && unit < to; c++) {
        int64_t units = s->target ? p->class_link_ptr[c + 1] - p->class_link_ptr[c] : 1;
        if (unit + units <= from) {
            unit += units;
            continue;
        }
        if (unit >= from) {
            double g_class = 0.0;
            for (int64_t u = 0; u < units; u++)
                g_class += g[unit + u];
            int n = class_weights(s, p, &row, c, cw);
            for (int j = 0; j < n; j++) {
                if (cw[j] == 0.0)
                    continue;
                int64_t at = positions_row(p, c) * n + j;
                int64_t pos = p->pos16 ? p->pos16[at] : p->pos32[at];
                emit(sink, pos, g_class * cw[j]);
            }
        }
        if (s->target) {
            int64_t l0 = p->class_link_ptr[c];
            int64_t a = from > unit ? from - unit : 0, b = to - unit < units ? to - unit : units;
            link_pass(s, p, &row, c, l0 + a, l0 + b, 0.0, 0.0, NULL, NULL, g + unit + a, sink);
        }
        unit += units;
    }
    return sink->failed ? -1 : 0;
}

/* Local row of unit u of a batch (offset: first unit of each local row). */
static int64_t row_of_unit(const int64_t *offset, int64_t n_rows, int64_t u) {
    int64_t a = 0, b = n_rows; /* the last row whose offset <= u */
    while (b - a > 1) {
        int64_t mid = (a + b) / 2;
        if (offset[mid] <= u)
            a = mid;
        else
            b = mid;
    }
    return a;
}

/* The pairs of batch units [u0, u1), row after row. */
static int emit_units(const Spec *s, const Problem *p, const Batch *b, const double *g,
                      int64_t u0, int64_t u1, Sink *sink) {
    if (u0 >= u1)
        return 0;
    SigCache cache;
    sig_init(&cache);
    for (int64_t i = row_of_unit(b->offset, b->n_rows, u0); i < b->n_rows && b->offset[i] < u1;
         i++) {
        int64_t first = b->offset[i];
        int64_t from = u0 > first ? u0 - first : 0;
        int64_t to = (u1 < b->offset[i + 1] ? u1 : b->offset[i + 1]) - first;
        if (emit_row(s, p, b->rows[i], g + first, from, to, sink, &cache))
            return -1;
    }
    return 0;
}

typedef struct {
    const Spec *s;
    const Problem *p;
    const Batch *batch;
    Workspace *w;
    const double *g;
    double *grad;
    int64_t unit_lo, unit_hi; /* the round's units */
    int64_t n_buckets;
    /* After the last round (gamma > 0): each bucket's AdaGrad step, taken as soon as
     * its positions' sums are complete, while they are in cache. */
    double gamma;
    float *theta, *acc;
} ScatterTask;

/* AdaGrad on positions [lo, hi): acc += g^2, theta += gamma g / sqrt(acc), g reset.
 * Without a branch on g != 0, so that it vectorises (a select stops gcc): where
 * g is 0 both floats come back unchanged (acc > 0 from delta0 on; theta only
 * loses the sign of a zero, which no sum or probability sees). */
static void adagrad_step(float *restrict theta, float *restrict acc, double *restrict grad,
                         int64_t lo, int64_t hi, double gamma) {
    for (int64_t k = lo; k < hi; k++) {
        double g = grad[k];
        float a = (float)(acc[k] + g * g);
        acc[k] = a;
        theta[k] = (float)(theta[k] + gamma * g / sqrt((double)a));
        grad[k] = 0.0;
    }
}

/* Direct: thread t sums the gradient of lanes t, t + threads, ... */
static void scatter_lane_task(void *context, int t, int threads) {
    ScatterTask *a = (ScatterTask *)context;
    int64_t n = a->p->num_params, units = a->batch->offset[a->batch->n_rows];
    for (int lane = t; lane < LANES; lane += threads) {
        double *grad = a->w->lanes + lane * n;
        memset(grad, 0, sizeof(double) * n);
        Sink sink = {grad, 0, n, NULL, 0};
        emit_units(a->s, a->p, a->batch, a->g, units * lane / LANES,
                   units * (lane + 1) / LANES, &sink);
    }
}

/* Direct: thread t adds the lanes, in lane order, to its range of positions. */
static void scatter_sum_task(void *context, int t, int threads) {
    ScatterTask *a = (ScatterTask *)context;
    int64_t n = a->p->num_params, lo = n * t / threads, hi = n * (t + 1) / threads;
    for (int64_t k = lo; k < hi; k++) {
        double sum = 0.0;
        for (int lane = 0; lane < LANES; lane++)
            sum += a->w->lanes[lane * n + k];
        a->grad[k] += sum;
    }
}

/* Streams: thread t emits the pairs of its share of the round's units. */
static void scatter_emit_task(void *context, int t, int threads) {
    ScatterTask *a = (ScatterTask *)context;
    Streams *q = &a->w->streams[t];
    if (streams_prepare(q, a->n_buckets)) {
        a->w->failed = 1;
        return;
    }
    int64_t n = a->unit_hi - a->unit_lo;
    Sink sink = {NULL, 0, 0, q, 0};
    if (emit_units(a->s, a->p, a->batch, a->g, a->unit_lo + n * t / threads,
                   a->unit_lo + n * (t + 1) / threads, &sink))
        a->w->failed = 1;
}

/* Streams: thread t adds the pairs of its buckets, every thread's in thread order. */
static void scatter_apply_task(void *context, int t, int threads) {
    ScatterTask *a = (ScatterTask *)context;
    int64_t b_lo = a->n_buckets * t / threads, b_hi = a->n_buckets * (t + 1) / threads;
    for (int64_t bucket = b_lo; bucket < b_hi; bucket++) {
        for (int k = 0; k < threads; k++) {
            const Streams *q = &a->w->streams[k];
            const uint64_t *data = q->data[bucket];
            int64_t n = q->n[bucket];
            for (int64_t i = 0; i < n; i++) {
                if (i + APPLY_AHEAD < n)
                    __builtin_prefetch(a->grad + (data[i + APPLY_AHEAD] >> 32), 1);
                uint32_t bits = (uint32_t)data[i];
                float v;
                memcpy(&v, &bits, 4);
                a->grad[data[i] >> 32] += v;
            }
        }
        if (a->gamma > 0) {
            int64_t lo = bucket << BUCKET_SHIFT, hi = lo + ((int64_t)1 << BUCKET_SHIFT);
            adagrad_step(a->theta, a->acc, a->grad, lo,
                         hi < a->p->num_params ? hi : a->p->num_params, a->gamma);
        }
    }
}

/* --- the batch ----------------------------------------------------------------------- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Adds the seconds since *mark to phase k and moves the mark. */
static void lap(Workspace *w, int k, double *mark) {
    double t = now();
    w->seconds[k] += t - *mark;
    *mark = t;
}

/* The workspace's seconds per phase (8 values). */
void workspace_seconds(const Workspace *w, double *out) { memcpy(out, w->seconds, sizeof(w->seconds)); }

Workspace *workspace_new(void) { return (Workspace *)calloc(1, sizeof(Workspace)); }

void workspace_free(Workspace *w) {
    if (!w)
        return;
    free(w->m);
    free(w->m_star);
    free(w->alpha);
    free(w->first_at);
    free(w->first_value);
    free(w->lanes);
    for (int t = 0; t < MAX_THREADS; t++)
        streams_free(&w->streams[t]);
    free(w);
}

/* Bytes the workspace holds. */
int64_t workspace_bytes(const Workspace *w) {
    int64_t bytes = w->m_cap * 8 + w->rows_cap * 16 + w->first_cap * 16 + w->lanes_cap * 8;
    for (int t = 0; t < MAX_THREADS; t++)
        for (int64_t b = 0; b < w->streams[t].n_buckets; b++)
            bytes += w->streams[t].cap[b] * 8;
    return bytes;
}

typedef struct {
    const Problem *p;
    const Batch *b;
    double *m;
    const double *alpha;
} NormTask;

static void normalisation_task(void *context, int t, int threads) {
    NormTask *a = (NormTask *)context;
    const Problem *p = a->p;
    int64_t lo, hi;
    split_rows(a->b->offset, 0, a->b->n_rows, t, threads, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t r = a->b->rows[i];
        double *m = a->m + a->b->offset[i];
        if (p->class_link_ptr) {
            for (int64_t u = 0; u < a->b->offset[i + 1] - a->b->offset[i]; u++)
                m[u] *= -a->alpha[i];
        } else {
            for (int64_t c = p->row_class_ptr[r]; c < p->row_class_ptr[r + 1]; c++)
                m[c - p->row_class_ptr[r]] *= -a->alpha[i] * p->class_mult[c];
        }
    }
}

/* Adds the gradient of the batch's log-likelihood to grad (num_params); with
 * gamma > 0 then takes an AdaGrad step (acc += g^2, theta += gamma g /
 * sqrt(acc), grad reset to 0).  Returns the log-likelihood (at theta before
 * the step); NAN if memory ran out. */
double batch_step(const Spec *s, const Problem *p, const Batch *b, float *theta, float *acc,
                  double *grad, double gamma, int64_t threads, Workspace *w) {
    int64_t n_units = b->offset[b->n_rows];
    int64_t n_pairs = b->event_pairs[b->n_events];
    w->failed = 0;
    if (grow((void **)&w->m, &w->m_cap, n_units, sizeof(double)))
        return NAN;
    int64_t cap = w->rows_cap;
    if (grow((void **)&w->m_star, &cap, b->n_rows, sizeof(double)))
        return NAN;
    cap = w->rows_cap;
    if (grow((void **)&w->alpha, &cap, b->n_rows, sizeof(double)))
        return NAN;
    w->rows_cap = cap;
    cap = w->first_cap;
    if (grow((void **)&w->first_at, &cap, n_pairs, sizeof(int64_t)))
        return NAN;
    cap = w->first_cap;
    if (grow((void **)&w->first_value, &cap, n_pairs, sizeof(double)))
        return NAN;
    w->first_cap = cap;

    double mark = now();
    ForwardTask forward_args = {s, p, theta, b->rows, b->offset, b->n_rows, w->m, w->m_star};
    run_threads((int)threads, forward_task, &forward_args);
    lap(w, 0, &mark);
    memset(w->alpha, 0, sizeof(double) * b->n_rows);
    int64_t n_first = 0;
    double loglik = events_pass(b->n_events, b->event_pairs, b->pair_local,
                                b->stale ? b->stale : w->m_star, b->pair_unit, w->m,
                                b->pair_local, w->alpha, w->first_at, w->first_value, &n_first);
    NormTask norm = {p, b, w->m, w->alpha};
    run_threads((int)threads, normalisation_task, &norm);
    for (int64_t k = 0; k < n_first; k++) /* in pair order */
        w->m[w->first_at[k]] += w->first_value[k];
    lap(w, 1, &mark);

    ScatterTask scatter = {s, p, b, w, w->m, grad, 0, 0, 0, 0.0, theta, acc};
    if (p->num_params <= p->direct_params) {
        if (grow((void **)&w->lanes, &w->lanes_cap, LANES * p->num_params, sizeof(double)))
            return NAN;
        run_threads((int)threads, scatter_lane_task, &scatter);
        run_threads((int)threads, scatter_sum_task, &scatter);
        lap(w, 2, &mark);
    } else {
        scatter.n_buckets = ((p->num_params - 1) >> BUCKET_SHIFT) + 1;
        /* Rounds of round_units units, cut independently of the threads: each
         * position's pairs arrive in unit order. */
        int64_t round = p->round_units > 0 ? p->round_units : n_units;
        for (int64_t u = 0; u < n_units; u += round) {
            scatter.unit_lo = u;
            scatter.unit_hi = u + round < n_units ? u + round : n_units;
            scatter.gamma = scatter.unit_hi == n_units ? gamma : 0.0;
            run_threads((int)threads, scatter_emit_task, &scatter);
            lap(w, 2, &mark);
            if (w->failed)
                return NAN;
            run_threads((int)threads, scatter_apply_task, &scatter);
            lap(w, 3, &mark);
        }
    }
    if (gamma > 0 && (p->num_params <= p->direct_params || n_units == 0)) {
        adagrad_step(theta, acc, grad, 0, p->num_params, gamma);
        lap(w, 4, &mark);
    }
    return loglik;
}

/* --- apply ----------------------------------------------------------------------------- */

/* exp(A) of a link by everything A depends on without the feature's identity and the
 * target among the meta-features (unlexicalized): the row's type, C(f,*) and
 * diversity, the link's C(f,w) and continuation.  A few such tuples (counts of 1 for
 * each type) make most links, so most links look their A up instead of summing
 * ~20 weights read at random from theta. */
enum { MEMO_BITS = 14 };
typedef struct {
    uint64_t type;
    int64_t count, diversity, link_count, continuation;
    double exp_a;
} MemoEntry;

static inline MemoEntry *memo_slot(MemoEntry *memo, uint64_t type, int64_t count,
                                   int64_t diversity, int64_t link_count, int64_t cont) {
    uint64_t h = type ^ ((uint64_t)count * 0x9E3779B97F4A7C15ULL)
                 ^ ((uint64_t)diversity * 0xC2B2AE3D27D4EB4FULL)
                 ^ ((uint64_t)link_count * 0x165667B19E3779F9ULL)
                 ^ ((uint64_t)cont * 0x27D4EB2F165667C5ULL);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    return memo + (h >> (64 - MEMO_BITS));
}

/* M_fw of every link and M_f* of every feature of one count bucket, rows
 * [lo, hi): links of row r are [link_ptr[r], link_ptr[r+1]); theta is the
 * dense hash_size table.  Returns 0, or -1 if the table of exp(A) cannot be had. */
int64_t adjust_links(const Spec *s, const uint64_t *key, const uint64_t *type,
                     const int64_t *count, const int64_t *diversity, const int64_t *link_ptr,
                     const int32_t *word, const int64_t *link_count,
                     const int64_t *continuation, const float *theta, int64_t lo, int64_t hi,
                     float *m, double *m_star) {
    Entry L[MAX_L], e[MAX_ENTRIES];
    MemoEntry *memo = NULL;
    if (!s->feature_identity && !s->target) {
        memo = malloc(sizeof(MemoEntry) << MEMO_BITS);
        if (!memo)
            return -1;
        for (int64_t i = 0; i < (1 << MEMO_BITS); i++)
            memo[i].count = -1; /* no C(f,*) is negative: an empty slot */
    }
    for (int64_t r = lo; r < hi; r++) {
        int n_l = -1; /* the row's list, made when a link first needs it */
        double a_row = 0.0;
        double total = (double)count[r], sum = 0.0;
        /* Without target entries a link's A depends on it only through its count and
         * continuation: most of a row's links repeat the previous link's pair. */
        int64_t last_count = -1, last_cont = -1;
        double exp_a = 0.0;
        for (int64_t l = link_ptr[r]; l < link_ptr[r + 1]; l++) {
            int64_t cont = continuation ? continuation[l] : 0;
            if (s->target || link_count[l] != last_count || cont != last_cont) {
                MemoEntry *slot = memo ? memo_slot(memo, type[r], count[r], diversity[r],
                                                   link_count[l], cont) : NULL;
                if (slot && slot->count == count[r] && slot->type == type[r]
                    && slot->diversity == diversity[r] && slot->link_count == link_count[l]
                    && slot->continuation == cont) {
                    exp_a = slot->exp_a;
                } else {
                    if (n_l < 0) {
                        n_l = feature_list(s, key[r], type[r], count[r], diversity[r], 1, L);
                        for (int i = 0; i < n_l; i++)
                            a_row += theta[slot_of(L[i].h, s->hash_size)] * L[i].w;
                    }
                    int n = untargeted_entries(s, L, n_l, link_count[l], cont, 1, e);
                    n += targeted_entries(s, L, n_l, word[l], link_count[l], 1, e + n);
                    double a = a_row;
                    for (int i = 0; i < n; i++)
                        a += theta[slot_of(e[i].h, s->hash_size)] * e[i].w;
                    exp_a = exp(a);
                    if (slot)
                        *slot = (MemoEntry){type[r], count[r], diversity[r], link_count[l],
                                            cont, exp_a};
                }
                last_count = link_count[l];
                last_cont = cont;
            }
            double value = link_count[l] / total * exp_a;
            m[l] = (float)value;
            sum += value;
        }
        m_star[r] = sum;
    }
    free(memo);
    return 0;
}

/* --- compact model ------------------------------------------------------------------ */

/* The key index of sorted keys, a chunk at a time: keys[0..n) follow `base`
 * keys already indexed; for every slot s from next_slot to the top `bits`
 * bits of the last key, start[s - next_slot] = the position of the first key
 * whose top bits are >= s.  Returns the next slot to fill. */
int64_t key_index_chunk(const uint64_t *keys, int64_t n, int64_t bits, int64_t base,
                        int64_t next_slot, int64_t *start) {
    int64_t s = next_slot;
    for (int64_t i = 0; i < n; i++) {
        int64_t slot = bits ? (int64_t)(keys[i] >> (64 - bits)) : 0;
        while (s <= slot)
            start[s++ - next_slot] = base + i;
    }
    return s;
}

/* Entries of the given rows and links, for tests: slots and weights, full
 * enumeration, row entries (6 places) and link entries (width places:
 * untargeted then targeted); unused places have slot -1, weight 0. */
int64_t link_entries(const Spec *s, const uint64_t *key, const uint64_t *type,
                     const int64_t *count, const int64_t *diversity, int64_t n_rows,
                     const int64_t *link_ptr, const int32_t *word, const int64_t *link_count,
                     const int64_t *continuation, int64_t width, int64_t *row_slot,
                     double *row_weight, int64_t *slot, double *weight) {
    Entry L[MAX_L], e[MAX_ENTRIES];
    for (int64_t r = 0; r < n_rows; r++) {
        int n_l = feature_list(s, key[r], type[r], count[r], diversity[r], 0, L);
        for (int i = 0; i < MAX_L; i++) {
            row_slot[r * MAX_L + i] = i < n_l ? (int64_t)slot_of(L[i].h, s->hash_size) : -1;
            row_weight[r * MAX_L + i] = i < n_l ? L[i].w : 0.0;
        }
        for (int64_t l = link_ptr[r]; l < link_ptr[r + 1]; l++) {
            int64_t cont = continuation ? continuation[l] : 0;
            int n = untargeted_entries(s, L, n_l, link_count[l], cont, 0, e);
            n += targeted_entries(s, L, n_l, word ? word[l] : 0, link_count[l], 0, e + n);
            if (n > width)
                return -1;
            for (int i = 0; i < width; i++) {
                slot[l * width + i] = i < n ? (int64_t)slot_of(e[i].h, s->hash_size) : -1;
                weight[l * width + i] = i < n ? e[i].w : 0.0;
            }
        }
    }
    return 0;
}

/* A module object, so that pip builds and installs this file like any
 * extension; its functions are called through ctypes. */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels",
                                    "Compiled loops of the adjustment model (see kernels.py).",
                                    -1, NULL};

PyMODINIT_FUNC PyInit__kernels(void) {
    fill_log_table();
    return PyModule_Create(&module);
}

/* Called by kernels.py after loading the library with ctypes; returns a
 * version number it checks. */
int64_t initialise(void) {
    fill_log_table();
    return 3;
}
