/* The byte regrouping of snm_core/io/scratch_codec.py's compressed scratch columns:
 * value i's byte b goes to out[b * n + i], 64-bit values first replaced by the
 * difference from the value before them (wrapping), and back.  One pass each way. */
#include <stdint.h>
#include <string.h>

void scratch_split(const uint8_t *in, int64_t n, int32_t width, int32_t differenced,
                   uint8_t *out) {
    if (differenced) { /* width 8 */
        uint64_t previous = 0;
        for (int64_t i = 0; i < n; i++) {
            uint64_t value;
            memcpy(&value, in + 8 * i, 8);
            uint64_t delta = value - previous;
            previous = value;
            for (int b = 0; b < 8; b++) out[b * n + i] = (uint8_t)(delta >> (8 * b));
        }
        return;
    }
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < width; b++) out[b * n + i] = in[(int64_t)width * i + b];
}

void scratch_join(const uint8_t *in, int64_t n, int32_t width, int32_t differenced,
                  uint8_t *out) {
    if (differenced) {
        uint64_t value = 0;
        for (int64_t i = 0; i < n; i++) {
            uint64_t delta = 0;
            for (int b = 0; b < 8; b++) delta |= (uint64_t)in[b * n + i] << (8 * b);
            value += delta;
            memcpy(out + 8 * i, &value, 8);
        }
        return;
    }
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < width; b++) out[(int64_t)width * i + b] = in[b * n + i];
}
