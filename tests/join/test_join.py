"""snm join: small M and the held-out events of the count and join in fit/conftest.py."""

import pytest
from support.counts import read_counts

from snm.commands import join as join_cmd
from snm_core.io import tables
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import tokenize
from snm_core.text.vocab import Vocabulary


def test_small_m_equals_a_brute_force_join(joined):
    root, heldout = joined
    links, features, manifest = read_counts(root / "counts")
    vocab = Vocabulary.load(root / "counts" / "vocab.txt")
    extractor = FeatureExtractor(parse_config(manifest["config"]), manifest["tags"])
    events = extractor.extract(tokenize(heldout, vocab)[0])
    wanted = set(events.key.tolist())
    feature_rows = {r["feature"]: r for r in features.to_pylist()}
    expected = sorted(
        (r["feature"], r["word"], r["count"], r["continuation"],
         feature_rows[r["feature"]]["count"],
         feature_rows[r["feature"]]["diversity"], feature_rows[r["feature"]]["tag"],
         feature_rows[r["feature"]]["type"])
        for r in links.to_pylist() if r["feature"] in wanted)
    join_manifest = manifests.Join.read(str(root / "heldout"))
    small = tables.read_tables(str(root / "heldout"), join_manifest, "small_m", tables.SMALL_M)
    got = [tuple(r.values()) for r in small.to_pylist()]
    assert got == expected  # also checks the (feature, word) order across bucket files
    assert join_manifest["totals"]["small_m_links"] == len(expected)


def test_events_carry_every_tagged_feature(joined):
    root, heldout = joined
    join_manifest = manifests.Join.read(str(root / "heldout"))
    events = tables.read_tables(str(root / "heldout"), join_manifest, "events", tables.EVENTS)
    vocab = Vocabulary.load(root / "counts" / "vocab.txt")
    extractor = FeatureExtractor(parse_config(join_manifest["config"]), join_manifest["tags"])
    direct = extractor.extract(tokenize(heldout, vocab)[0])
    assert events.num_rows == direct.num_events == sum(len(h.split()) + 1 for h in heldout if h)
    assert events["target"].to_pylist() == direct.target.tolist()
    for e, keys in enumerate(events["features"].to_pylist()[:50]):
        assert sorted(keys) == sorted(direct.key[direct.event == e].tolist())
    # Every feature once per training tag: the empty feature appears twice.
    assert len(events["features"][0].as_py()) == 2 * 2  # [] and [<S>], for tags a and b
    assert events["line"].to_pylist()[-1] == len(heldout)  # the last line, 1-based


def test_missing_inputs_are_clear_errors(joined, tmp_path):
    root, _ = joined
    with pytest.raises(SnmInputError, match="matches no file"):
        join_cmd.main(["--count", str(root / "counts"), "--heldout", str(tmp_path / "x*"),
                        "--out", str(tmp_path / "o")])
    with pytest.raises(SnmInputError, match="not the output of a finished 'snm count'"):
        join_cmd.main(["--count", str(tmp_path), "--heldout", str(root / "dev.txt"),
                        "--out", str(tmp_path / "o")])
