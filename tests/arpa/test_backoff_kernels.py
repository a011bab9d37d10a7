"""The back-off form's compiled joins against a dict and numpy's stable sort."""

import numpy as np
import pytest

from snm_core.arpa.partitions import by_group
from snm_core.arpa.backoff_kernels import find


@pytest.mark.parametrize("n", [0, 1, 1000, 70_000])
def test_find_gives_each_querys_position_or_minus_one(n):
    """Over 2^15 keys the keys are cut into chunks; every query is still found at its
    key's position, and a missing one is -1."""
    rng = np.random.default_rng(n)
    keys = np.unique(rng.integers(0, 2 ** 64 - 1, n, dtype=np.uint64))
    rng.shuffle(keys)
    queries = np.concatenate([rng.permutation(keys)[:n // 2],
                              rng.integers(0, 2 ** 64 - 1, n // 3 + 1, dtype=np.uint64)])
    position = {int(key): i for i, key in enumerate(keys)}
    assert find(keys, queries).tolist() == [position.get(int(q), -1) for q in queries]


def test_rows_cut_by_group_keep_their_order_within_each():
    rng = np.random.default_rng(5)
    group = rng.integers(0, 7, 10_000).astype(np.uint16)
    columns = {"key": rng.integers(0, 2 ** 64 - 1, 10_000, dtype=np.uint64),
               "m": rng.random(10_000).astype(np.float32)}
    ordered, bounds = by_group(columns, group, 9)  # groups 7 and 8 empty
    order = np.argsort(group, kind="stable")
    for name, values in columns.items():
        assert np.array_equal(ordered[name], values[order])
    assert bounds.tolist() == np.searchsorted(group[order], np.arange(10)).tolist()
