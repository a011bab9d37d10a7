/* The 64-bit hash steps of snm_core/text/hashing.py, for the C loops: murmur3's
 * fmix64 and the fold of a value into a running hash.  hashing.py holds the
 * definition (numpy), which the tests hold these to. */
#ifndef SNM_HASH64_H
#define SNM_HASH64_H

#include <stdint.h>

#define HASH64_MIX_C1 0xFF51AFD7ED558CCDULL
#define HASH64_MIX_C2 0xC4CEB9FE1A85EC53ULL
#define HASH64_GOLDEN 0x9E3779B97F4A7C15ULL

static inline uint64_t hash64_mix(uint64_t x) {
    x ^= x >> 33;
    x *= HASH64_MIX_C1;
    x ^= x >> 33;
    x *= HASH64_MIX_C2;
    x ^= x >> 33;
    return x;
}

static inline uint64_t hash64_combine(uint64_t h, uint64_t value) {
    return hash64_mix(h ^ ((value + 1) * HASH64_GOLDEN));
}

#endif
