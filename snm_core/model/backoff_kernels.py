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


@numba.njit(nogil=True, cache=True)
def find(keys, queries):
    """Position of each query in ``keys`` (distinct), -1 where absent: int64."""
    mask = np.uint64((1 << _table_bits(len(keys))) - 1)
    table = np.full(int(mask) + 1, EMPTY, np.int64)
    for i in range(len(keys)):
        slot = keys[i] & mask
        while table[slot] != EMPTY:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = i
    found = np.empty(len(queries), np.int64)
    for j in range(len(queries)):
        slot = queries[j] & mask
        found[j] = EMPTY
        while table[slot] != EMPTY:
            if keys[table[slot]] == queries[j]:
                found[j] = table[slot]
                break
            slot = (slot + np.uint64(1)) & mask
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
