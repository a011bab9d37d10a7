"""Compressed columns for a count's scratch (:class:`pipelines.shuffle.ArrayShuffle`).

A column is stored as one block: 64-bit integers as the differences of neighbours
(a scratch column of keys is runs sorted by key, so the differences are small), then
each value's bytes regrouped by their place in the value (all first bytes, then all
second bytes: the high bytes of small numbers are zeros side by side; one C pass,
``scratch_codec.c``), then LZ4 (pyarrow's codec, raw blocks: the scratch's blocks are a
bucket's rows of one flush, a few KB to a few hundred, and zstd's level 1, about a tenth
smaller, took three times as long on them).  The count's scratch measured a little over
half its raw bytes (benchmarks/README.md, "The count's scratch"); decoding gives the
array back bit for bit.
"""

import numpy as np
import pyarrow as pa

from snm_core.io import native

_split = native.function("scratch_split", [native.ptr, native.i64, native.i32, native.i32,
                                           native.ptr])
_join = native.function("scratch_join", [native.ptr, native.i64, native.i32, native.i32,
                                         native.ptr])

CODEC = pa.Codec("lz4_raw")


def _differenced(array):
    """Whether a column is stored as differences of neighbours (64-bit integers)."""
    return array.dtype.kind in "iu" and array.dtype.itemsize == 8


def encode(array):
    """The bytes of one column's block (``array`` any fixed-width numpy array)."""
    array = np.ascontiguousarray(array)
    width = array.dtype.itemsize
    n = array.size
    if width > 1:
        grouped = np.empty(array.nbytes, np.uint8)
        _split(array.ctypes.data, n, width, int(_differenced(array)), grouped.ctypes.data)
    else:
        grouped = array.reshape(-1).view(np.uint8)
    return CODEC.compress(pa.py_buffer(grouped), asbytes=True)


def decode_into(block, target):
    """Fill ``target`` (a contiguous array of the column's dtype and shape) from the
    bytes :func:`encode` made of it."""
    width = target.dtype.itemsize
    size = target.nbytes
    # (pyarrow raises OSError for a block cut short or holding more than ``size``)
    grouped = np.frombuffer(CODEC.decompress(block, decompressed_size=size), np.uint8)
    if width > 1:
        _join(grouped.ctypes.data, target.size, width, int(_differenced(target)),
              target.ctypes.data)
    else:
        target.reshape(-1).view(np.uint8)[:] = grouped
