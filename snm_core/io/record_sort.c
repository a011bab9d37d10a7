/* Sorting 16-byte records (record_sort.h) by (key, minor), the payload moved with
 * them: the count's sums (snm_core/count/link_sums.c) and the hashed layout's link
 * table (snm_core/scoring/layouts/hashed_build.py).  An argsort followed by gathers
 * reads every column at random once more, which on millions of rows cost more than
 * the sort.
 *
 * A most-significant-digit radix sort, out of place between two buffers: keys are
 * hashes, taken from the top of their span (key_span: a bucket's or a partition's keys
 * share their high bits), so each level splits its rows evenly (8 bits a digit for a
 * large run, about log2(rows) - 2, at most 12, for a small one) and two or three levels
 * leave runs short enough for insertion.  A digit that every row of a run shares moves
 * nothing. */
#include <stdint.h>
#include <string.h>

#include "record_sort.h"

#define INSERTION_ROWS 16
#define SORT_BITS 96 /* 64 of the key, then 32 of the minor */
/* A run of at most WIDE_ROWS rows takes a digit of about log2(rows) - 2 bits (at most
 * MAX_DIGIT_BITS), so that its hashed keys split into runs of a few rows: 8-bit digits
 * left runs of 10-30 rows, whose insertion sorts took half the sort, and a 10-bit cap
 * left runs of 16 under the 16K-row runs of a 4M-row sort (a hashed layout's partition). */
#define WIDE_ROWS 65536
#define MAX_DIGIT_BITS 12

/* The `bits` bits of (key, minor) from bit `pos` (0: the key's highest); a digit never
 * spans the key's end. */
static inline unsigned digit_at(const record_t *r, int pos, int bits) {
    return pos < 64 ? (unsigned)((r->key << pos) >> (64 - bits))
                    : (unsigned)((uint32_t)(r->minor << (pos - 64)) >> (32 - bits));
}

static inline int digit_bits(int64_t n, int pos) {
    int bits = 8;
    if (n <= WIDE_ROWS) {
        bits = 62 - __builtin_clzll((uint64_t)n);
        bits = bits < 4 ? 4 : bits > MAX_DIGIT_BITS ? MAX_DIGIT_BITS : bits;
    }
    int end = pos < 64 ? 64 : SORT_BITS;
    return pos + bits > end ? end - pos : bits;
}

static inline int before(const record_t *a, const record_t *b) {
    return a->key < b->key || (a->key == b->key && a->minor < b->minor);
}

static void insertion_sort(record_t *a, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        record_t r = a[i];
        int64_t j = i;
        while (j > 0 && before(&r, &a[j - 1])) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = r;
    }
}

/* Sort src[0, n) by (key, minor) from bit pos on, into out, which is src or dst (a
 * buffer of n rows that may be overwritten). */
static void msd_sort(record_t *src, record_t *dst, int64_t n, int pos, record_t *out) {
    int64_t next[1 << MAX_DIGIT_BITS];
    while (pos < SORT_BITS && n > INSERTION_ROWS) {
        int bits = digit_bits(n, pos), digits = 1 << bits;
        memset(next, 0, sizeof(int64_t) * (size_t)digits);
        for (int64_t i = 0; i < n; i++) next[digit_at(&src[i], pos, bits)]++;
        if (next[digit_at(&src[0], pos, bits)] == n) { /* every row shares this digit */
            pos += bits;
            continue;
        }
        int64_t at = 0;
        for (int b = 0; b < digits; b++) {
            int64_t rows = next[b];
            next[b] = at;
            at += rows;
        }
        for (int64_t i = 0; i < n; i++) dst[next[digit_at(&src[i], pos, bits)]++] = src[i];
        /* next[b] is now digit b's end */
        for (int64_t b = 0, lo = 0; b < digits; lo = next[b], b++) {
            if (next[b] == lo) continue;
            record_t *in = dst + lo, *other = src + lo;
            msd_sort(in, other, next[b] - lo, pos + bits, out == src ? other : in);
        }
        return;
    }
    insertion_sort(src, n);
    if (out != src) memcpy(out, src, (size_t)n * sizeof(record_t));
}

/* The keys' span: rows sort by (key - low) << shift as by key, and the top digit of
 * that splits the rows even where every key shares its high bits (a bucket's range). */
static void span_every(const uint64_t *key, int64_t n, int64_t stride, uint64_t *low,
                       int *shift) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = key[i * stride];
        if (k < lo) lo = k;
        if (k > hi) hi = k;
    }
    *low = n ? lo : 0;
    *shift = n && hi > lo ? __builtin_clzll(hi - lo) : 0;
}

void key_span(const uint64_t *key, int64_t n, uint64_t *low, int *shift) {
    span_every(key, n, 1, low, shift);
}

void sort_records(record_t *rows, record_t *spare, int64_t n) {
    msd_sort(rows, spare, n, 0, rows);
}

/* Records whose keys are whole hashes (not taken from their span yet) sorted by
 * (key, minor) in place; `spare` holds n records. */
void sort_keyed_records(record_t *rows, record_t *spare, int64_t n) {
    uint64_t lo;
    int shift;
    /* a record is two uint64 wide, its key the first */
    span_every(&rows[0].key, n, sizeof(record_t) / sizeof(uint64_t), &lo, &shift);
    for (int64_t i = 0; i < n; i++) rows[i].key = (rows[i].key - lo) << shift;
    msd_sort(rows, spare, n, 0, rows);
    for (int64_t i = 0; i < n; i++) rows[i].key = (rows[i].key >> shift) + lo;
}
