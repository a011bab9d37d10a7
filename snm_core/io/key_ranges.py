"""Key-range buckets of uint64 keys: how every stage cuts its tables into files.

Range partitioning keeps the buckets' concatenation sorted by key, so files written one
per bucket form a globally sorted table; the keys are hashes (:mod:`snm_core.text.hashing`),
so the buckets are about equal.
"""

import numpy as np


def bucket_of(keys, num_buckets):
    """Key-range bucket of each uint64 key: ``floor(key * num_buckets / 2**64)``.

    Range partitioning keeps the buckets' concatenation sorted by key, so files
    written one per bucket form a globally sorted table.

    Parameters
    ----------
    keys : ndarray of uint64, shape (n,)
    num_buckets : int, 1 <= num_buckets <= 2**16

    Returns
    -------
    ndarray of int64, shape (n,), values in [0, num_buckets)
    """
    if not 1 <= num_buckets <= 1 << 16:
        raise ValueError(f"num_buckets must be in [1, 65536], got {num_buckets}")
    keys = np.asarray(keys, dtype=np.uint64)
    # (key >> 16) * num_buckets < 2**64, so the product cannot overflow.
    return ((keys >> np.uint64(16)) * np.uint64(num_buckets) >> np.uint64(48)).astype(np.int64)


def bucket_starts(num_buckets):
    """The smallest key of each bucket of :func:`bucket_of`: uint64 (num_buckets,).

    Bucket ``b`` holds the keys ``k`` with ``(k >> 16) * n >> 48 >= b``, that
    is ``k >= ceil(b * 2**48 / n) << 16``; a sorted key array is cut into its
    buckets by a binary search for these.

    Examples
    --------
    >>> bucket_starts(4).tolist() == [0, 2**62, 2**63, 3 * 2**62]
    True
    """
    if not 1 <= num_buckets <= 1 << 16:
        raise ValueError(f"num_buckets must be in [1, 65536], got {num_buckets}")
    return np.array([-(-b * (1 << 48) // num_buckets) << 16 for b in range(num_buckets)],
                    dtype=np.uint64)
