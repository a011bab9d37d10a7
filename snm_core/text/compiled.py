"""The hash steps of :mod:`snm_core.text.hashing`, compiled by numba for the numba loops
(sampling, the trie layouts' and the back-off form's), which inline them.

``hashing.fmix64_steps`` is the one definition: compiled here on a uint64, run by
numpy on arrays; the C loops have their twin in ``hash64.h``.  The tests hold
these to the integer definition.
"""

import numba
import numpy as np

from snm_core.text.hashing import GOLDEN, fmix64_steps

_ONE = np.uint64(1)

_mix64_one = numba.njit(nogil=True, cache=True, inline="always")(fmix64_steps)


@numba.njit(nogil=True, cache=True, inline="always")
def _combine_one(h, value):
    return _mix64_one(h ^ ((value + _ONE) * GOLDEN))
