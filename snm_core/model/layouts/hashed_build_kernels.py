"""Compiled loops (numba) of building the hashed layout
(:mod:`snm_core.model.layouts.hashed_build`): a slice of links made into scatter records
in one pass, and records grouped by key bits in a counting sort.

numpy took seven passes and temporaries over the slice for the records (the link key's
hash, two gathers, a division) and a stable argsort and a gather to group them.
"""

import numba
import numpy as np

from snm_core.text.compiled import _combine_one


@numba.njit(nogil=True, cache=True)
def fill_records(feature_keys, feature_counts, rows, words, m, counts, mask, key, m_out, c_out):
    """Records of links with feature rows ``rows``: ``key`` the link key (``& mask``),
    ``m_out`` M_fw, ``c_out`` c(w | f) = count / the feature's count, rounded from a
    float64 quotient as numpy's true division and cast are."""
    for i in range(len(rows)):
        row = rows[i]
        key[i] = _combine_one(feature_keys[row], np.uint64(words[i])) & mask
        m_out[i] = m[i]
        c_out[i] = counts[i] / feature_counts[row]


@numba.njit(nogil=True, cache=True)
def group_by_bits(records, shift, bits, grouped):
    """``records`` (n, 2) uint64 (a key, then its 8 bytes of values) into ``grouped``,
    by key bits ``[shift, shift + bits)``, each group's records in their order; returns
    the groups' bounds, int64 (2^bits + 1,)."""
    mask = np.uint64((1 << bits) - 1)
    bounds = np.zeros((1 << bits) + 1, np.int64)
    for i in range(len(records)):
        bounds[((records[i, 0] >> shift) & mask) + 1] += 1
    for g in range(1 << bits):
        bounds[g + 1] += bounds[g]
    at = bounds[:-1].copy()
    for i in range(len(records)):
        g = (records[i, 0] >> shift) & mask
        grouped[at[g], 0] = records[i, 0]
        grouped[at[g], 1] = records[i, 1]
        at[g] += 1
    return bounds
