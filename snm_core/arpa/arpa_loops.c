/* The back-off form's and the ARPA text's loops (snm_core/arpa/arpa_loops.py, whose
 * functions document them and check their arguments): the scan's keys, joins by an
 * open-addressed table of hashes, rows cut by group, each link's words, and the lines
 * with their numbers in their shortest float32 form.
 *
 * Keys are hashes, so their low bits index a table (linear probing, at most half
 * full) without sorting them.  A string of at most 16 bytes is copied as one 16-byte
 * block and the position then advanced by its true length; outputs have SLACK bytes
 * past their text for the last block's overhang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../text/hash64.h"

#define EMPTY (-1)
#define SLACK 16
#define CELL 16
#define LONG_WORD 255
#define TAB 9
#define SPACE 32
#define NEWLINE 10

/* --- the scan's keys ------------------------------------------------------------------ */

/* Untagged n-gram contexts' keys, their suffixes' keys and each context's own entry
 * (the link key of its prefix's key and its last word; 0 for the empty context). */
void arpa_ngram_keys(const int64_t *words, int64_t width, const int64_t *lengths, int64_t m,
                     const uint64_t *salts, uint64_t seed, uint64_t *keys, uint64_t *suffix,
                     uint64_t *own) {
    for (int64_t i = 0; i < m; i++) {
        const int64_t *row = words + i * width;
        int64_t n = lengths[i];
        uint64_t h = seed;
        for (int64_t col = n - 1; col > 0; col--) h = hash64_combine(h, (uint64_t)row[col]);
        if (n == 0) {
            keys[i] = suffix[i] = hash64_mix(h ^ salts[0]);
            own[i] = 0;
            continue;
        }
        suffix[i] = hash64_mix(h ^ salts[n - 1]);
        keys[i] = hash64_mix(hash64_combine(h, (uint64_t)row[0]) ^ salts[n]);
        uint64_t p = seed;
        for (int64_t col = n - 2; col >= 0; col--) p = hash64_combine(p, (uint64_t)row[col]);
        own[i] = hash64_combine(hash64_mix(p ^ salts[n - 1]), (uint64_t)row[n - 1]);
    }
}

/* Links' entry keys and their suffixes' (an empty context's: its own). */
void arpa_link_keys(const uint64_t *keys, const uint64_t *suffix, const int64_t *lengths,
                    const int64_t *of, const int32_t *word, int64_t links, uint64_t *entry,
                    uint64_t *entry_suffix) {
    for (int64_t i = 0; i < links; i++) {
        uint64_t w = (uint64_t)word[i];
        entry[i] = hash64_combine(keys[of[i]], w);
        entry_suffix[i] = lengths[of[i]] > 0 ? hash64_combine(suffix[of[i]], w) : entry[i];
    }
}

/* A list column's word lists as rows of `width` words padded with -1, and their lengths
 * (a longer list keeps its first `width` words). */
void arpa_padded_words(const int64_t *offsets, int64_t m, const int32_t *values,
                       int64_t width, int64_t *words, int64_t *lengths) {
    for (int64_t i = 0; i < m; i++) {
        int64_t length = offsets[i + 1] - offsets[i];
        int64_t *row = words + i * width;
        lengths[i] = length;
        for (int64_t j = 0; j < width; j++)
            row[j] = j < length ? values[offsets[i] + j] : -1;
    }
}

/* --- joins by hash table -------------------------------------------------------------- */

static int table_bits(int64_t n) {
    int bits = 4;
    while ((INT64_C(1) << bits) < 2 * n) bits++;
    return bits;
}

/* Each row's group and each group's first row, groups numbered in the order of their
 * first rows; returns the groups, or -1 out of memory. */
int64_t arpa_group_rows(const uint64_t *keys, int64_t n, int64_t *group, int64_t *first) {
    uint64_t mask = (UINT64_C(1) << table_bits(n)) - 1;
    int64_t *table = malloc((mask + 1) * sizeof *table);
    if (!table) return -1;
    memset(table, 0xFF, (mask + 1) * sizeof *table); /* EMPTY */
    int64_t groups = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t slot = keys[i] & mask;
        for (;;) {
            int64_t g = table[slot];
            if (g == EMPTY) {
                table[slot] = groups;
                first[groups] = i;
                group[i] = groups++;
                break;
            }
            if (keys[first[g]] == keys[i]) {
                group[i] = g;
                break;
            }
            slot = (slot + 1) & mask;
        }
    }
    free(table);
    return groups;
}

/* find cuts keys and queries into chunks of about 2^CHUNK_BITS keys, each chunk's table
 * within a core's cache, by the key bits from CUT_SHIFT up: above the table's own (the
 * low bits) and below the partitions' (the high bits). */
#define CHUNK_BITS 14
#define CUT_SHIFT 24

/* Stable cut of values by chunk: chunk c's at bounds[c]:bounds[c + 1] of out, with
 * their positions. */
static void cut(const uint64_t *values, int64_t n, int64_t chunks, uint64_t *out,
                int64_t *position, int64_t *bounds, int64_t *cursor) {
    uint64_t mask = (uint64_t)chunks - 1;
    memset(bounds, 0, (chunks + 1) * sizeof *bounds);
    for (int64_t i = 0; i < n; i++) bounds[((values[i] >> CUT_SHIFT) & mask) + 1]++;
    for (int64_t c = 0; c < chunks; c++) bounds[c + 1] += bounds[c];
    memcpy(cursor, bounds, chunks * sizeof *cursor);
    for (int64_t i = 0; i < n; i++) {
        int64_t at = cursor[(values[i] >> CUT_SHIFT) & mask]++;
        out[at] = values[i];
        position[at] = i;
    }
}

/* The position of each query in keys (distinct), -1 where absent; returns 0, or -1 out
 * of memory. */
int64_t arpa_find(const uint64_t *keys, int64_t n, const uint64_t *queries, int64_t q,
                  int64_t *found) {
    int shift = table_bits(n) - 1 - CHUNK_BITS;
    int64_t chunks = INT64_C(1) << (shift > 0 ? shift : 0);
    uint64_t *cut_keys = malloc((n + 1) * sizeof *cut_keys);
    int64_t *rows = malloc((n + 1) * sizeof *rows);
    uint64_t *cut_queries = malloc((q + 1) * sizeof *cut_queries);
    int64_t *position = malloc((q + 1) * sizeof *position);
    int64_t *key_bounds = malloc((chunks + 1) * sizeof *key_bounds);
    int64_t *query_bounds = malloc((chunks + 1) * sizeof *query_bounds);
    int64_t *cursor = malloc(chunks * sizeof *cursor);
    int64_t *table = NULL;
    int64_t status = -1;
    if (!cut_keys || !rows || !cut_queries || !position || !key_bounds || !query_bounds
        || !cursor)
        goto done;
    cut(keys, n, chunks, cut_keys, rows, key_bounds, cursor);
    cut(queries, q, chunks, cut_queries, position, query_bounds, cursor);
    int64_t largest = 0;
    for (int64_t c = 0; c < chunks; c++)
        if (key_bounds[c + 1] - key_bounds[c] > largest) largest = key_bounds[c + 1] - key_bounds[c];
    table = malloc(((size_t)1 << table_bits(largest)) * sizeof *table);
    if (!table) goto done;
    for (int64_t c = 0; c < chunks; c++) {
        uint64_t mask = (UINT64_C(1) << table_bits(key_bounds[c + 1] - key_bounds[c])) - 1;
        memset(table, 0xFF, (mask + 1) * sizeof *table);
        for (int64_t i = key_bounds[c]; i < key_bounds[c + 1]; i++) {
            uint64_t slot = cut_keys[i] & mask;
            while (table[slot] != EMPTY) slot = (slot + 1) & mask;
            table[slot] = i;
        }
        for (int64_t j = query_bounds[c]; j < query_bounds[c + 1]; j++) {
            uint64_t slot = cut_queries[j] & mask;
            int64_t row = EMPTY;
            while (table[slot] != EMPTY) {
                if (cut_keys[table[slot]] == cut_queries[j]) {
                    row = rows[table[slot]];
                    break;
                }
                slot = (slot + 1) & mask;
            }
            found[position[j]] = row;
        }
    }
    status = 0;
done:
    free(cut_keys), free(rows), free(cut_queries), free(position), free(key_bounds);
    free(query_bounds), free(cursor), free(table);
    return status;
}

/* --- rows cut by group ---------------------------------------------------------------- */

/* Group g's rows go to bounds[g]:bounds[g + 1] (group: uint16 or int64). */
void arpa_group_bounds(const void *group, int64_t group_bytes, int64_t n, int64_t groups,
                       int64_t *bounds) {
    memset(bounds, 0, (groups + 1) * sizeof *bounds);
    if (group_bytes == 2)
        for (int64_t i = 0; i < n; i++) bounds[((const uint16_t *)group)[i] + 1]++;
    else
        for (int64_t i = 0; i < n; i++) bounds[((const int64_t *)group)[i] + 1]++;
    for (int64_t g = 0; g < groups; g++) bounds[g + 1] += bounds[g];
}

/* Rows of `values` (items of `item` bytes) reordered stably by group: one read in order
 * and one cursor a group, a few dozen streams the caches hold (a stable argsort and a
 * gather would read each column at random).  cursor: (groups,) work space. */
#define SCATTER(TYPE, GROUP)                                                              \
    for (int64_t i = 0; i < n; i++)                                                       \
        ((TYPE *)out)[cursor[((const GROUP *)group)[i]]++] = ((const TYPE *)values)[i];

#define SCATTER_GROUPS(TYPE)                                                              \
    if (group_bytes == 2) {                                                               \
        SCATTER(TYPE, uint16_t)                                                           \
    } else {                                                                              \
        SCATTER(TYPE, int64_t)                                                            \
    }

void arpa_scatter_by_group(const void *values, int64_t item, const void *group,
                           int64_t group_bytes, int64_t n, const int64_t *bounds,
                           int64_t groups, int64_t *cursor, void *out) {
    memcpy(cursor, bounds, groups * sizeof *cursor);
    switch (item) {
    case 1: SCATTER_GROUPS(uint8_t) break;
    case 2: SCATTER_GROUPS(uint16_t) break;
    case 4: SCATTER_GROUPS(uint32_t) break;
    case 8: SCATTER_GROUPS(uint64_t) break;
    default:
        for (int64_t i = 0; i < n; i++) {
            int64_t g = group_bytes == 2 ? ((const uint16_t *)group)[i]
                                         : ((const int64_t *)group)[i];
            memcpy((char *)out + cursor[g]++ * item, (const char *)values + i * item, item);
        }
    }
}

/* --- each link's words ---------------------------------------------------------------- */

/* Word j of each link's n-gram, (order, links): its context's words (padded rows of
 * `width`), then at j = its context's length its own word; past that, any word. */
void arpa_gram_words(const int64_t *words, int64_t width, const int64_t *of,
                     const int64_t *lengths, const int32_t *word, int64_t links,
                     int64_t order, int32_t *grams) {
    for (int64_t i = 0; i < links; i++) {
        const int64_t *row = words + of[i] * width;
        for (int64_t j = 0; j < order; j++)
            grams[j * links + i] = j == lengths[i] ? word[i]
                                                   : (int32_t)row[j < width ? j : width - 1];
    }
}

/* Line i's words, row rows[i] of the n int32 columns: the reads are at random and
 * independent, so many are in flight; the lines are then made from memory read in order. */
void arpa_gather_words(const int32_t *const *columns, int64_t n, const int64_t *rows,
                       int64_t k, int32_t *words) {
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < n; j++) words[i * n + j] = columns[j][rows[i]];
}

/* Each word's CELL bytes: a word of fewer bytes in its cell, its length last; a longer
 * one marked LONG_WORD.  A line then reads one cache line a word. */
void arpa_word_cells(const uint8_t *vocab, const int64_t *vocab_start, int64_t words,
                     uint8_t *cells) {
    memset(cells, 0, words * CELL);
    for (int64_t w = 0; w < words; w++) {
        int64_t length = vocab_start[w + 1] - vocab_start[w];
        if (length < CELL) {
            memcpy(cells + w * CELL, vocab + vocab_start[w], length);
            cells[w * CELL + CELL - 1] = (uint8_t)length;
        } else {
            cells[w * CELL + CELL - 1] = LONG_WORD;
        }
    }
}

/* The bytes of the words of the lines (k, n), without separators. */
int64_t arpa_words_bytes(const int32_t *words, int64_t count, const int64_t *vocab_start) {
    int64_t total = 0;
    for (int64_t i = 0; i < count; i++) total += vocab_start[words[i] + 1] - vocab_start[words[i]];
    return total;
}

/* --- float32 as its shortest text ------------------------------------------------------- */

/* Ryu's float32 method (Adams, PLDI 2018): the shortest digits that read back as the
 * float32, the nearest of them to its value (ties to even), two 64-bit multiplications
 * by a power of five a number.  5^-q scaled up (binary exponents >= 0) and 5^i scaled
 * down (below 0). */
#define POW5_INV_BITCOUNT 59
#define POW5_BITCOUNT 61

static const uint64_t POW5_INV_SPLIT[31] = {
    0x0800000000000001ULL, 0x0666666666666667ULL, 0x051EB851EB851EB9ULL,
    0x04189374BC6A7EFAULL, 0x068DB8BAC710CB2AULL, 0x053E2D6238DA3C22ULL,
    0x0431BDE82D7B634EULL, 0x06B5FCA6AF2BD216ULL, 0x055E63B88C230E78ULL,
    0x044B82FA09B5A52DULL, 0x06DF37F675EF6EAEULL, 0x057F5FF85E592558ULL,
    0x0465E6604B7A8447ULL, 0x0709709A125DA071ULL, 0x05A126E1A84AE6C1ULL,
    0x0480EBE7B9D58567ULL, 0x0734ACA5F6226F0BULL, 0x05C3BD5191B525A3ULL,
    0x049C97747490EAE9ULL, 0x0760F253EDB4AB0EULL, 0x05E72843249088D8ULL,
    0x04B8ED0283A6D3E0ULL, 0x078E480405D7B966ULL, 0x060B6CD004AC9452ULL,
    0x04D5F0A66A23A9DBULL, 0x07BCB43D769F762BULL, 0x063090312BB2C4EFULL,
    0x04F3A68DBC8F03F3ULL, 0x07EC3DAF94180651ULL, 0x065697BFA9ACD1DAULL,
    0x051212FFBAF0A7E2ULL};

static const uint64_t POW5_SPLIT[47] = {
    0x1000000000000000ULL, 0x1400000000000000ULL, 0x1900000000000000ULL,
    0x1F40000000000000ULL, 0x1388000000000000ULL, 0x186A000000000000ULL,
    0x1E84800000000000ULL, 0x1312D00000000000ULL, 0x17D7840000000000ULL,
    0x1DCD650000000000ULL, 0x12A05F2000000000ULL, 0x174876E800000000ULL,
    0x1D1A94A200000000ULL, 0x12309CE540000000ULL, 0x16BCC41E90000000ULL,
    0x1C6BF52634000000ULL, 0x11C37937E0800000ULL, 0x16345785D8A00000ULL,
    0x1BC16D674EC80000ULL, 0x1158E460913D0000ULL, 0x15AF1D78B58C4000ULL,
    0x1B1AE4D6E2EF5000ULL, 0x10F0CF064DD59200ULL, 0x152D02C7E14AF680ULL,
    0x1A784379D99DB420ULL, 0x108B2A2C28029094ULL, 0x14ADF4B7320334B9ULL,
    0x19D971E4FE8401E7ULL, 0x1027E72F1F128130ULL, 0x1431E0FAE6D7217CULL,
    0x193E5939A08CE9DBULL, 0x1F8DEF8808B02452ULL, 0x13B8B5B5056E16B3ULL,
    0x18A6E32246C99C60ULL, 0x1ED09BEAD87C0378ULL, 0x13426172C74D822BULL,
    0x1812F9CF7920E2B6ULL, 0x1E17B84357691B64ULL, 0x12CED32A16A1B11EULL,
    0x178287F49C4A1D66ULL, 0x1D6329F1C35CA4BFULL, 0x125DFA371A19E6F7ULL,
    0x16F578C4E0A060B5ULL, 0x1CB2D6F618C878E3ULL, 0x11EFC659CF7D4B8DULL,
    0x166BB7F0435C9E71ULL, 0x1C06A5EC5433C60DULL};

/* ceil(log2(5^e)) for e >= 1, 1 for e = 0: the formula Ryu's bounds are proven for. */
static inline int64_t pow5bits(int64_t e) { return ((e * 1217359) >> 19) + 1; }

/* (m * factor) >> shift for m < 2^32, shift > 32, in 64 bits. */
static inline uint64_t mul_shift(uint64_t m, uint64_t factor, int64_t shift) {
    uint64_t low = m * (factor & 0xFFFFFFFFu), high = m * (factor >> 32);
    return ((low >> 32) + high) >> (shift - 32);
}

static inline int64_t pow5_factor(uint64_t value) {
    int64_t count = 0;
    while (value % 5 == 0) value /= 5, count++;
    return count;
}

/* The shortest decimal digits * 10^exponent that reads back as the finite, non-zero
 * float32 of `bits` (its magnitude). */
static void shortest_digits(uint32_t bits, uint64_t *digits, int64_t *exponent) {
    int64_t mantissa = bits & 0x7FFFFF, biased = (bits >> 23) & 0xFF, e2, m2;
    if (biased == 0) {
        e2 = 1 - 127 - 23 - 2;
        m2 = mantissa;
    } else {
        e2 = biased - 127 - 23 - 2;
        m2 = (INT64_C(1) << 23) | mantissa;
    }
    int accept_bounds = (m2 & 1) == 0;
    uint64_t mv = 4 * m2, mp = 4 * m2 + 2;
    int mm_shift = mantissa != 0 || biased <= 1;
    uint64_t mm = 4 * m2 - 1 - mm_shift;
    int vm_trailing_zeros = 0, vr_trailing_zeros = 0;
    uint64_t vr, vp, vm, last = 0;
    int64_t e10;
    if (e2 >= 0) {
        int64_t q = (e2 * 78913) >> 18; /* floor(log10(2^e2)) */
        e10 = q;
        int64_t k = POW5_INV_BITCOUNT + pow5bits(q) - 1, i = -e2 + q + k;
        vr = mul_shift(mv, POW5_INV_SPLIT[q], i);
        vp = mul_shift(mp, POW5_INV_SPLIT[q], i);
        vm = mul_shift(mm, POW5_INV_SPLIT[q], i);
        if (q != 0 && (vp - 1) / 10 <= vm / 10) {
            int64_t l = POW5_INV_BITCOUNT + pow5bits(q - 1) - 1;
            last = mul_shift(mv, POW5_INV_SPLIT[q - 1], -e2 + q - 1 + l) % 10;
        }
        if (q <= 9) {
            if (mv % 5 == 0) vr_trailing_zeros = pow5_factor(mv) >= q;
            else if (accept_bounds) vm_trailing_zeros = pow5_factor(mm) >= q;
            else if (pow5_factor(mp) >= q) vp--;
        }
    } else {
        int64_t q = (-e2 * 732923) >> 20; /* floor(log10(5^-e2)) */
        e10 = q + e2;
        int64_t i = -e2 - q, k = pow5bits(i) - POW5_BITCOUNT, j = q - k;
        vr = mul_shift(mv, POW5_SPLIT[i], j);
        vp = mul_shift(mp, POW5_SPLIT[i], j);
        vm = mul_shift(mm, POW5_SPLIT[i], j);
        if (q != 0 && (vp - 1) / 10 <= vm / 10) {
            j = q - 1 - (pow5bits(i + 1) - POW5_BITCOUNT);
            last = mul_shift(mv, POW5_SPLIT[i + 1], j) % 10;
        }
        if (q <= 1) {
            vr_trailing_zeros = 1;
            if (accept_bounds) vm_trailing_zeros = mm_shift == 1;
            else vp--;
        } else if (q < 31) {
            vr_trailing_zeros = (mv & ((UINT64_C(1) << (q - 1)) - 1)) == 0;
        }
    }
    int64_t removed = 0;
    while (vp / 10 > vm / 10) {
        vm_trailing_zeros = vm_trailing_zeros && vm % 10 == 0;
        vr_trailing_zeros = vr_trailing_zeros && last == 0;
        last = vr % 10;
        vr /= 10, vp /= 10, vm /= 10;
        removed++;
    }
    if (vm_trailing_zeros) {
        while (vm % 10 == 0) {
            vr_trailing_zeros = vr_trailing_zeros && last == 0;
            last = vr % 10;
            vr /= 10, vp /= 10, vm /= 10;
            removed++;
        }
    }
    if (vr_trailing_zeros && last == 5 && vr % 2 == 0) last = 4; /* exactly halfway: to even */
    int up = (vr == vm && (!accept_bounds || !vm_trailing_zeros)) || last >= 5;
    *digits = vr + up;
    *exponent = e10 + removed;
}

/* The decimal digits of value (1 <= value < 10^9). */
static inline int64_t decimal_length(uint64_t value) {
    if (value >= 10000) {
        if (value >= 10000000) return value >= 100000000 ? 9 : 8;
        return value >= 1000000 ? 7 : (value >= 100000 ? 6 : 5);
    }
    if (value >= 100) return value >= 1000 ? 4 : 3;
    return value >= 10 ? 2 : 1;
}

static inline void put_digits(uint8_t *out, uint64_t value, int64_t length) {
    for (int64_t b = length - 1; b >= 0; b--) {
        out[b] = (uint8_t)('0' + value % 10);
        value /= 10;
    }
}

/* Write the text of the float32 of `bits` at out (room for MAX_CHARS, 16) as Arrow
 * writes it (double-conversion's ToShortestSingle): 0.000001 to 999999999 positional,
 * past that 1e-7, 1.5e+10; -0, inf, -inf, nan.  Returns the position after it. */
static uint8_t *put_float32(uint8_t *out, uint32_t bits) {
    int negative = (bits >> 31) != 0;
    if (((bits >> 23) & 0xFF) == 0xFF) {
        if (bits & 0x7FFFFF) return memcpy(out, "nan", 3), out + 3;
        if (negative) *out++ = '-';
        return memcpy(out, "inf", 3), out + 3;
    }
    if (negative) *out++ = '-';
    if ((bits & 0x7FFFFFFF) == 0) return *out = '0', out + 1;
    uint64_t digits;
    int64_t exponent;
    shortest_digits(bits, &digits, &exponent);
    int64_t length = decimal_length(digits), point = length + exponent; /* 0.DIGITS * 10^point */
    if (-6 <= point - 1 && point - 1 < 10) {
        if (point <= 0) {
            *out++ = '0';
            *out++ = '.';
            for (int64_t z = 0; z < -point; z++) *out++ = '0';
            put_digits(out, digits, length);
            return out + length;
        }
        if (point >= length) {
            put_digits(out, digits, length);
            out += length;
            for (int64_t z = 0; z < point - length; z++) *out++ = '0';
            return out;
        }
        put_digits(out + 1, digits, length); /* then the integer part moved left */
        memmove(out, out + 1, point);
        out[point] = '.';
        return out + length + 1;
    }
    put_digits(out + 1, digits, length);
    out[0] = out[1];
    if (length > 1) {
        out[1] = '.';
        out += length + 1;
    } else {
        out += 1;
    }
    *out++ = 'e';
    *out++ = point - 1 >= 0 ? '+' : '-';
    int64_t scale = point - 1 >= 0 ? point - 1 : 1 - point;
    if (scale >= 10) *out++ = (uint8_t)('0' + scale / 10);
    *out++ = (uint8_t)('0' + scale % 10);
    return out;
}

/* The texts of n float32 (their bits) as a string array's buffers: offsets (n + 1) and
 * bytes (room for 16 a number); returns the bytes. */
int64_t arpa_float32_texts(const uint32_t *bits, int64_t n, int64_t *offsets, uint8_t *out) {
    uint8_t *pos = out;
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        pos = put_float32(pos, bits[i]);
        offsets[i + 1] = pos - out;
    }
    return pos - out;
}

/* --- the lines ------------------------------------------------------------------------ */

/* Write line i = `prob TAB words TAB backoff NEWLINE` (no back-off column when
 * backoff_bits is NULL) into out; returns the bytes of the lines.  words (k, n) int32,
 * oldest first; cells: arpa_word_cells; vocab/vocab_start: the words' bytes and offsets. */
int64_t arpa_assemble_lines(const int32_t *words, int64_t k, int64_t n, const uint8_t *cells,
                            const uint8_t *vocab, const int64_t *vocab_start,
                            const uint32_t *prob_bits, const uint32_t *backoff_bits,
                            uint8_t *out) {
    uint8_t *pos = out;
    for (int64_t i = 0; i < k; i++) {
        pos = put_float32(pos, prob_bits[i]);
        *pos++ = TAB;
        for (int64_t j = 0; j < n; j++) {
            int32_t w = words[i * n + j];
            uint8_t length = cells[w * CELL + CELL - 1];
            if (length != LONG_WORD) {
                memcpy(pos, cells + w * CELL, CELL);
                pos += length;
            } else {
                memcpy(pos, vocab + vocab_start[w], vocab_start[w + 1] - vocab_start[w]);
                pos += vocab_start[w + 1] - vocab_start[w];
            }
            *pos++ = j < n - 1 ? SPACE : (backoff_bits ? TAB : NEWLINE);
        }
        if (backoff_bits) {
            pos = put_float32(pos, backoff_bits[i]);
            *pos++ = NEWLINE;
        }
    }
    return pos - out;
}
