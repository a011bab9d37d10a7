"""Keys: the hash functions' definitions, collision detection, and the rate the 64-bit
keys give at the sizes docs/guide.md ("Files between stages") states."""

import numpy as np
import pytest

from snm_core.count import counting
from snm_core.io import key_ranges
from snm_core.text import hashing
from snm_core.text.config import preset
from snm_core.text.features import FeatureExtractor
from snm_core.text.synthetic import generate
from snm_core.text.tokenize import tokenize
from snm_core.text.vocab import Vocabulary


def test_merge_counts_two_features_on_one_key():
    key = np.array([7, 7, 9], np.uint64)
    links = {"feature": key, "word": np.array([3, 4, 3], np.int32),
             "count": np.array([1, 2, 5], np.int64)}
    features = {"feature": key, "type": np.array([2, 2, 1], np.int32),
                "words": np.array([[3, 4], [3, 5], [6, -1]], np.int32)}
    _, table, collisions = counting.merge_bucket([links], [features], 5)
    assert collisions == 1 and table.num_rows == 2
    same = dict(features, words=np.array([[3, 4], [3, 4], [6, -1]], np.int32))
    assert counting.merge_bucket([links], [same], 5)[2] == 0


def test_truncated_keys_collide_like_random_numbers():
    """Birthday test on the low 24 bits: collisions match n**2 / 2**25 for random keys.

    If the full 64-bit keys are as good as random, n features give about
    n**2 / 2**65 colliding pairs: 6e-7 for kernel's 4.7M 5-gram features,
    1.5e-4 for its 75M skip-10-gram features, 0.03 for a billion.
    """
    lines = generate(3000, seed=9)
    vocab = Vocabulary(sorted({w for line in lines for w in line.split()}))
    events = FeatureExtractor(preset("skip10gram"), ("a", "b")).extract(tokenize(lines, vocab)[0])
    keys = np.unique(events.key)
    n = len(keys)
    low = np.sort(keys & np.uint64((1 << 24) - 1))
    colliding_pairs = 0
    run = 1
    for same in np.r_[low[1:] == low[:-1], False]:
        if same:
            run += 1
        else:
            colliding_pairs += run * (run - 1) // 2
            run = 1
    expected = n * (n - 1) / 2 / 2 ** 24
    assert n > 20000
    assert abs(colliding_pairs - expected) < 5 * np.sqrt(expected)  # Poisson, 5 sigma


def _fmix64_python(x):
    """murmur3 fmix64 on Python integers: the definition the C loops must keep."""
    mask = 2 ** 64 - 1
    x ^= x >> 33
    x = x * 0xFF51AFD7ED558CCD & mask
    x ^= x >> 33
    x = x * 0xC4CEB9FE1A85EC53 & mask
    return x ^ x >> 33


def test_mix64_and_combine_equal_their_integer_definitions():
    """Every feature key ever written depends on these two; they must not drift.

    Both implementations are checked: the C loops ``mix64`` and ``combine`` run, and
    ``fmix64_steps``, the numpy definition.
    """
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.integers(0, 2 ** 64, size=300, dtype=np.uint64),
                        np.array([0, 1, 2 ** 64 - 1], dtype=np.uint64)])
    values = rng.integers(-1, 2 ** 31, size=303)
    golden = 0x9E3779B97F4A7C15
    expected = [_fmix64_python(int(h) ^ ((int(v) + 1) % 2 ** 64 * golden & (2 ** 64 - 1)))
                for h, v in zip(x, values)]
    assert hashing.fmix64_steps(x.copy()).tolist() == [_fmix64_python(int(v)) for v in x]
    assert hashing.mix64(x).tolist() == [_fmix64_python(int(v)) for v in x]
    assert hashing.combine(x, values).tolist() == expected
    assert hashing.combine(x[0], values[:5]).tolist() == expected[:1] + [
        _fmix64_python(int(x[0]) ^ ((int(v) + 1) * golden & (2 ** 64 - 1)))
        for v in values[1:5]]
    assert hashing.combine(x[:3, None], values[None, :2]).tolist() == [
        [_fmix64_python(int(h) ^ ((int(v) + 1) % 2 ** 64 * golden & (2 ** 64 - 1)))
         for v in values[:2]] for h in x[:3]]
    assert hashing.mix64(x.reshape(3, 101)).shape == (3, 101)
    assert hashing.mix64(x[::2]).tolist() == [_fmix64_python(int(v)) for v in x[::2]]
    assert int(hashing.combine(int(x[1]), int(values[1]))) == expected[1]


@pytest.mark.parametrize("num_buckets", [1, 3, 64, 1000, 65536])
def test_bucket_starts_are_the_first_key_of_each_bucket(num_buckets):
    starts = key_ranges.bucket_starts(num_buckets)
    assert np.array_equal(key_ranges.bucket_of(starts, num_buckets), np.arange(num_buckets))
    before = starts[1:] - np.uint64(1)  # the last key of the bucket before
    assert np.array_equal(key_ranges.bucket_of(before, num_buckets), np.arange(num_buckets - 1))


def test_cut_by_bucket_cuts_sorted_and_unsorted_partials_alike():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64 - 1, 5000, dtype=np.uint64, endpoint=True)
    keys[:3] = [0, 2**64 - 1, 2**63]  # the ends and a bucket start
    partial = {"feature": keys, "word": np.arange(len(keys), dtype=np.int32)}
    order = np.argsort(keys, kind="stable")
    ordered = {k: v[order] for k, v in partial.items()}
    for num_buckets in (1, 7, 64):
        from_sorted, sorted_bounds = counting.cut_by_bucket(ordered, num_buckets)
        assert from_sorted is ordered  # already in bucket order: not copied
        from_unsorted, unsorted_bounds = counting.cut_by_bucket(partial, num_buckets)
        assert np.array_equal(sorted_bounds, unsorted_bounds)
        assert sorted_bounds[0] == 0 and sorted_bounds[-1] == len(keys)
        for b in range(num_buckets):
            rows = slice(sorted_bounds[b], sorted_bounds[b + 1])
            assert np.all(key_ranges.bucket_of(from_sorted["feature"][rows], num_buckets) == b)
            assert sorted(from_sorted["word"][rows].tolist()) == \
                sorted(from_unsorted["word"][rows].tolist())
