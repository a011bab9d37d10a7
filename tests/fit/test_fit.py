import json

import numpy as np
import pytest

from snm.cli import main
from snm_core.fit.metafeatures import MetaFeatureSpec
from snm_core.fit.selection import PROBE_MARGIN
from snm_core.stages import manifests


def test_fit_auto_selects_and_writes_theta(joined, tmp_path, capsys):
    root, _ = joined
    out = tmp_path / "adjust"
    assert main(["fit", "--join", str(root / "heldout"), "--out", str(out),
                 "--max_epochs", "3", "--hash_size", "65536", "--batch_size", "256"]) == 0
    manifest = manifests.Fit.read(str(out))
    assert set(manifest["choice"]["candidates"]) == {"lexicalized", "unlexicalized",
                                                     "feature-only"}
    chosen = manifest["metafeatures"]["variant"]
    best = min(((v, c) for v, c in manifest["choice"]["candidates"].items()
                if c["validation_perplexity"] is not None),
               key=lambda kv: kv[1]["validation_perplexity"])
    assert chosen == best[0] and manifest["training"]["epochs"] == best[1]["epochs"]
    theta = np.load(out / "theta.npy")
    spec = MetaFeatureSpec(**manifest["metafeatures"])
    assert theta.shape == (65536,) == (spec.hash_size,) and theta.dtype == np.float32
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    final = [e for e in log if e["run"] == "final"]
    assert [e["epoch"] for e in final] == list(range(manifest["training"]["epochs"] + 1))
    assert manifest["heldout_perplexity"] == pytest.approx(final[-1]["train_perplexity"])
    if manifest["training"]["epochs"]:
        assert manifest["heldout_perplexity"] < manifest["heldout_perplexity_unadjusted"]
    assert "held-out perplexity" in capsys.readouterr().out


def test_the_race_probe_stops_variants_far_behind_and_keeps_the_winner(joined, tmp_path):
    """The probe trains every variant on a share of an epoch and stops those more than
    PROBE_MARGIN behind; the survivors race from scratch, so the winner's theta is the
    one a race without the probe gives."""
    root, _ = joined
    args = ["fit", "--join", str(root / "heldout"), "--max_epochs", "3", "--hash_size",
            "65536", "--batch_size", "64"]
    assert main([*args, "--out", str(tmp_path / "probed")]) == 0
    assert main([*args, "--out", str(tmp_path / "plain"), "--race_probe", "0"]) == 0
    probed, plain = (manifests.Fit.read(str(tmp_path / name)) for name in ("probed", "plain"))
    candidates = probed["choice"]["candidates"]
    best_probe = min(c["probe_validation_perplexity"] for c in candidates.values())
    stopped = {v for v, c in candidates.items() if c["epochs_trained"] == 0}
    assert stopped, "the fixture should have a variant far behind after the probe"
    for variant, c in candidates.items():
        far_behind = c["probe_validation_perplexity"] > (1 + PROBE_MARGIN) * best_probe
        assert (variant in stopped) == far_behind
        if far_behind:
            assert "after the probe" in c["stopped"] and c["validation_perplexity"] is None
    assert all(c["probe_validation_perplexity"] is None
               for c in plain["choice"]["candidates"].values())
    assert probed["metafeatures"] == plain["metafeatures"]
    assert probed["training"] == plain["training"]
    assert (tmp_path / "probed" / "theta.npy").read_bytes() == \
        (tmp_path / "plain" / "theta.npy").read_bytes()
    log = [json.loads(line) for line in (tmp_path / "probed" / "train_log.jsonl").open()]
    assert sorted(e["metafeatures"] for e in log if e["run"] == "probe") == sorted(candidates)


def test_the_race_compiles_a_variant_again_only_when_the_training_moves_to_it(
        joined, tmp_path, monkeypatch):
    """One compiled problem is held at a time: each round of the race starts with the
    variant the round before ended with, so a problem is compiled again only when the
    training moves to another variant."""
    from snm_core.fit import heldout, selection

    loads = []

    def counted_load(directory, spec, threads=None):
        loads.append(spec.variant)
        return heldout.load_join(directory, spec, threads)

    monkeypatch.setattr(selection, "load_join", counted_load)
    root, _ = joined
    out = tmp_path / "raced"
    assert main(["fit", "--join", str(root / "heldout"), "--out", str(out), "--max_epochs",
                 "3", "--hash_size", "65536", "--batch_size", "64", "--race_margin", "1",
                 "--variants", "lexicalized,unlexicalized"]) == 0
    log = [json.loads(line) for line in (out / "train_log.jsonl").open()]
    trained = [e["metafeatures"] for e in log if e["run"] == "probe" or e.get("epoch")]
    rounds = [[e["metafeatures"] for e in log if e["run"] == "select" and e["epoch"] == k]
              for k in range(1, 4)]
    assert len(rounds[1]) == 2, "both variants should race two epochs (race_margin 1)"
    for before, after in zip(rounds, rounds[1:]):
        if before[-1] in after:
            assert after[0] == before[-1]
    assert loads == [v for i, v in enumerate(trained) if i == 0 or v != trained[i - 1]]


def test_fit_fixed_variant_and_epochs_is_deterministic(joined, tmp_path):
    root, _ = joined
    thetas = []
    # "c": one thread instead of one per core: the same theta.
    for name, threads in (("a", []), ("b", []), ("c", ["--threads", "1"])):
        assert main(["fit", "--join", str(root / "heldout"), "--out", str(tmp_path / name),
                     "--metafeatures", "lexicalized", "--epochs", "2", "--hash_size", "4096",
                     *threads]) == 0
        thetas.append((tmp_path / name / "theta.npy").read_bytes())
    assert thetas[0] == thetas[1] == thetas[2]
    assert manifests.Fit.read(str(tmp_path / "a"))["choice"] is None


def test_fit_on_a_missing_directory_exits_2(tmp_path, capsys):
    assert main(["fit", "--join", str(tmp_path), "--out", str(tmp_path / "o"),
                 "--epochs", "1", "--metafeatures", "unlexicalized"]) == 2
    assert "not the output of a finished 'snm join'" in capsys.readouterr().err


def test_fit_refuses_a_probe_of_a_whole_epoch(joined, tmp_path, capsys):
    root, _ = joined
    assert main(["fit", "--join", str(root / "heldout"), "--out", str(tmp_path / "o"),
                 "--race_probe", "1"]) == 2
    assert "race_probe must be at least 0 (no probe) and below 1" in capsys.readouterr().err
