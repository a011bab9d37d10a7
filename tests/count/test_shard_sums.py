"""The empty context's links summed over a shard: the same sums, one row a word."""

import collections

import numpy as np

from snm_core.count.counting import ShardSums


def test_a_shard_s_context_free_links_are_summed_into_one_row_a_word():
    rng = np.random.default_rng(3)
    vocab_size, key = 50, np.uint64(2 ** 63 + 5)
    sums, expected = ShardSums(vocab_size), collections.Counter()
    first_row = None
    for batch in range(20):
        words = rng.integers(0, vocab_size, rng.integers(1, 200))
        expected.update(words.tolist())
        distinct, counts = np.unique(words, return_counts=True)
        features = {"feature": np.array([key]), "type": np.array([batch % 2], np.int32),
                    "words": np.full((1, 4), -1, np.int32)}
        first_row = first_row or features
        sums.add({"feature": np.full(len(distinct), key), "word": distinct.astype(np.int32),
                  "count": counts.astype(np.int64)}, features)
    (links,), (feature_row,) = sums.partials()
    assert dict(zip(links["word"].tolist(), links["count"].tolist())) == dict(expected)
    assert list(links["word"]) == sorted(expected) and set(links["feature"]) == {key}
    # the first batch's identity of the key is kept, with the shard's links of it
    assert {name: feature_row[name] for name in first_row} == first_row
    assert feature_row["links"].tolist() == [len(expected)]
    assert sums.partials() == ([], [])  # emptied: the next shard starts from zero
