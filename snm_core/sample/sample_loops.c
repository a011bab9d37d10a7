/* The loops of `snm sample` (snm_core/sample/sample_loops.py, which documents them and
 * checks their arguments): the random numbers, a history's feature keys, the rows'
 * alias tables, the sentences' draws and their text.
 *
 * P(w | h) = sum_f M_fw / sum_f M_f* over the features f active in h is the mixture
 * of the rows' distributions M_fw / M_f* weighted by M_f*, so a word is drawn in two
 * steps: a feature with probability M_f* / sum M_f*, then a word of its row (one read
 * of its alias table).  The random numbers are xoshiro256** (Blackman and Vigna), four
 * uint64 words of state per stream held by the caller.  The arithmetic is that of
 * tests/sample/reference_sample.py's definitions, which the tests hold these to: the
 * same seed gives the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../text/hash64.h"

/* uint64 words of a feature record: key, first link, M_f* (float64 bits). */
#define RECORD 3
/* Sentences of a stream drawn side by side. */
#define LANES 8
/* Fields of a call's statistics: words, sentences, empty sentences, truncated
 * sentences, dead ends. */
#define STATS 5

#define INLINE static inline __attribute__((always_inline))

/* --- random numbers ------------------------------------------------------------------------- */

INLINE uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* The next uint64 of xoshiro256** (state changed in place). */
INLINE uint64_t next(uint64_t *s) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* A float64 uniform on [0, 1): 53 random bits. */
INLINE double uniform(uint64_t *s) { return (double)(next(s) >> 11) * (1.0 / 9007199254740992.0); }

/* The state of stream `stream` of `seed`: Weyl steps from (sequence_seed, seed, stream)
 * through fmix64 (splitmix64's scheme). */
void sample_seed_state(uint64_t seed, uint64_t stream, uint64_t sequence_seed,
                       uint64_t *state) {
    uint64_t x = hash64_combine(hash64_combine(sequence_seed, seed), stream);
    for (int i = 0; i < 4; i++) {
        x += HASH64_GOLDEN;
        state[i] = hash64_mix(x);
    }
}

/* n uniforms of a stream (for the tests of the generator). */
void sample_uniforms(uint64_t *state, int64_t n, double *out) {
    for (int64_t i = 0; i < n; i++)
        out[i] = uniform(state);
}

/* --- a history's feature keys --------------------------------------------------------------- */

/* The configuration's windows: per window (type index, r, s, a, the first window of its
 * type), a tied type's windows consecutive by increasing s; salts (tags, types). */
typedef struct {
    const int64_t *windows;
    int64_t n_windows;
    const uint64_t *salts;
    int64_t n_tags, n_types;
    int64_t max_run, ring;
    uint64_t sequence_seed;
} Windows;

/* Row j % ring of `hashes` (ring, max_run + 1): the n words before position j folded
 * newest first, n <= min(j, max_run). */
INLINE void position_hashes(const Windows *w, const int32_t *history, int64_t j,
                            uint64_t *hashes) {
    uint64_t *row = hashes + (j % w->ring) * (w->max_run + 1);
    row[0] = w->sequence_seed;
    int64_t n_max = j < w->max_run ? j : w->max_run;
    for (int64_t n = 1; n <= n_max; n++)
        row[n] = hash64_combine(row[n - 1], (uint64_t)(int64_t)history[j - n]);
}

/* Keys of the features of the event whose target is at position j (hashes filled up to
 * j); returns how many.  remote and valid: n_windows each, work space. */
INLINE int64_t event_keys(const Windows *w, const uint64_t *hashes, int64_t j,
                          uint64_t *remote, uint8_t *valid, uint64_t *keys) {
    int64_t width = w->max_run + 1, n = 0;
    const uint64_t *here = hashes + (j % w->ring) * width;
    for (int64_t g = 0; g < w->n_windows; g++) {
        const int64_t *window = w->windows + 5 * g;
        int64_t t = window[0], r = window[1], s = window[2], a = window[3], first = window[4];
        valid[g] = j >= r + s + a;
        if (!valid[g])
            continue;
        uint64_t base = here[a];
        if (r > 0) {
            remote[g] = hashes[((j - a - s) % w->ring) * width + r];
            int seen = 0;
            for (int64_t h = first; h < g; h++)
                if (valid[h] && remote[h] == remote[g]) {
                    seen = 1;
                    break;
                }
            if (seen)
                continue;
            base = hash64_combine(base, remote[g]);
        }
        for (int64_t tag = 0; tag < w->n_tags; tag++)
            keys[n++] = hash64_mix(base ^ w->salts[tag * w->n_types + t]);
    }
    return n;
}

/* Keys of the event after `history` (j word ids, <S> first); hashes (ring, max_run + 1),
 * remote and valid (n_windows) work space, keys (n_windows n_tags).  Returns how many. */
int64_t sample_history_keys(const Windows *w, const int32_t *history, int64_t j,
                            uint64_t *hashes, uint64_t *remote, uint8_t *valid,
                            uint64_t *keys) {
    for (int64_t p = 0; p <= j; p++)
        position_hashes(w, history, p, hashes);
    return event_keys(w, hashes, j, remote, valid, keys);
}

/* --- rows ----------------------------------------------------------------------------------- */

/* Each row's alias table (Walker's method, Vose's construction) and its total mass:
 * links (2 links): per link the threshold's float64 bits, then its own word in the low
 * 32 bits and its alias word in the high 32.  Returns -1 when out of memory. */
int64_t sample_alias_rows(const double *m, const int64_t *diversity, int64_t n_rows,
                          const int32_t *words, uint64_t *links, double *total) {
    int64_t longest = 0;
    for (int64_t row = 0; row < n_rows; row++)
        if (diversity[row] > longest)
            longest = diversity[row];
    double *scaled = malloc(sizeof(double) * (longest ? longest : 1));
    int64_t *small = malloc(sizeof(int64_t) * (longest ? longest : 1));
    int64_t *large = malloc(sizeof(int64_t) * (longest ? longest : 1));
    if (!scaled || !small || !large) {
        free(scaled);
        free(small);
        free(large);
        return -1;
    }
    int64_t first = 0;
    for (int64_t row = 0; row < n_rows; row++) {
        int64_t d = diversity[row];
        const double *mass_of = m + first;
        const int32_t *word = words + first;
        uint64_t *link = links + 2 * first;
        double mass = 0.0;
        for (int64_t k = 0; k < d; k++)
            mass += mass_of[k];
        total[row] = mass;
        int64_t n_small = 0, n_large = 0;
        for (int64_t k = 0; k < d; k++) {
            scaled[k] = mass > 0 ? mass_of[k] * (double)d / mass : 1.0;
            uint64_t own = (uint64_t)(int64_t)word[k];
            link[2 * k + 1] = own | (own << 32);
            double one = 1.0;
            memcpy(&link[2 * k], &one, 8);
            if (scaled[k] < 1.0)
                small[n_small++] = k;
            else
                large[n_large++] = k;
        }
        while (n_small && n_large) {
            int64_t s = small[--n_small];
            int64_t g = large[n_large - 1];
            memcpy(&link[2 * s], &scaled[s], 8);
            link[2 * s + 1] = (uint64_t)(int64_t)word[s] | ((uint64_t)(int64_t)word[g] << 32);
            scaled[g] = (scaled[g] + scaled[s]) - 1.0;
            if (scaled[g] < 1.0) {
                n_large--;
                small[n_small++] = g;
            }
        }
        /* What is left has scaled mass 1 up to rounding: threshold 1, its own word. */
        first += d;
    }
    free(scaled);
    free(small);
    free(large);
    return 0;
}

/* --- the draws ------------------------------------------------------------------------------ */

/* A model's rows as the draws read them (snm_core/sample/rows.py). */
typedef struct {
    const uint64_t *records; /* per feature key, first link, M_f* bits; then a sentinel */
    const void *index;       /* the KeyIndex over the keys: int32, or int64 if wide */
    int64_t index_wide;
    uint64_t shift;
    const uint64_t *links;   /* the alias tables (sample_alias_rows) */
    int32_t bos, eos;
} Rows;

/* A stream's state, kept by the caller between calls. */
typedef struct {
    uint64_t *rng;         /* (LANES, 4) */
    int32_t *history;      /* (LANES, max_length + 1) */
    int64_t *position;     /* (LANES,), 0: idle */
    uint64_t *hashes;      /* (LANES, ring, max_run + 1) */
    int64_t *words;        /* (1,): the stream's words so far */
    int64_t quota, max_length;
} Stream;

INLINE double bits_double(uint64_t bits) {
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

/* Record of `key` among [position, end) (its KeyIndex slot), -1 where absent. */
INLINE int64_t scan_record(const uint64_t *records, int64_t position, int64_t end, uint64_t key) {
    for (int64_t p = position; p < end; p++) {
        uint64_t stored = records[RECORD * p];
        if (stored >= key)
            return stored == key ? p : -1;
    }
    return -1;
}

INLINE int64_t slot_start(const Rows *rows, int wide, int64_t slot) {
    return wide ? ((const int64_t *)rows->index)[slot] : ((const int32_t *)rows->index)[slot];
}

INLINE const void *slot_address(const Rows *rows, int wide, int64_t slot) {
    return wide ? (const void *)((const int64_t *)rows->index + slot)
                : (const void *)((const int32_t *)rows->index + slot);
}

/* sample_sentences for a KeyIndex of int32 (wide 0) or int64 (wide 1) slots. */
INLINE int64_t draw(const Windows *w, const Rows *rows, int wide, Stream *st,
                    int64_t words_wanted, int32_t *out, int64_t *stats, int64_t *finished,
                    uint64_t *keys, int64_t *first, int64_t *last, int64_t *found_rows,
                    double *row_mass, uint64_t *remote, uint8_t *valid) {
    int64_t width = w->n_windows * w->n_tags;
    int64_t n_keys[LANES], link[LANES];
    double fraction[LANES];
    int64_t history_width = st->max_length + 1;
    int64_t hashes_width = w->ring * (w->max_run + 1);
    const uint64_t *records = rows->records;
    const uint64_t *links = rows->links;
    uint64_t shift = rows->shift;
    int64_t used = 0;
    memset(stats, 0, sizeof(int64_t) * STATS);
    *finished = 0;
    for (;;) {
        int active = 0;
        for (int lane = 0; lane < LANES; lane++) {
            if (st->position[lane] == 0 && st->words[0] < st->quota) {
                st->history[lane * history_width] = rows->bos;
                st->position[lane] = 1;
            }
            if (st->position[lane])
                active++;
        }
        if (!active) {
            *finished = 1;
            return used;
        }
        for (int lane = 0; lane < LANES; lane++) { /* the keys; their index slots fetched */
            n_keys[lane] = 0;
            int64_t j = st->position[lane];
            if (j == 0)
                continue;
            uint64_t *hashes = st->hashes + lane * hashes_width;
            uint64_t *lane_keys = keys + lane * width;
            position_hashes(w, st->history + lane * history_width, j, hashes);
            n_keys[lane] = event_keys(w, hashes, j, remote, valid, lane_keys);
            for (int64_t i = 0; i < n_keys[lane]; i++)
                __builtin_prefetch(slot_address(rows, wide, (int64_t)(lane_keys[i] >> shift)),
                                   0, 3);
        }
        for (int lane = 0; lane < LANES; lane++) { /* the slots' first records fetched */
            const uint64_t *lane_keys = keys + lane * width;
            for (int64_t i = 0; i < n_keys[lane]; i++) {
                int64_t slot = (int64_t)(lane_keys[i] >> shift);
                first[lane * width + i] = slot_start(rows, wide, slot);
                last[lane * width + i] = slot_start(rows, wide, slot + 1);
                __builtin_prefetch(records + RECORD * first[lane * width + i], 0, 3);
            }
        }
        for (int lane = 0; lane < LANES; lane++) { /* the feature and the link drawn */
            link[lane] = -1;
            if (st->position[lane] == 0)
                continue;
            const uint64_t *lane_keys = keys + lane * width;
            int64_t found = 0;
            double total = 0.0;
            for (int64_t i = 0; i < n_keys[lane]; i++) {
                int64_t p = scan_record(records, first[lane * width + i], last[lane * width + i],
                                        lane_keys[i]);
                if (p >= 0) {
                    double mass = bits_double(records[RECORD * p + 2]);
                    if (mass > 0) {
                        found_rows[found] = p;
                        row_mass[found] = mass;
                        total += mass;
                        found++;
                    }
                }
            }
            if (found == 0) { /* no feature of the history in the model */
                stats[4]++;
                continue;
            }
            uint64_t *rng = st->rng + 4 * lane;
            double u = uniform(rng) * total;
            int64_t pick = found - 1;
            for (int64_t i = 0; i < found - 1; i++) {
                u -= row_mass[i];
                if (u < 0) {
                    pick = i;
                    break;
                }
            }
            int64_t p = found_rows[pick];
            int64_t start = (int64_t)records[RECORD * p + 1];
            int64_t size = (int64_t)records[RECORD * p + RECORD + 1] - start;
            double x = uniform(rng) * (double)size;
            int64_t k = (int64_t)x;
            if (k > size - 1)
                k = size - 1;
            link[lane] = start + k;
            fraction[lane] = x - (double)k;
            __builtin_prefetch(links + 2 * link[lane], 0, 3);
        }
        for (int lane = 0; lane < LANES; lane++) { /* the words */
            int64_t j = st->position[lane];
            if (j == 0)
                continue;
            int32_t *history = st->history + lane * history_width;
            int ended = link[lane] < 0;
            if (!ended) {
                uint64_t pair = links[2 * link[lane] + 1];
                if (fraction[lane] >= bits_double(links[2 * link[lane]]))
                    pair >>= 32;
                int32_t word = (int32_t)(uint32_t)(pair & 0xFFFFFFFFu);
                if (word == rows->eos) {
                    ended = 1;
                } else {
                    history[j] = word;
                    j++;
                    st->position[lane] = j;
                    if (j > st->max_length) {
                        stats[3]++;
                        ended = 1;
                    }
                }
            }
            if (ended) {
                st->position[lane] = 0;
                if (j == 1) {
                    stats[2]++; /* an empty sentence: no line */
                    continue;
                }
                memcpy(out + used, history + 1, sizeof(int32_t) * (j - 1));
                used += j;
                out[used - 1] = rows->eos;
                stats[0] += j - 1;
                stats[1]++;
                st->words[0] += j - 1;
            }
        }
        if (stats[0] >= words_wanted)
            return used;
    }
}

/* Sentences of one stream, drawn until words_wanted more words are out or, once the
 * stream has its quota, until its last sentences are finished; out at least
 * 2 (words_wanted + LANES (max_length + 1)) long.  Returns the length of out used, or -1
 * when out of memory; stats (STATS,), finished: the stream has its quota and every
 * lane is idle. */
int64_t sample_sentences(const Windows *w, const Rows *rows, Stream *stream,
                         int64_t words_wanted, int32_t *out, int64_t *stats,
                         int64_t *finished) {
    int64_t width = w->n_windows * w->n_tags;
    size_t cells = (size_t)(width ? width : 1);
    size_t windows = (size_t)(w->n_windows ? w->n_windows : 1);
    uint64_t *keys = malloc(sizeof(uint64_t) * LANES * cells);
    int64_t *first = malloc(sizeof(int64_t) * LANES * cells);
    int64_t *last = malloc(sizeof(int64_t) * LANES * cells);
    int64_t *found_rows = malloc(sizeof(int64_t) * cells);
    double *row_mass = malloc(sizeof(double) * cells);
    uint64_t *remote = malloc(sizeof(uint64_t) * windows);
    uint8_t *valid = malloc(windows);
    int64_t used = -1;
    if (keys && first && last && found_rows && row_mass && remote && valid)
        used = rows->index_wide
                   ? draw(w, rows, 1, stream, words_wanted, out, stats, finished, keys, first,
                          last, found_rows, row_mass, remote, valid)
                   : draw(w, rows, 0, stream, words_wanted, out, stats, finished, keys, first,
                          last, found_rows, row_mass, remote, valid);
    free(keys);
    free(first);
    free(last);
    free(found_rows);
    free(row_mass);
    free(remote);
    free(valid);
    return used;
}

/* --- text ----------------------------------------------------------------------------------- */

/* Bytes of the text of sentences `ids` (each ended by eos) before a last word's space is
 * dropped: what sample_render needs. */
int64_t sample_render_bytes(const int32_t *ids, int64_t n, const int64_t *offsets, int32_t eos) {
    int64_t size = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t w = ids[i];
        size += w == eos ? 1 : offsets[w + 1] - offsets[w] + 1;
    }
    return size;
}

/* UTF-8 text of sentences `ids`: words joined by spaces, a line per sentence; offsets and
 * data the vocabulary's words (Arrow buffers).  Returns the bytes written. */
int64_t sample_render(const int32_t *ids, int64_t n, const int64_t *offsets,
                      const uint8_t *data, int32_t eos, uint8_t *text) {
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t w = ids[i];
        if (w == eos) {
            if (at && text[at - 1] == ' ')
                at--; /* the space after the sentence's last word */
            text[at++] = '\n';
            continue;
        }
        int64_t length = offsets[w + 1] - offsets[w];
        memcpy(text + at, data + offsets[w], (size_t)length);
        at += length;
        text[at++] = ' ';
    }
    return at;
}
