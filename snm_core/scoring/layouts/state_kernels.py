"""The compiled step every scorer's states share (numba; loaded by scoring only)."""

import numba
import numpy as np


@numba.njit(nogil=True, cache=True)
def shift_states(words, target, keep):
    """The states after ``target``: each row of ``words`` (right-aligned, -1 before) shifted
    left with ``target`` last, holding ``min(keep, width)`` words and -1 before them, so
    that equal states have equal rows; returns ``(words int32 (n, width), length int64
    (n,))``."""
    n, width = words.shape
    new = np.full((n, width), -1, np.int32)
    length = np.empty(n, np.int64)
    for i in range(n):
        k = min(max(keep[i], 0), width)
        length[i] = k
        for j in range(width - k, width - 1):
            new[i, j] = words[i, j + 1]
        if k:
            new[i, width - 1] = target[i]
    return new, length
