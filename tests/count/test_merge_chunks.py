"""A bucket merged a chunk of partials at a time: the same tables as summing them all."""

import collections

import numpy as np
import pytest

from snm_core.count.counting import chunk_bounds, merge_bucket, merge_bucket_chunks

NUM_TYPES = 3


def _identity(key):
    """A feature's type and words, made from its key (so every key names one feature)."""
    return key % NUM_TYPES, [key % 7, key % 5, -1, -1]


def _partials(rng, parts):
    """Random parts of (feature, word) occurrences, one frequent feature in every part,
    each summed and sorted as the count's batches are; and the occurrences counted."""
    occurrences, link_parts, feature_parts = collections.Counter(), [], []
    for _ in range(parts):
        features = np.r_[rng.integers(1, 400, 300), np.full(200, 2 ** 63 + 11)]
        words = rng.integers(0, 60, len(features))
        occurrences.update(zip(features.tolist(), words.tolist()))
        pairs = collections.Counter(zip(features.tolist(), words.tolist()))
        keys = sorted(pairs)
        link_parts.append({"feature": np.array([f for f, _ in keys], np.uint64),
                           "word": np.array([w for _, w in keys], np.int32),
                           "count": np.array([pairs[k] for k in keys], np.int64)})
        distinct = sorted({f for f, _ in keys})
        feature_parts.append({
            "feature": np.array(distinct, np.uint64),
            "type": np.array([_identity(f)[0] for f in distinct], np.int32),
            "words": np.array([_identity(f)[1] for f in distinct], np.int32)})
    return occurrences, link_parts, feature_parts


def test_a_bucket_merged_in_chunks_sums_every_part():
    occurrences, link_parts, feature_parts = _partials(np.random.default_rng(5), 23)
    rows = [len(p["feature"]) for p in link_parts]
    reads = []

    def read(start, stop, group):
        reads.append((start, stop))
        parts = (link_parts if group == "links" else feature_parts)[start:stop]
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    max_rows = sum(rows) // 3
    links, features, collisions, _ = merge_bucket_chunks(rows, read, NUM_TYPES, max_rows)
    chunks = reads[::2]
    assert len(chunks) >= 4  # the test merges several chunks, every part once, in order
    assert [start for start, _ in chunks] == [0] + [stop for _, stop in chunks[:-1]]
    assert chunks[-1][1] == len(rows)
    assert max(sum(rows[start:stop]) for start, stop in chunks) <= max_rows
    expected = sorted(occurrences.items())
    assert list(zip(links["feature"].to_pylist(), links["word"].to_pylist())) == \
        [k for k, _ in expected]
    assert links["count"].to_pylist() == [c for _, c in expected]
    by_feature = collections.defaultdict(list)
    for (f, _), c in expected:
        by_feature[f].append(c)
    assert features["feature"].to_pylist() == sorted(by_feature)
    assert features["count"].to_pylist() == [sum(by_feature[f]) for f in sorted(by_feature)]
    assert features["diversity"].to_pylist() == [len(by_feature[f]) for f in sorted(by_feature)]
    assert features["type"].to_pylist() == [_identity(f)[0] for f in sorted(by_feature)]
    assert features["words"].to_pylist() == \
        [[w for w in _identity(f)[1] if w >= 0] for f in sorted(by_feature)]
    assert collisions == 0
    whole = merge_bucket(list(link_parts), list(feature_parts), NUM_TYPES)
    assert whole[0].equals(links) and whole[1].equals(features)


def test_chunks_are_consecutive_runs_within_the_limit():
    rows = [5, 1, 7, 3, 3, 9, 2, 40, 4, 1]
    bounds = chunk_bounds(rows, 20)
    assert bounds[0] == 0 and bounds[-1] == len(rows) and bounds == sorted(set(bounds))
    for start, stop in zip(bounds, bounds[1:]):
        assert sum(rows[start:stop]) <= 20 or stop - start == 1  # 40 is a run alone
    assert chunk_bounds(rows, 1000) == [0, len(rows)]
    assert chunk_bounds([], 10) == [0]


def test_continuation_counts_names_read_in_chunks():
    import pyarrow as pa

    from snm_core.count.continuation import add_continuation
    rng = np.random.default_rng(8)
    feature = np.sort(rng.integers(1, 2 ** 63, 300, dtype=np.uint64)).repeat(3)
    word = np.tile(np.array([0, 7, 40000], np.int32), 300)
    links = pa.table({"feature": feature, "word": word, "count": np.ones(900, np.int64)})
    own = list(zip(feature.tolist(), word.tolist()))
    # names of links, many of a few (the empty context's), and names of no link: an
    # unknown feature, or a known feature with another word
    picks = np.r_[rng.integers(0, 900, 5000), np.repeat(np.arange(4), 700)]
    names = [own[i] for i in picks] + \
        [(int(k), 7) for k in rng.integers(0, 2 ** 63, 50, dtype=np.uint64)] + \
        [(own[i][0], 3) for i in rng.integers(0, 900, 50)]
    rng.shuffle(names)
    named = collections.Counter(names)
    name_feature = np.array([f for f, _ in names], np.uint64)
    name_word = np.array([w for _, w in names], np.int32)
    chunks = [(name_feature[i:i + 613], name_word[i:i + 613].astype(np.uint16))
              for i in range(0, len(names), 613)]
    counted = add_continuation(links, chunks)
    assert counted["continuation"].to_pylist() == [named[k] for k in own]
    assert counted["continuation"].to_pylist() == \
        add_continuation(links, (name_feature, name_word))["continuation"].to_pylist()
    with pytest.raises(ValueError, match="not sorted"):
        add_continuation(links.take(np.r_[1, 0, 2:900]), (name_feature, name_word))


@pytest.mark.parametrize("word_type", [np.uint16, np.int32])
def test_continuation_names_are_grouped_by_their_feature_bucket_in_order(word_type):
    from snm_core.count.continuation import names_by_bucket
    rng = np.random.default_rng(9)
    num_buckets = 37
    # keys over the whole range, the ends of it included, and a bucket with no name
    key = np.r_[rng.integers(0, 2 ** 64, 4000, dtype=np.uint64),
                np.array([0, 2 ** 64 - 1, 2 ** 63], np.uint64)]
    key = key[((key >> np.uint64(16)) * np.uint64(num_buckets) >> np.uint64(48)) != 5]
    word = rng.integers(0, 65536 if word_type == np.uint16 else 2 ** 31, len(key)).astype(np.int32)
    names, bounds = names_by_bucket(key, word, num_buckets, word_type)
    assert names["word"].dtype == word_type and bounds[0] == 0 and bounds[-1] == len(key)
    for b in range(num_buckets):
        # the oracle: a bucket is the keys in [b, b + 1) * 2^64 / num_buckets, by division
        expected = [(int(k), int(w)) for k, w in zip(key, word)
                    if int(k) * num_buckets // 2 ** 64 == b]
        got = list(zip(names["feature"][bounds[b]:bounds[b + 1]].tolist(),
                       names["word"][bounds[b]:bounds[b + 1]].tolist()))
        assert got == expected, b
    assert bounds[6] == bounds[5]
    with pytest.raises(ValueError, match="wider"):
        names_by_bucket(key[:3], np.array([1, 70000, 2], np.int32), num_buckets, np.uint16)
