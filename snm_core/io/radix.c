/* Least-significant-digit radix sorts of uint64 values, for snm_core/io/radix.py
 * (which documents them): eight bits a pass, only as many passes as the largest
 * value has bits, a pass skipped when every value shares its digit.  Stable: a
 * value's row (uint32), when given, moves with it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DIGIT_BITS 8
#define DIGITS (1 << DIGIT_BITS)
#define MAX_PASSES (64 / DIGIT_BITS)

/* Sort keys[0..n) in place, rows[0..n) (or NULL) with them; key_tmp, row_tmp hold n. */
static void radix_sort_in(uint64_t *keys, uint32_t *rows, int64_t n, uint64_t *key_tmp,
                          uint32_t *row_tmp) {
    if (n < 2)
        return;
    uint64_t largest = 0;
    for (int64_t i = 0; i < n; i++)
        largest = keys[i] > largest ? keys[i] : largest;
    int passes = 0;
    while (passes < MAX_PASSES && (largest >> (passes * DIGIT_BITS)) > 0)
        passes++;
    int64_t counts[MAX_PASSES][DIGITS] = {{0}};
    for (int64_t i = 0; i < n; i++) {
        uint64_t value = keys[i];
        for (int p = 0; p < passes; p++)
            counts[p][(value >> (p * DIGIT_BITS)) & (DIGITS - 1)]++;
    }
    uint64_t first = keys[0];
    uint64_t *source = keys, *target = key_tmp;
    uint32_t *source_rows = rows, *target_rows = row_tmp;
    for (int p = 0; p < passes; p++) {
        int shift = p * DIGIT_BITS;
        if (counts[p][(first >> shift) & (DIGITS - 1)] == n) /* one digit: nothing moves */
            continue;
        int64_t start[DIGITS], total = 0;
        for (int d = 0; d < DIGITS; d++) {
            start[d] = total;
            total += counts[p][d];
        }
        if (rows) {
            for (int64_t i = 0; i < n; i++) {
                uint64_t value = source[i];
                int64_t at = start[(value >> shift) & (DIGITS - 1)]++;
                target[at] = value;
                target_rows[at] = source_rows[i];
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                uint64_t value = source[i];
                target[start[(value >> shift) & (DIGITS - 1)]++] = value;
            }
        }
        uint64_t *k = source;
        source = target;
        target = k;
        uint32_t *r = source_rows;
        source_rows = target_rows;
        target_rows = r;
    }
    if (source != keys) {
        memcpy(keys, source, sizeof(uint64_t) * n);
        if (rows)
            memcpy(rows, source_rows, sizeof(uint32_t) * n);
    }
}

/* Sort keys[0..n) in place, rows (or NULL) with them.  Returns -1 when out of memory. */
int64_t radix_sort(uint64_t *keys, uint32_t *rows, int64_t n) {
    uint64_t *key_tmp = malloc(sizeof(uint64_t) * (n ? n : 1));
    uint32_t *row_tmp = rows ? malloc(sizeof(uint32_t) * (n ? n : 1)) : NULL;
    if (!key_tmp || (rows && !row_tmp)) {
        free(key_tmp);
        free(row_tmp);
        return -1;
    }
    radix_sort_in(keys, rows, n, key_tmp, row_tmp);
    free(key_tmp);
    free(row_tmp);
    return 0;
}

/* The stable sorting permutation of keys[0..n) (n < 2^32) into order, keys unchanged;
 * the caller's scratch: 2n uint64 and n uint32 (kept between calls, so that their
 * pages are faulted in once). */
void radix_argsort(const uint64_t *keys, int64_t n, uint32_t *order, uint64_t *scratch_keys,
                   uint32_t *scratch_order) {
    memcpy(scratch_keys, keys, sizeof(uint64_t) * n);
    for (int64_t i = 0; i < n; i++)
        order[i] = (uint32_t)i;
    radix_sort_in(scratch_keys, order, n, scratch_keys + n, scratch_order);
}
