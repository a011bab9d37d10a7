"""The count's sums (``link_sums.c``) on inputs large enough for every path of their sort:
a batch's occurrences, a bucket's partial links and feature rows; keys spread over the
whole 64 bits and keys shared by thousands of rows (sorted by their words), words of 16
and 31 bits, counts past 32 bits.

Oracle: Python dictionaries over the rows, in row order.
"""

import collections
import dataclasses
import importlib.resources

import numpy as np
import pytest

from snm_core.count import counting
from snm_core.text import synthetic
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import tokenize
from snm_core.text.vocab import Vocabulary


def random_keys(rng, n, pool):
    """``n`` keys drawn from ``pool`` random 64-bit keys, a few of them very frequent."""
    keys = rng.integers(0, 2**64, pool, np.uint64, endpoint=False)
    weights = np.ones(pool)
    weights[:3] = pool  # three keys take about half the rows
    return keys[rng.choice(pool, n, p=weights / weights.sum())]


@pytest.mark.parametrize("word_type,largest_word", [(np.uint16, 0xFFFF), (np.int32, 2**31 - 1)])
@pytest.mark.parametrize("seed", [1, 2])
def test_links_are_summed_and_ordered_by_feature_then_word(word_type, largest_word, seed):
    rng = np.random.default_rng(seed)
    parts, expected = [], collections.Counter()
    for n in (40_000, 7, 0, 30_000):  # 70,010 rows: 8-bit digits first, then wider
        part = {"feature": random_keys(rng, n, 2_000),
                "word": rng.integers(0, largest_word, n, endpoint=True).astype(word_type),
                "count": rng.integers(1, 5, n).astype(np.int32)}
        parts.append(part)
        for f, w, c in zip(*(part[k].tolist() for k in ("feature", "word", "count"))):
            expected[f, w] += c
    big = {"feature": np.array([7, 7, 2**64 - 1], np.uint64), "word": np.array([3, 3, 0], np.int32),
           "count": np.array([2**33, 2**32 + 5, 1], np.int64)}  # sums so far, in int64
    parts.append(big)
    expected[7, 3] += 2**33 + 2**32 + 5
    expected[2**64 - 1, 0] += 1
    merged = counting.merge_links(parts)
    assert parts == []
    got = list(zip(*(merged[k].to_pylist() for k in ("feature", "word", "count"))))
    assert got == [(f, w, c) for (f, w), c in sorted(expected.items())]
    assert merged["word"].type == "int32" and merged["count"].type == "int64"


def test_distinct_features_keep_each_key_s_first_row_and_count_collisions():
    rng = np.random.default_rng(3)
    n = 60_000
    keys = random_keys(rng, n, 5_000)
    # A key's identity is fixed by the key, except for a few rows of another identity.
    kind = (keys % np.uint64(7)).astype(np.int32)
    width = (keys % np.uint64(10)).astype(np.uint8)
    other = rng.random(n) < 0.001
    kind[other] += 1
    rows = [[int(k >> np.uint64(s)) & 0xFFFF for s in range(w)] for k, w in zip(keys, width)]
    for i in np.flatnonzero(rng.random(n) < 0.001):
        if rows[i]:
            rows[i][0] ^= 1
    half = n // 2
    parts = [{"feature": keys[a:b], "type": kind[a:b], "width": width[a:b],
              "word": np.array([w for r in rows[a:b] for w in r], np.uint16)}
             for a, b in ((0, half), (half, n))]
    first, collisions, previous = {}, 0, {}
    for key, t, r in zip(keys.tolist(), kind.tolist(), rows):
        identity = (t, tuple(r))
        first.setdefault(key, identity)
        collisions += key in previous and previous[key] != identity
        previous[key] = identity
    merged, found = counting.distinct_features(parts)
    assert found == collisions > 0
    assert merged["feature"].tolist() == sorted(first)
    assert merged["type"].tolist() == [first[k][0] for k in sorted(first)]
    ends = np.cumsum(merged["width"].astype(np.int64))
    words = np.split(merged["word"], ends[:-1]) if len(ends) else []
    assert [tuple(w.tolist()) for w in words] == [first[k][1] for k in sorted(first)]


@pytest.mark.parametrize("config", ["5gram", "skip10gram"])
@pytest.mark.parametrize("collide", [False, True])
def test_a_batch_s_occurrences_are_summed_with_each_feature_s_first_occurrence(config, collide):
    """A batch of thousands of sentences, each feature type's occurrences summed into
    links, and each feature described by its first occurrence's type and words."""
    preset = importlib.resources.files("snm_core.text.presets") / f"{config}.cfg"
    extractor = FeatureExtractor(parse_config(preset.read_text()), [""])
    sentences = synthetic.generate(3_000, seed=11)
    counts = collections.Counter(w for s in sentences for w in s.split())
    vocab = Vocabulary.from_counts(list(counts), np.array(list(counts.values())))
    batch, _, _ = tokenize(sentences, vocab)
    for events in extractor.extract_by_type(batch, tags=[0]):
        if collide:  # which occurrence describes a key matters only when keys collide
            events = dataclasses.replace(events, key=events.key % np.uint64(97))
        words = events.target[events.event].tolist()
        expected, first = collections.Counter(), {}
        for i, (key, word) in enumerate(zip(events.key.tolist(), words)):
            expected[key, word] += 1
            first.setdefault(key, i)
        links, features = counting.batch_partials(events, work={})
        got = list(zip(*(links[k].tolist() for k in ("feature", "word", "count"))))
        assert got == [(f, w, c) for (f, w), c in sorted(expected.items())]
        firsts = np.array([first[k] for k in sorted(first)], np.int64)
        assert features["feature"].tolist() == sorted(first)
        assert features["type"].tolist() == events.type[firsts].tolist()
        assert features["words"].tolist() == events.context_words(firsts, narrow=True).tolist()
