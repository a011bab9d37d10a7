"""A vocabulary's words found by hashing, in C (``words.c``): the index of each word
of an Arrow string array in a list of distinct words.

The table (open addressing, FNV-1a, at most half full) is built once;
``pyarrow.compute.index_in`` would hash its value set again on every call.  The
tests hold it to a dictionary lookup.
"""

import numpy as np
import pyarrow as pa

from snm_core.io import native
from snm_core.io.arrays import string_buffers

_word_table = native.function("word_table", [native.ptr] * 2 + [native.i64, native.ptr,
                                                                 native.i64])
_word_ids = native.function("word_ids", [native.ptr, native.i64] + [native.ptr] * 4
                            + [native.i64, native.i32, native.ptr])


def _buffers(words):
    """``(offsets int64, data uint8)`` of an Arrow string array."""
    offsets, data = string_buffers(words)
    return np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(data)


class WordTable:
    """Index of each word of an Arrow string array (distinct words), found by hashing.

    Parameters
    ----------
    words : pyarrow string array, distinct
    """

    def __init__(self, words):
        self.offsets, self.data = _buffers(words)
        size = 2
        while size < 2 * len(words):
            size *= 2
        self.table = np.full(size, -1, np.int32)
        _word_table(native.address(self.offsets), native.address(self.data), len(words),
                    native.address(self.table), size)

    def ids(self, words, missing):
        """int32 index of each of ``words`` (Arrow array or chunked array); nulls -> ``missing``."""
        chunks = words.chunks if isinstance(words, pa.ChunkedArray) else [words]
        ids = np.empty(len(words), np.int32)
        at = 0
        for chunk in chunks:
            offsets, data = _buffers(chunk)
            _word_ids(native.address(self.table), len(self.table), native.address(self.offsets),
                      native.address(self.data), native.address(offsets), native.address(data),
                      len(chunk), missing, native.address(ids[at:]))
            at += len(chunk)
        if words.null_count:
            ids[words.is_null().to_numpy(zero_copy_only=False)] = missing
        return ids
