/* The text layer's loops, for snm_core/text/hashing.py and snm_core/text/word_table.py
 * (which document them): hashing whole arrays, and a vocabulary's hash table. */
#include <stdint.h>
#include <stdlib.h>

#include "hash64.h"

void mix64_array(const uint64_t *x, int64_t n, uint64_t *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = hash64_mix(x[i]);
}

/* out[i] = combine(h[i * h_step], values[i]): h_step 0 folds every value into one h. */
void combine_array(const uint64_t *h, int64_t h_step, const uint64_t *values, int64_t n,
                   uint64_t *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = hash64_combine(h[i * h_step], values[i]);
}

#define FNV_OFFSET 0xCBF29CE484222325ULL
#define FNV_PRIME 0x100000001B3ULL

/* FNV-1a of data[start..end) (only places words in a table; never stored). */
static inline uint64_t word_hash(const uint8_t *data, int64_t start, int64_t end) {
    uint64_t h = FNV_OFFSET;
    for (int64_t i = start; i < end; i++)
        h = (h ^ data[i]) * FNV_PRIME;
    return h;
}

/* Fill table (size a power of two, at least twice n, all -1) with the n distinct
 * words data[offsets[i]..offsets[i + 1]) by open addressing: slot -> word index. */
void word_table(const int64_t *offsets, const uint8_t *data, int64_t n, int32_t *table,
                int64_t size) {
    uint64_t mask = (uint64_t)size - 1;
    for (int64_t word = 0; word < n; word++) {
        uint64_t slot = word_hash(data, offsets[word], offsets[word + 1]) & mask;
        while (table[slot] >= 0)
            slot = (slot + 1) & mask;
        table[slot] = (int32_t)word;
    }
}

/* result[i] = the table's index of word data[offsets[i]..offsets[i + 1]), or missing. */
void word_ids(const int32_t *table, int64_t size, const int64_t *table_offsets,
              const uint8_t *table_data, const int64_t *offsets, const uint8_t *data, int64_t n,
              int32_t missing, int32_t *result) {
    uint64_t mask = (uint64_t)size - 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t start = offsets[i], end = offsets[i + 1];
        uint64_t slot = word_hash(data, start, end) & mask;
        int32_t found = missing;
        while (table[slot] >= 0) {
            int32_t word = table[slot];
            int64_t word_start = table_offsets[word];
            if (table_offsets[word + 1] - word_start == end - start) {
                int64_t j = 0;
                while (j < end - start && table_data[word_start + j] == data[start + j])
                    j++;
                if (j == end - start) {
                    found = word;
                    break;
                }
            }
            slot = (slot + 1) & mask;
        }
        result[i] = found;
    }
}

/* The identity words of k feature occurrences (snm_core/text/features.py,
 * EventFeatures.context_words): occurrence pairs[i] (of n_pairs) of window
 * generator[pairs[i]], whose (r, s, a) is windows[3 g .. 3 g + 3), at the event (of
 * n_events) whose target is seq[event_position[event[pairs[i]]]] (of n_seq), gets its r
 * remote words then its a adjacent words, oldest first, in row i of out (k x columns),
 * the rest -1.  `work` holds k int64.  Returns 0; -1 when a window does not fit the
 * columns or the sequence; -2 when a pair, event or position is out of range. */
int64_t context_words(const int32_t *seq, int64_t n_seq, const int16_t *generator,
                      const int64_t *event, int64_t n_pairs, const int64_t *event_position,
                      int64_t n_events, const int64_t *windows, int64_t n_windows,
                      const int64_t *pairs, int64_t k, int64_t columns, int64_t *work,
                      int32_t *out) {
    /* The pairs are in no order, so every read of a row is a miss: first each row's
     * target and window, in a loop of independent reads (they overlap), then its words. */
    for (int64_t i = 0; i < k; i++) {
        int64_t p = pairs[i];
        if (p < 0 || p >= n_pairs || event[p] < 0 || event[p] >= n_events) return -2;
        int64_t g = generator[p], position = event_position[event[p]];
        if (g < 0 || g >= n_windows || position < 0 || position >= n_seq) return -2;
        work[i] = position << 16 | g;
    }
    for (int64_t i = 0; i < k; i++) {
        int64_t g = work[i] & 0xFFFF;
        int64_t r = windows[3 * g], s = windows[3 * g + 1], a = windows[3 * g + 2];
        int64_t start = (work[i] >> 16) - a; /* the first adjacent word */
        if (r + a > columns || start - s - r < 0) return -1;
        int32_t *row = out + i * columns;
        for (int64_t j = 0; j < r; j++) row[j] = seq[start - s - r + j];
        for (int64_t j = 0; j < a; j++) row[r + j] = seq[start + j];
        for (int64_t j = r + a; j < columns; j++) row[j] = -1;
    }
    return 0;
}
