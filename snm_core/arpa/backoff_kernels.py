"""The back-off form's joins and keys, compiled (numba, no GIL).

A partition's keys are hashes, so their low bits index an open-addressed table (linear
probing, at most half full).  Finding 2.5M keys among 2.5M took ~0.4 s sorted (both
sides sorted, then a binary search); a table takes ~0.1 s, and groups rows by key
without sorting them.

The scan's keys are folded here too (:func:`ngram_keys`, :func:`link_keys`), with the
hash steps of :mod:`snm_core.text.hashing` compiled (as :mod:`snm_core.text.compiled`
does for scoring, whose eager ufuncs take 0.4 s to load).
"""

import numba
import numpy as np

from snm_core.text.hashing import GOLDEN, fmix64_steps

EMPTY = -1
_ONE = np.uint64(1)
_mix64 = numba.njit(nogil=True, cache=True, inline="always")(fmix64_steps)


@numba.njit(nogil=True, cache=True, inline="always")
def _combine(h, value):
    return _mix64(h ^ ((value + _ONE) * GOLDEN))


@numba.njit(nogil=True, cache=True)
def ngram_keys(words, lengths, salts, seed):
    """For n-gram contexts (``words`` int64 (m, width), oldest first, ``lengths`` (m,)):
    ``(keys, suffix keys, own entries)``, uint64 (m,).

    The twin of ``FeatureExtractor.keys_for(n, words)`` for the untagged n-gram types
    (type id n, ``salts`` their :attr:`~snm_core.text.features.FeatureExtractor.type_salts`,
    ``seed`` ``hashing.SEQUENCE_SEED``): a context's key, its suffix's (without its oldest
    word; the empty context's is its own) and ``link_key`` of its prefix's key and last
    word (0 for the empty context), in one pass: the suffix's fold is the context's
    before its oldest word.
    """
    m = len(lengths)
    keys = np.empty(m, np.uint64)
    suffix = np.empty(m, np.uint64)
    own = np.zeros(m, np.uint64)
    for i in range(m):
        n = lengths[i]
        h = seed
        for col in range(n - 1, 0, -1):
            h = _combine(h, np.uint64(words[i, col]))
        if n == 0:
            keys[i] = _mix64(h ^ salts[0])
            suffix[i] = keys[i]
            continue
        suffix[i] = _mix64(h ^ salts[n - 1])
        keys[i] = _mix64(_combine(h, np.uint64(words[i, 0])) ^ salts[n])
        p = seed
        for col in range(n - 2, -1, -1):
            p = _combine(p, np.uint64(words[i, col]))
        own[i] = _combine(_mix64(p ^ salts[n - 1]), np.uint64(words[i, n - 1]))
    return keys, suffix, own


@numba.njit(nogil=True, cache=True)
def link_keys(keys, suffix, lengths, of, word):
    """For links (feature row ``of``, ``word``): ``(entry keys, suffix entry keys)``, the
    ``link_key`` of their context and of its suffix (an empty context's: its own)."""
    entry = np.empty(len(of), np.uint64)
    entry_suffix = np.empty(len(of), np.uint64)
    for i in range(len(of)):
        w = np.uint64(word[i])
        entry[i] = _combine(keys[of[i]], w)
        entry_suffix[i] = _combine(suffix[of[i]], w) if lengths[of[i]] > 0 else entry[i]
    return entry, entry_suffix


@numba.njit(nogil=True, cache=True)
def _table_bits(n):
    bits = 4
    while (1 << bits) < 2 * n:
        bits += 1
    return bits


@numba.njit(nogil=True, cache=True)
def group_rows(keys):
    """``(group of each row, first row of each group)``, int64; groups numbered in the
    order of their first rows."""
    mask = np.uint64((1 << _table_bits(len(keys))) - 1)
    table = np.full(int(mask) + 1, EMPTY, np.int64)
    group = np.empty(len(keys), np.int64)
    first = np.empty(len(keys), np.int64)
    groups = 0
    for i in range(len(keys)):
        slot = keys[i] & mask
        while True:
            g = table[slot]
            if g == EMPTY:
                table[slot] = groups
                first[groups] = i
                group[i] = groups
                groups += 1
                break
            if keys[first[g]] == keys[i]:
                group[i] = g
                break
            slot = (slot + np.uint64(1)) & mask
    return group, first[:groups]


#: ``find`` cuts its keys into chunks of about 2^CHUNK_BITS, each chunk's table a few
#: hundred KiB (within a core's cache), by the key bits from CUT_SHIFT up: above the
#: table's own (the low bits) and below the partitions' (the high bits).
CHUNK_BITS, CUT_SHIFT = 14, np.uint64(24)


@numba.njit(nogil=True, cache=True)
def _cut(values, chunks):
    """``(values by chunk, their positions, bounds)``: stable, chunk c's at
    ``bounds[c]:bounds[c + 1]``."""
    mask = np.uint64(chunks - 1)
    bounds = np.zeros(chunks + 1, np.int64)
    for v in values:
        bounds[((v >> CUT_SHIFT) & mask) + 1] += 1
    for c in range(chunks):
        bounds[c + 1] += bounds[c]
    cursor = bounds[:-1].copy()
    out = np.empty(len(values), np.uint64)
    position = np.empty(len(values), np.int64)
    for i in range(len(values)):
        c = (values[i] >> CUT_SHIFT) & mask
        out[cursor[c]] = values[i]
        position[cursor[c]] = i
        cursor[c] += 1
    return out, position, bounds


@numba.njit(nogil=True, cache=True)
def find(keys, queries):
    """Position of each query in ``keys`` (distinct), -1 where absent: int64.

    A table of every key would miss the cache at every probe; with keys and queries
    cut by chunk first, each chunk's table stays in the cache."""
    chunks = 1 << max(0, _table_bits(len(keys)) - 1 - CHUNK_BITS)
    keys, rows, key_bounds = _cut(keys, chunks)
    queries, position, query_bounds = _cut(queries, chunks)
    largest = 0
    for c in range(chunks):
        largest = max(largest, key_bounds[c + 1] - key_bounds[c])
    table = np.empty(1 << _table_bits(largest), np.int64)
    found = np.empty(len(queries), np.int64)
    for c in range(chunks):
        mask = np.uint64((1 << _table_bits(key_bounds[c + 1] - key_bounds[c])) - 1)
        table[:int(mask) + 1] = EMPTY
        for i in range(key_bounds[c], key_bounds[c + 1]):
            slot = keys[i] & mask
            while table[slot] != EMPTY:
                slot = (slot + _ONE) & mask
            table[slot] = i
        for j in range(query_bounds[c], query_bounds[c + 1]):
            slot = queries[j] & mask
            row = EMPTY
            while table[slot] != EMPTY:
                if keys[table[slot]] == queries[j]:
                    row = rows[table[slot]]
                    break
                slot = (slot + _ONE) & mask
            found[position[j]] = row
    return found


@numba.njit(nogil=True, cache=True)
def padded_words(offsets, values, width):
    """The word lists of a list column (``offsets``, ``values``) as rows of ``width``
    words padded with -1, and their lengths: ``(words int64 (m, width), lengths)`` (a
    longer list keeps its first ``width`` words; its length says so)."""
    m = len(offsets) - 1
    words = np.full((m, width), -1, np.int64)
    lengths = np.empty(m, np.int64)
    for i in range(m):
        lengths[i] = offsets[i + 1] - offsets[i]
        for j in range(min(lengths[i], width)):
            words[i, j] = values[offsets[i] + j]
    return words, lengths
