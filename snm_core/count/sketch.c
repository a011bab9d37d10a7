/* The count's feature sketch (snm_core/count/sketch.py): saturating counters of
 * `bits` bits (2, 4 or 8), packed in bytes, 2^log2_cells of them.  A key counts in two
 * cells of one 64-byte line (one cache miss an occurrence); its estimate is the smaller
 * of the two, which is never below the key's true count.  Positions come from the key's
 * bits, which are already a hash. */
#include <stdint.h>
#include <string.h>

#define LINE_BITS 9 /* cells of a line: 512 bits = 64 bytes */

static inline void positions(uint64_t key, int64_t log2_cells, int bits, uint64_t *a,
                             uint64_t *b) {
    int line_cells = LINE_BITS - (bits == 2 ? 1 : bits == 4 ? 2 : 3);
    if (line_cells > log2_cells) line_cells = (int)log2_cells; /* a sketch within a line */
    uint64_t line = log2_cells > line_cells ? key >> (64 - (log2_cells - line_cells)) : 0;
    uint64_t mask = ((uint64_t)1 << line_cells) - 1;
    uint64_t first = key & mask, second = (key >> 16) & mask;
    if (second == first) second ^= 1;
    *a = (line << line_cells) | first;
    *b = (line << line_cells) | second;
}

static inline unsigned get(const uint8_t *cells, int bits, uint64_t at) {
    if (bits == 8) return cells[at];
    int per = 8 / bits;
    return (cells[at / per] >> ((at % per) * bits)) & ((1u << bits) - 1);
}

static inline void add(uint8_t *cells, int bits, uint64_t at) {
    unsigned top = (1u << bits) - 1;
    if (bits == 8) {
        if (cells[at] < top) cells[at]++;
        return;
    }
    int per = 8 / bits, shift = (int)(at % per) * bits;
    uint8_t *byte = cells + at / per;
    if (((*byte >> shift) & top) < top) *byte = (uint8_t)(*byte + (1u << shift));
}

/* Ask for the line of the key 8 ahead of i, so that its miss overlaps this key's work. */
static inline void prefetch_ahead(const uint8_t *cells, int64_t log2_cells, int bits,
                                  const uint64_t *keys, int64_t i, int64_t n) {
    if (i + 8 < n) {
        uint64_t a, b;
        positions(keys[i + 8], log2_cells, bits, &a, &b);
        __builtin_prefetch(cells + a * bits / 8);
    }
}

/* Count each of `keys` once. */
void sketch_add(uint8_t *cells, int64_t log2_cells, int32_t bits, const uint64_t *keys,
                int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t a, b;
        prefetch_ahead(cells, log2_cells, bits, keys, i, n);
        positions(keys[i], log2_cells, bits, &a, &b);
        add(cells, bits, a);
        add(cells, bits, b);
    }
}

/* keep[i] = 1 when the estimate of keys[i] is at least `minimum`; returns how many. */
int64_t sketch_keep(const uint8_t *cells, int64_t log2_cells, int32_t bits,
                    const uint64_t *keys, int64_t n, int32_t minimum, uint8_t *keep) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t a, b;
        prefetch_ahead(cells, log2_cells, bits, keys, i, n);
        positions(keys[i], log2_cells, bits, &a, &b);
        unsigned x = get(cells, bits, a), y = get(cells, bits, b);
        keep[i] = (x < y ? x : y) >= (unsigned)minimum;
        kept += keep[i];
    }
    return kept;
}

/* One byte's cells summed, saturating (the tail of sketch_merge). */
static inline uint8_t merge_byte(uint8_t into, uint8_t other, int bits) {
    unsigned top = (1u << bits) - 1, out = 0;
    for (int c = 0; c < 8 / bits; c++) {
        unsigned s = ((into >> (c * bits)) & top) + ((other >> (c * bits)) & top);
        out |= (s > top ? top : s) << (c * bits);
    }
    return (uint8_t)out;
}

/* 32 two-bit cells of a and b summed, saturating at 3, with the bits of a full adder. */
static inline uint64_t merge_word2(uint64_t a, uint64_t b) {
    const uint64_t low = 0x5555555555555555ull;
    uint64_t a0 = a & low, a1 = (a >> 1) & low, b0 = b & low, b1 = (b >> 1) & low;
    uint64_t sum0 = a0 ^ b0, carry0 = a0 & b0;
    uint64_t sum1 = a1 ^ b1 ^ carry0, over = (a1 & b1) | (carry0 & (a1 ^ b1));
    return sum0 | (sum1 << 1) | over | (over << 1);
}

/* 16 four-bit cells: the low and the high nibbles each summed in a byte (at most 30),
 * a byte's bit 4 the overflow that saturates its cell at 15. */
static inline uint64_t merge_word4(uint64_t a, uint64_t b) {
    const uint64_t nibbles = 0x0F0F0F0F0F0F0F0Full, bit4 = 0x1010101010101010ull;
    uint64_t low = (a & nibbles) + (b & nibbles);
    uint64_t high = ((a >> 4) & nibbles) + ((b >> 4) & nibbles);
    low |= ((low & bit4) >> 4) * 0xF;
    high |= ((high & bit4) >> 4) * 0xF;
    return (low & nibbles) | ((high & nibbles) << 4);
}

/* into += other, cell by cell, saturating: the sketch of two workers' text.  Eight bytes
 * at a time (a sketch is hundreds of MiB a worker and kind, merged in one thread). */
void sketch_merge(uint8_t *into, const uint8_t *other, int64_t n_bytes, int32_t bits) {
    int64_t i = 0;
    if (bits == 8) {
        for (; i < n_bytes; i++) {
            uint8_t s = (uint8_t)(into[i] + other[i]);
            into[i] = s < into[i] ? 0xFF : s;
        }
        return;
    }
    for (; i + 8 <= n_bytes; i += 8) {
        uint64_t a, b;
        memcpy(&a, into + i, 8);
        memcpy(&b, other + i, 8);
        a = bits == 2 ? merge_word2(a, b) : merge_word4(a, b);
        memcpy(into + i, &a, 8);
    }
    for (; i < n_bytes; i++) into[i] = merge_byte(into[i], other[i], bits);
}
