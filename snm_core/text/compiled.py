"""Compiled (numba) twins of the text layer's hot paths, for scoring.

* Hashing: :func:`mix64` and :func:`combine`, the twins of
  :mod:`snm_core.text.hashing`'s, in one pass instead of seven.
* Vocabulary lookup: :class:`WordTable`, a hash table of the words built once
  (``pyarrow.compute.index_in`` rebuilds its table on every call).

Scoring imports this module (through
:mod:`snm_core.model.layouts.hashed_kernels`, or a trie layout), as do sampling and
the hashed layout's build (:mod:`snm_core.model.layouts.hashed_build_kernels`); once it is
imported, ``hashing.mix64``/``combine`` and ``Vocabulary.ids`` use it (same
results).  Every ``snm`` command imports it (through the layouts' names in
:mod:`snm.commands.arguments`), so a count uses it too; the count's sorts are
numba's anyway (:mod:`snm_core.io.radix`), while the fit's loops are C
(``_kernels.c``).  ``numba`` compiles on first use and caches the machine code
beside this file (``cache=True``), so only the first process after an install
pays the few seconds of compilation; every process still pays numba's start
(benchmarks/README.md, "The fit's classes factored").

The tests hold these to independent computations: the hash functions' integer
definitions and a dictionary lookup.
"""

import numba
import numpy as np
import pyarrow as pa

from snm_core.io.arrays import string_buffers
from snm_core.text.hashing import GOLDEN, fmix64_steps

_ONE = np.uint64(1)


# --- hashing: the numba twins of snm_core.text.hashing.mix64 and combine --------------------------

_mix64_one = numba.njit(nogil=True, cache=True, inline="always")(fmix64_steps)


@numba.njit(nogil=True, cache=True, inline="always")
def _combine_one(h, value):
    return _mix64_one(h ^ ((value + _ONE) * GOLDEN))


@numba.vectorize(["uint64(uint64)"], cache=True)
def _mix64_ufunc(x):
    return _mix64_one(x)


@numba.vectorize(["uint64(uint64, uint64)"], cache=True)
def _combine_ufunc(h, value):
    return _combine_one(h, value)


def mix64(x):
    """:func:`snm_core.text.hashing.mix64` in one compiled pass (it calls this once imported)."""
    return _mix64_ufunc(np.asarray(x, dtype=np.uint64))


def combine(h, values):
    """:func:`snm_core.text.hashing.combine` in one compiled pass (it calls this once imported)."""
    return _combine_ufunc(np.asarray(h, dtype=np.uint64), np.asarray(values).astype(np.uint64))


# --- vocabulary lookup ----------------------------------------------------------------------

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@numba.njit(nogil=True, cache=True, inline="always")
def _word_hash(data, start, end):
    """FNV-1a of bytes ``data[start:end]`` (only places words in a table; never stored)."""
    h = _FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(data[i])) * _FNV_PRIME
    return h


@numba.njit(nogil=True, cache=True)
def word_table(offsets, data):
    """Open-addressing table of the words ``data[offsets[i]:offsets[i + 1]]`` (distinct).

    Returns int32 (2**k,): slot -> word index, -1 where empty; at most half full.
    """
    n = len(offsets) - 1
    size = 2
    while size < 2 * n:
        size *= 2
    table = np.full(size, -1, np.int32)
    mask = np.uint64(size - 1)
    for word in range(n):
        slot = _word_hash(data, offsets[word], offsets[word + 1]) & mask
        while table[slot] >= 0:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = word
    return table


@numba.njit(nogil=True, cache=True)
def word_ids(table, table_offsets, table_data, offsets, data, missing):
    """Index in the table's words of each word ``data[offsets[i]:offsets[i + 1]]``.

    Parameters
    ----------
    table : int32 (2**k,), from :func:`word_table` over ``table_offsets``, ``table_data``
    offsets : int (n + 1,), data : uint8, the words looked up (Arrow string buffers)
    missing : int, the result for a word not in the table

    Returns
    -------
    int32 (n,)
    """
    mask = np.uint64(len(table) - 1)
    result = np.empty(len(offsets) - 1, np.int32)
    for i in range(len(offsets) - 1):
        start, end = offsets[i], offsets[i + 1]
        slot = _word_hash(data, start, end) & mask
        found = missing
        while table[slot] >= 0:
            word = table[slot]
            word_start = table_offsets[word]
            if table_offsets[word + 1] - word_start == end - start:
                same = True
                for j in range(end - start):
                    if table_data[word_start + j] != data[start + j]:
                        same = False
                        break
                if same:
                    found = word
                    break
            slot = (slot + np.uint64(1)) & mask
        result[i] = found
    return result


class WordTable:
    """Index of each word of an Arrow string array (distinct words), found by hashing.

    Parameters
    ----------
    words : pyarrow string array, distinct
    """

    def __init__(self, words):
        self.offsets, self.data = string_buffers(words)
        self.table = word_table(self.offsets, self.data)

    def ids(self, words, missing):
        """int32 index of each of ``words`` (Arrow array or chunked array); nulls -> ``missing``."""
        chunks = words.chunks if isinstance(words, pa.ChunkedArray) else [words]
        out = [word_ids(self.table, self.offsets, self.data, *string_buffers(chunk), missing)
               for chunk in chunks if len(chunk)]
        ids = out[0] if len(out) == 1 else np.concatenate(out + [np.zeros(0, np.int32)])
        if words.null_count:
            ids[words.is_null().to_numpy(zero_copy_only=False)] = missing
        return ids
