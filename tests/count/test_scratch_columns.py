"""The count's partials in the scratch's narrow columns (16-bit word ids, 32-bit counts)
and back: the merge must see what was sent, whatever the vocabulary and counts.

Oracle: sums of (feature, word) -> count and the feature rows, by Python dictionaries.
"""

import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.count import counting
from snm_core.io import key_ranges

BIG = counting.SCRATCH_COUNT_MAX


def link_sums(partial):
    sums = collections.Counter()
    for f, w, c in zip(partial["feature"].tolist(), partial["word"].tolist(),
                       partial["count"].tolist()):
        sums[f, w] += c
    return sums


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 70_000),
                               st.sampled_from([1, 2, 7, BIG - 1, BIG, BIG + 1, 3 * BIG + 5,
                                                2**20 + 3])), max_size=30),
       vocab_size=st.sampled_from([10, 0xFFFF, 0x10000, 200_000]))
def test_links_come_back_with_their_sums_and_order(rows, vocab_size):
    rows = sorted((f, w % vocab_size, c) for f, w, c in rows)
    partial = {"feature": np.array([r[0] for r in rows], np.uint64),
               "word": np.array([r[1] for r in rows], np.int32),
               "count": np.array([r[2] for r in rows], np.int64)}
    sent = counting.links_to_scratch(partial, vocab_size)
    assert sent["count"].dtype == np.uint16 and sent["count"].min(initial=1) > 0
    assert len(sent["count"]) == sum(-(-c // BIG) for _, _, c in rows)
    assert sent["word"].dtype == (np.uint16 if vocab_size <= 0xFFFF else np.int32)
    assert np.all(sent["feature"][1:] >= sent["feature"][:-1])  # still sorted by key
    assert link_sums(sent) == link_sums(partial)
    # The merge reads the narrow columns and sums the pieces of a large count back into
    # one link.
    merged = counting.merge_links([sent])
    assert dict(zip(zip(merged["feature"].to_pylist(), merged["word"].to_pylist()),
                    merged["count"].to_pylist())) == dict(link_sums(partial))


@settings(max_examples=30, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 5),
                               st.sampled_from([1, 2**31 - 1, 2**31, 2**40])), max_size=12))
def test_the_merge_sums_counts_past_its_sorts_32_bits(rows):
    """Sums so far (int64) past the 32 bits the merge's sort carries are cut into rows and
    summed back."""
    partial = {"feature": np.array([r[0] for r in rows], np.uint64),
               "word": np.array([r[1] for r in rows], np.int32),
               "count": np.array([r[2] for r in rows], np.int64)}
    merged = counting.merge_links([partial])
    assert dict(zip(zip(merged["feature"].to_pylist(), merged["word"].to_pylist()),
                    merged["count"].to_pylist())) == dict(link_sums(partial))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(st.integers(0, 0x1FFFF), max_size=9), max_size=30),
       vocab_size=st.sampled_from([0xFFFF, 0x10000, None]), num_buckets=st.integers(1, 5),
       num_type_ids=st.sampled_from([None, 300, 1 << 15, (1 << 15) + 1]))
def test_feature_words_come_back_without_padding_whatever_their_width(rows, vocab_size,
                                                                     num_buckets, num_type_ids):
    """Features of any number of words (a batch's of one type, narrow; another count's,
    padded to the longest) travel without padding and come back as each row's words,
    each bucket's rows with their own words and types, which the merge keeps."""
    limit = vocab_size if vocab_size is not None else 0x20000
    rows = [[w % limit for w in row] for row in rows]
    width = max((len(r) for r in rows), default=0)
    words = np.full((len(rows), width), -1, np.int32)
    for i, row in enumerate(rows):
        words[i, :len(row)] = row
    keys = np.sort(np.random.default_rng(len(rows)).integers(0, 2**64, len(rows), np.uint64,
                                                              endpoint=False))
    types = np.arange(len(rows), dtype=np.int32) * ((num_type_ids or 1) - 1) // 30
    partial = {"feature": keys, "type": types, "words": words}
    (sent, bounds), (flat, word_bounds) = counting.cut_features(partial, num_buckets, vocab_size,
                                                                num_type_ids)
    assert flat["word"].dtype == (np.uint16 if vocab_size == 0xFFFF else np.int32)
    assert sent["type"].dtype == (np.int16 if num_type_ids in (300, 1 << 15) else np.int32)
    assert len(flat["word"]) == sum(len(r) for r in rows)  # no padding travels
    for b in range(num_buckets):
        back = counting.features_from_scratch(
            {name: column[bounds[b]:bounds[b + 1]] for name, column in sent.items()},
            {"word": flat["word"][word_bounds[b]:word_bounds[b + 1]]})
        expected = rows[bounds[b]:bounds[b + 1]]
        assert back["width"].tolist() == [len(r) for r in expected]
        assert back["word"].tolist() == [w for r in expected for w in r]
        assert back["feature"].tolist() == keys[bounds[b]:bounds[b + 1]].tolist()
        assert back["type"].tolist() == types[bounds[b]:bounds[b + 1]].tolist()
        merged, collisions = counting.distinct_features([back])
        assert merged["word"].dtype == np.int32 and collisions == 0
        assert merged["word"].tolist() == [w for r in expected for w in r]


def test_a_features_part_that_disagrees_with_its_words_is_an_error():
    rows, words = counting.features_to_scratch(
        {"feature": np.array([1, 2], np.uint64), "type": np.array([0, 0], np.int32),
         "words": np.array([[3, 4], [5, 6]], np.int32)}, 0xFFFF)
    with pytest.raises(ValueError, match="name 4 words"):
        counting.features_from_scratch(rows, {"word": words["word"][:3]})


@settings(max_examples=60, deadline=None)
@given(features=st.dictionaries(
           st.integers(0, 2**64 - 1),
           st.dictionaries(st.integers(0, 70_000), st.sampled_from([1, 3, 2**32 - 1, 2**40]),
                           max_size=4),
           max_size=12),
       vocab_size=st.sampled_from([0xFFFF, 200_000]))
def test_merged_links_come_back_with_their_features_keys(features, vocab_size):
    """A bucket's merged links travel without their features' keys (the features file
    holds them, some features with no link left) and come back as they were."""
    keys = sorted(features)
    rows = [(f, w % vocab_size, c) for f in keys for w, c in sorted(features[f].items())
            if w < vocab_size]
    rows = sorted(dict(((f, w), (f, w, c)) for f, w, c in rows).values())
    links = pa.table({"feature": pa.array([r[0] for r in rows], pa.uint64()),
                      "word": pa.array([r[1] for r in rows], pa.int32()),
                      "count": pa.array([r[2] for r in rows], pa.int64())})
    sent = counting.merged_links_to_scratch(links, np.array(keys, np.uint64), vocab_size)
    assert sent["links"]["word"].dtype == (np.uint16 if vocab_size <= 0xFFFF else np.int32)
    assert sent["links"]["count"].dtype == (
        np.int64 if any(r[2] >= 2**32 for r in rows) else np.uint32)
    assert "feature" not in sent["links"]
    back = counting.merged_links_from_scratch(sent, np.array(keys, np.uint64))
    assert back.to_pylist() == links.to_pylist()


def test_merged_links_of_a_feature_not_in_the_features_file_are_refused():
    links = pa.table({"feature": pa.array([5, 9], pa.uint64()),
                      "word": pa.array([1, 2], pa.int32()), "count": pa.array([1, 1], pa.int64())})
    with pytest.raises(ValueError, match="features file"):
        counting.merged_links_to_scratch(links, np.array([5, 7], np.uint64), 10)
    unsorted = pa.table({"feature": pa.array([9, 5, 9], pa.uint64()),
                         "word": pa.array([1, 2, 3], pa.int32()),
                         "count": pa.array([1, 1, 1], pa.int64())})
    with pytest.raises(ValueError, match="not sorted by feature"):
        counting.merged_links_to_scratch(unsorted, np.array([5, 9], np.uint64), 10)
    sent = counting.merged_links_to_scratch(links, np.array([5, 9], np.uint64), 10)
    with pytest.raises(ValueError, match="2 links, the features file 3 features"):
        counting.merged_links_from_scratch(sent, np.array([5, 9, 11], np.uint64))


@settings(max_examples=60, deadline=None)
@given(features=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 600),
                                   st.booleans()), max_size=12, unique_by=lambda f: f[0]),
       num_buckets=st.integers(1, 6), vocab_size=st.sampled_from([0xFFFF, 200_000]))
def test_a_parts_links_travel_without_keys_and_come_back_to_their_features(
        features, num_buckets, vocab_size):
    """A part's links are sent without their keys, each features row naming how many are
    its own (a feature of more than 65,535 links in several rows); links of a key with no
    features row (a link sketch's collapsed rows of a feature it sent no row of) keep
    their keys.  Each bucket gets back every link of its keys, the features rows of its
    keys and their words, and the merge finds the same links and features as sent."""
    features = sorted((key, n * 211 if n > 590 else n, sent) for key, n, sent in features)
    keys = np.array([f[0] for f in features], np.uint64)
    rows = []  # (key, word, count) of every link, sorted
    for key, n_links, _ in features:
        rows += [(key, w * 7 % vocab_size, 1 + w % 3) for w in range(max(n_links, 1))]
    links = {"feature": np.array([r[0] for r in rows], np.uint64),
             "word": np.array([r[1] for r in rows], np.int32),
             "count": np.array([r[2] for r in rows], np.int64)}
    sent_rows = np.array([f[2] for f in features], bool)  # the rest: loose links
    partial = {"feature": keys[sent_rows], "type": np.arange(len(keys), dtype=np.int32)[sent_rows],
               "words": (keys[sent_rows] % 1000).astype(np.int32).reshape(-1, 1)}
    cut = counting.cut_scratch_groups(links, partial, num_buckets, vocab_size)
    assert "feature" not in cut["links"][0]
    assert cut["features"][0]["links"].dtype == np.uint16
    bucket_of = key_ranges.bucket_of(links["feature"], num_buckets)
    for b in range(num_buckets):
        def part(group):
            columns, bounds = cut[group]
            return {name: column[bounds[b]:bounds[b + 1]] for name, column in columns.items()}
        back = counting.links_from_scratch(part("features"), part("links"), part("loose_links"))
        mine = bucket_of == b
        assert link_sums(back) == link_sums({k: v[mine] for k, v in links.items()})
        feats = counting.features_from_scratch(part("features"), part("feature_words"))
        mine_rows = key_ranges.bucket_of(partial["feature"], num_buckets) == b
        assert set(feats["feature"].tolist()) == set(partial["feature"][mine_rows].tolist())
        for key, word in zip(feats["feature"].tolist(), feats["word"].tolist()):
            assert word == key % 1000
    # One part sent whole (another count's tables, --add_to) merges to the same links
    # and features, one row a feature however many rows carried it.
    groups = counting.scratch_groups(links, partial, vocab_size)
    back = counting.links_from_scratch(groups["features"], groups["links"], groups["loose_links"])
    merged = counting.merge_links([back])
    assert dict(zip(zip(merged["feature"].to_pylist(), merged["word"].to_pylist()),
                    merged["count"].to_pylist())) == dict(link_sums(links))
    distinct, collisions = counting.distinct_features(
        [counting.features_from_scratch(groups["features"], groups["feature_words"])])
    assert collisions == 0 and distinct["feature"].tolist() == partial["feature"].tolist()


def test_unsorted_partials_are_refused():
    links = {"feature": np.array([5, 3], np.uint64), "word": np.array([1, 1], np.int32),
             "count": np.array([1, 1], np.int64)}
    features = {"feature": np.array([3, 5], np.uint64), "type": np.zeros(2, np.int32),
                "words": np.zeros((2, 1), np.int32)}
    with pytest.raises(ValueError, match="not sorted"):
        counting.links_without_keys(links, features)
    with pytest.raises(ValueError, match="not sorted"):
        counting.links_without_keys({k: v[::-1] for k, v in links.items()},
                                    {k: v[::-1] for k, v in features.items()})
