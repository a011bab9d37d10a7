"""Least-significant-digit radix sorts of uint64 values (C, ``snm_core/io/radix.c``; no GIL).

numpy sorts uint64 with a SIMD quicksort whose cost grows with log n (about 58 ns a
value at 3.6M values on this project's machines), and argsorts them several times
slower.  Eight bits a pass (256 counters and 256 write streams, which the caches
hold), only as many passes as the largest value has bits, and a pass skipped when
every value shares its digit: the same arrays sorted in about a quarter of that, and
a stable argsort (each value carried with its row) in about two thirds.

:func:`sort_records` sorts 16-byte records keyed by a hash most significant digit first
(``snm_core/io/record_sort.c``, the count's sort): a hashed layout's partition of links
in less than half the time of :func:`argsort_keys` and the gather after it.
"""

import numpy as np

from snm_core.io import native

#: Below this many values numpy's sort is as fast (no passes' set-up to repay).
SMALL = 1 << 10

_radix_sort = native.function("radix_sort", [native.ptr, native.ptr, native.i64], native.i64)
_radix_argsort = native.function("radix_argsort", [native.ptr, native.i64] + [native.ptr] * 3)
_sort_keyed_records = native.function("sort_keyed_records", [native.ptr, native.ptr, native.i64])


def sort_uint64(values):
    """Sort uint64 ``values`` in place (as ``values.sort()``)."""
    if len(values) < SMALL:
        values.sort()
    else:
        status = _radix_sort(native.address(values, np.uint64), None, len(values))
        native.checked(status, "radix sort")


def argsort_uint64(values):
    """``(order, values[order])``: the stable sorting permutation (int64) of uint64
    ``values`` (fewer than 2^32), and the values sorted."""
    if len(values) < SMALL:
        order = np.argsort(values, kind="stable")
        return order, values[order]
    keys, rows = np.array(values, np.uint64), np.arange(len(values), dtype=np.uint32)
    native.checked(_radix_sort(native.address(keys), native.address(rows), len(keys)),
                   "radix sort")
    return rows.astype(np.int64), keys


def argsort_keys(keys, scratch=None):
    """The stable sorting permutation (uint32) of uint64 keys, ``keys`` unchanged.

    ``scratch``: a dict that keeps the work arrays between calls (their pages
    are faulted in once, not per call: the compact builds sort many partitions).
    """
    keys = np.ascontiguousarray(keys, np.uint64)
    n = len(keys)
    if n >= 1 << 32:
        return np.argsort(keys, kind="stable")
    scratch = {} if scratch is None else scratch
    if len(scratch.get("keys", ())) < 2 * n:
        scratch["keys"] = np.empty(2 * n, np.uint64)
        scratch["order"] = np.empty(n, np.uint32)
    order = np.empty(n, np.uint32)
    _radix_argsort(native.address(keys), n, native.address(order),
                   native.address(scratch["keys"]), native.address(scratch["order"]))
    return order


def sort_records(records, scratch=None):
    """Sort 16-byte records whose first field is a uint64 hashed key, in place, by the
    key and then the next 4 bytes as uint32 (``snm_core/io/record_sort.c``: the records
    move with their payload, where an argsort needs a gather of them at random after).
    Not stable: rows of equal keys end in the order of their next 4 bytes.

    ``scratch``: a dict that keeps the sort's spare buffer between calls, as
    :func:`argsort_keys`'s."""
    first = records.dtype.names and records.dtype.fields[records.dtype.names[0]]
    if records.dtype.itemsize != 16 or not first or first[0] != np.uint64 or first[1] != 0:
        raise ValueError("sort_records takes 16-byte records whose first field is a uint64 key")
    scratch = {} if scratch is None else scratch
    if "records" not in scratch or len(scratch["records"]) < len(records):
        scratch["records"] = np.empty(len(records), records.dtype)
    _sort_keyed_records(native.address(records), native.address(scratch["records"]),
                        len(records))
