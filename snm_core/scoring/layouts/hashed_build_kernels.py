"""The loops of building the hashed layout (:mod:`snm_core.scoring.layouts.hashed_build`),
in C (``hashed_loops.c``): a slice of links made into scatter records in one pass,
and records grouped by key bits in a counting sort.

numpy took seven passes and temporaries over the slice for the records (the link key's
hash, two gathers, a division) and a stable argsort and a gather to group them.
"""

import numpy as np

from snm_core.io import native

#: A link as the scatter writes it (``Record`` in the C file).
RECORD = np.dtype([("key", "<u8"), ("m", "<f4"), ("c", "<f4")])

_fill_records = native.function("fill_records", [native.ptr] * 6 + [native.i64, native.u64,
                                                                  native.ptr])
_group_by_bits = native.function("group_by_bits", [native.ptr, native.i64, native.i64,
                                                   native.i64, native.ptr, native.ptr],
                                 native.i64)


def fill_records(feature_keys, feature_counts, rows, words, m, counts, mask):
    """:data:`RECORD` s of links with feature rows ``rows``: the link key (``& mask``),
    M_fw, and c(w | f) = count / the feature's count, rounded from a float64 quotient
    as numpy's true division and cast are."""
    records = np.empty(len(rows), RECORD)
    inputs = [np.ascontiguousarray(a, t) for a, t in (
        (feature_keys, np.uint64), (feature_counts, np.int64), (rows, np.int32),
        (words, np.int32), (m, np.float32), (counts, np.int64))]
    _fill_records(*(native.address(a) for a in inputs), len(rows), int(mask),
                  native.address(records))
    return records


def group_by_bits(records, shift, bits, grouped):
    """``records`` (n, 2) uint64 (a key, then its 8 bytes of values) into ``grouped``,
    by key bits ``[shift, shift + bits)``, each group's records in their order; returns
    the groups' bounds, int64 (2^bits + 1,)."""
    bounds = np.empty((1 << bits) + 1, np.int64)
    native.checked(_group_by_bits(native.address(records, np.uint64), len(records), int(shift),
                                  bits, native.address(grouped, np.uint64),
                                  native.address(bounds)), "grouping scatter records")
    return bounds
