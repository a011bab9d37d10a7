"""The back-off form's C loops against numpy's definitions: the scan's keys against the
feature extractor's, joins against a dict, the cut by group against a stable sort."""

import importlib.resources

import numpy as np
import pytest

from snm_core.arpa.arpa_loops import find, group_rows, link_keys, ngram_keys, padded_words
from snm_core.arpa.backoff import plain_extractor
from snm_core.arpa.partitions import by_group
from snm_core.text.hashing import SEQUENCE_SEED, link_key


def _keys_for(plain, words, lengths):
    """Each row's key by the extractor (numpy): ``keys_for(n, its n words)``."""
    keys = np.zeros(len(lengths), np.uint64)
    for n in np.unique(lengths):
        rows = np.flatnonzero(lengths == n)
        keys[rows] = plain.keys_for(int(n), words[rows][:, :n])
    return keys


def test_scan_keys_are_the_extractors_keys_of_each_context_its_suffix_and_prefix():
    """A context's key, its suffix's (without the oldest word) and its own entry, the
    link key of its prefix and last word: what counting names them by."""
    plain = plain_extractor(importlib.resources.files("snm_core.text.presets")
                            .joinpath("5gram.cfg").read_text("utf-8"))
    rng = np.random.default_rng(4)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 5, 3000))])
    values = rng.integers(0, 40_000, offsets[-1]).astype(np.int32)
    words, lengths = padded_words(offsets, values, 4)
    assert lengths.tolist() == np.diff(offsets).tolist()
    assert all(words[i, :n].tolist() == values[offsets[i]:offsets[i + 1]].tolist()
               and (words[i, n:] == -1).all() for i, n in enumerate(lengths))
    keys, suffix, own = ngram_keys(words, lengths, plain.type_salts, SEQUENCE_SEED)
    assert np.array_equal(keys, _keys_for(plain, words, lengths))
    shifted = np.concatenate([words[:, 1:], np.full((len(words), 1), -1)], axis=1)
    expected_suffix = _keys_for(plain, shifted, np.maximum(lengths - 1, 0))
    expected_suffix[lengths == 0] = keys[lengths == 0]
    assert np.array_equal(suffix, expected_suffix)
    prefix = _keys_for(plain, words, np.maximum(lengths - 1, 0))
    last = words[np.arange(len(words)), np.maximum(lengths - 1, 0)]
    expected_own = np.where(lengths > 0, link_key(prefix, last), np.uint64(0))
    assert np.array_equal(own, expected_own)
    of = rng.integers(0, len(lengths), 5000)
    word = rng.integers(0, 40_000, 5000).astype(np.int32)
    entry, entry_suffix = link_keys(keys, suffix, lengths, of, word)
    assert np.array_equal(entry, link_key(keys[of], word))
    assert np.array_equal(entry_suffix, np.where(lengths[of] > 0, link_key(suffix[of], word),
                                                 entry))


def test_rows_are_grouped_by_key_in_the_order_of_their_first_rows():
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 50, 2000).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    group, first = group_rows(keys)
    _, expected_first = np.unique(keys, return_index=True)
    assert first.tolist() == sorted(expected_first.tolist())
    assert np.array_equal(keys[first[group]], keys)


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
