/* 16-byte records sorted by (key, minor) with their payload (record_sort.c). */
#ifndef SNM_RECORD_SORT_H
#define SNM_RECORD_SORT_H

#include <stdint.h>

typedef struct {
    uint64_t key;
    /* a link's word, a feature row's index (so equal keys keep row order), or the bits
     * of a hashed layout's M_fw */
    uint32_t minor;
    uint32_t value; /* a link's count, an occurrence's index, or the bits of c(w|f) */
} record_t;

/* rows[0, n) sorted by (key, minor); `spare` holds n records.  The keys should be taken
 * from the top of their span (key_span), so that the first digits split the rows. */
void sort_records(record_t *rows, record_t *spare, int64_t n);
/* The same for whole hashed keys, taken from their span and restored here. */
void sort_keyed_records(record_t *rows, record_t *spare, int64_t n);
/* The keys' span: rows sort by (key - low) << shift as by key. */
void key_span(const uint64_t *key, int64_t n, uint64_t *low, int *shift);

#endif
