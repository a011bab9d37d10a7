"""Least-significant-digit radix sorts of uint64 values (numba, no GIL).

numpy sorts uint64 with a SIMD quicksort whose cost grows with log n (about 58 ns a
value at 3.6M values on this project's machines), and argsorts them several times
slower.  Eight bits a pass (256 counters and 256 write streams, which the caches
hold), only as many passes as the largest value has bits, and a pass skipped when
every value shares its digit: the same arrays sorted in about a quarter of that, and
a stable argsort (each value carried with its row) in about two thirds.
"""

import numba
import numpy as np

DIGIT_BITS = 8
#: Below this many values numpy's sort is as fast (no passes' set-up to repay).
SMALL = 1 << 10


@numba.njit(nogil=True, cache=True, inline="always")
def _digit_counts(values):
    """Each pass's digit counts, (passes, 2^DIGIT_BITS), for the passes the largest
    value needs."""
    mask = np.uint64((1 << DIGIT_BITS) - 1)
    largest = np.uint64(0)
    for i in range(len(values)):
        largest = max(largest, values[i])
    passes = 0
    while passes * DIGIT_BITS < 64 and (largest >> np.uint64(passes * DIGIT_BITS)) > 0:
        passes += 1
    counts = np.zeros((passes, 1 << DIGIT_BITS), np.int64)
    for i in range(len(values)):
        value = values[i]
        for p in range(passes):
            counts[p, (value >> np.uint64(p * DIGIT_BITS)) & mask] += 1
    return counts


@numba.njit(nogil=True, cache=True, inline="always")
def _starts(counts, p):
    start = np.empty(1 << DIGIT_BITS, np.int64)
    total = 0
    for d in range(1 << DIGIT_BITS):
        start[d] = total
        total += counts[p, d]
    return start


@numba.njit(nogil=True, cache=True)
def _radix_sort(keys, rows):
    """Sort ``keys`` in place; ``rows`` (empty, or one a key) moved with them."""
    n = len(keys)
    carry = len(rows) > 0
    mask = np.uint64((1 << DIGIT_BITS) - 1)
    counts = _digit_counts(keys)
    first = keys[0]
    source, target = keys, np.empty_like(keys)
    source_rows, target_rows = rows, np.empty_like(rows)
    for p in range(counts.shape[0]):
        shift = np.uint64(p * DIGIT_BITS)
        if counts[p, (first >> shift) & mask] == n:  # one digit: nothing moves
            continue
        start = _starts(counts, p)
        for i in range(n):
            value = source[i]
            at = start[(value >> shift) & mask]
            target[at] = value
            if carry:
                target_rows[at] = source_rows[i]
            start[(value >> shift) & mask] = at + 1
        source, target = target, source
        source_rows, target_rows = target_rows, source_rows
    if source is not keys:
        keys[:] = source
        rows[:] = source_rows


def sort_uint64(values):
    """Sort uint64 ``values`` in place (as ``values.sort()``)."""
    if len(values) < SMALL:
        values.sort()
    else:
        _radix_sort(values, np.zeros(0, np.uint32))


def argsort_uint64(values):
    """``(order, values[order])``: the stable sorting permutation (int64) of uint64
    ``values`` (fewer than 2^32), and the values sorted."""
    if len(values) < SMALL:
        order = np.argsort(values, kind="stable")
        return order, values[order]
    keys, rows = values.copy(), np.arange(len(values), dtype=np.uint32)
    _radix_sort(keys, rows)
    return rows.astype(np.int64), keys
