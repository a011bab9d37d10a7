"""Key collisions: detection, and the rate the 64-bit keys give at the README's sizes."""

import numpy as np

from snm_core import counting
from snm_core.config import preset
from snm_core.features import FeatureExtractor
from snm_core.synthetic import generate
from snm_core.text import tokenize
from snm_core.vocab import Vocabulary


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
