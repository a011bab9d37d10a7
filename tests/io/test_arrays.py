"""numpy helpers that the count's speed rests on, against numpy's own definitions."""

import numpy as np
import pytest

from snm_core.io.arrays import group_rows, sorted_ids, stable_argsort, take_rows


def _cases():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    yield "hashed keys with repeats", np.concatenate([keys, keys[::3], keys[:10]])
    yield "small int64 values", rng.integers(0, 1000, 20000).astype(np.int64)
    # Values that differ only in their top and lowest bits: the radix passes of the
    # digits between are skipped.
    high = rng.integers(0, 4, 3000).astype(np.uint64) << np.uint64(62)
    yield "equal high bits", high | rng.integers(0, 8, 3000).astype(np.uint64)
    # Keys of one bucket (a shared top, whose digit passes are skipped), with many
    # repeats that must keep their input order.
    bucket = np.uint64(5) << np.uint64(58)
    many = bucket | rng.integers(0, 2**40, 200000, dtype=np.uint64)
    yield "one bucket with repeats", np.concatenate([many, many[:50000]])
    yield "one value", np.array([5], np.uint64)
    yield "empty", np.zeros(0, np.uint64)


@pytest.mark.parametrize("name,values", list(_cases()), ids=[c[0] for c in _cases()])
def test_stable_argsort_is_numpys_stable_argsort(name, values):
    order, ordered = stable_argsort(values, return_sorted=True)
    np.testing.assert_array_equal(order, np.argsort(values, kind="stable"))
    np.testing.assert_array_equal(ordered, np.sort(values))
    np.testing.assert_array_equal(stable_argsort(values), order)


@pytest.mark.parametrize("name,values", list(_cases()), ids=[c[0] for c in _cases()])
def test_sorted_ids_are_numpys_unique_inverse(name, values):
    ids, distinct, first = sorted_ids(values)
    expected, index, inverse = np.unique(values, return_index=True, return_inverse=True)
    np.testing.assert_array_equal(distinct, expected)
    np.testing.assert_array_equal(ids, inverse.ravel())
    np.testing.assert_array_equal(first, index)  # each key's first row


@pytest.mark.parametrize("dtype,width",
                         [(np.int32, 4), (np.int16, 3), (np.uint64, 1), (np.int32, 0)])
def test_take_rows_equals_fancy_indexing(dtype, width):
    rng = np.random.default_rng(5)
    array = rng.integers(-5, 100, (50, width)).astype(dtype)
    for index in (rng.integers(0, 50, 80), np.arange(50)[::-1], np.zeros(0, np.int64)):
        got = take_rows(array, index)
        assert got.dtype == dtype and np.array_equal(got, array[index])
    assert take_rows(array[::2], np.array([1, 0])).tolist() == array[::2][[1, 0]].tolist()


@pytest.mark.parametrize("num_groups", [1, 5, 70_000])
def test_group_rows_gives_each_group_its_rows_in_order(num_groups):
    ids = np.random.default_rng(num_groups).integers(0, num_groups, 3000)
    order, bounds = group_rows(ids, num_groups)
    assert bounds[0] == 0 and bounds[-1] == len(ids)
    for g in np.unique(np.r_[ids[:50], 0, num_groups - 1]):
        np.testing.assert_array_equal(order[bounds[g]:bounds[g + 1]], np.flatnonzero(ids == g))


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 5000, 300_000])
@pytest.mark.parametrize("bits", [1, 11, 12, 33, 64])
def test_radix_sorts_are_numpys(size, bits):
    """Every width of value (passes skipped where all share a digit), either side of
    the size below which numpy sorts; the argsort stable."""
    from snm_core.io.radix import argsort_uint64, sort_uint64
    rng = np.random.default_rng(size + bits)
    values = rng.integers(0, 2**64, size, dtype=np.uint64) >> np.uint64(64 - bits)
    values[::7] |= np.uint64(1) << np.uint64(bits - 1)  # digits shared by many
    values[::5] = values[::3][:len(values[::5])]  # repeats
    ours = values.copy()
    sort_uint64(ours)
    np.testing.assert_array_equal(ours, np.sort(values))
    order, ordered = argsort_uint64(values)
    np.testing.assert_array_equal(order, np.argsort(values, kind="stable"))
    np.testing.assert_array_equal(ordered, ours)


def test_stable_argsort_of_narrow_integers():
    values = np.random.default_rng(5).integers(0, 50, 3000).astype(np.int32)
    order, ordered = stable_argsort(values, return_sorted=True)
    np.testing.assert_array_equal(order, np.argsort(values, kind="stable"))
    assert ordered.dtype == np.int32 and np.array_equal(ordered, np.sort(values))


@pytest.mark.parametrize("size", [0, 1, 17, 5000, 60_000, 300_000])
@pytest.mark.parametrize("span_bits", [0, 12, 40, 64])
def test_record_sort_is_a_lexsort(size, span_bits):
    """16-byte records (a hashed key, then 4 bytes that order equal keys, then a payload
    that moves with them) as numpy's lexsort orders them: keys spanning few or all of
    their 64 bits (a partition's share their high bits), repeated keys among them; 60,000
    rows take the widest digit."""
    from snm_core.io.radix import sort_records
    rng = np.random.default_rng(size * 100 + span_bits)
    records = np.zeros(size, [("key", "<u8"), ("minor", "<u4"), ("payload", "<f4")])
    high = np.uint64(rng.integers(0, 2**64, dtype=np.uint64))
    low = rng.integers(0, 2**64, size, dtype=np.uint64) >> np.uint64(64 - span_bits) \
        if span_bits else np.zeros(size, np.uint64)
    records["key"] = (high & ~np.uint64(2**span_bits - 1 if span_bits < 64 else 2**64 - 1)) | low
    records["key"][::5] = records["key"][::3][:len(records[::5])]  # repeats
    records["minor"] = rng.integers(0, 2**32, size, dtype=np.uint32)
    records["minor"][::4] = 7
    records["payload"] = rng.random(size)
    expected = records[np.lexsort((records["minor"], records["key"]))]
    sort_records(records, {})
    np.testing.assert_array_equal(records, expected)
