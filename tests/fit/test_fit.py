import json

import numpy as np
import pytest

from snm.cli import main
from snm_core.fit.metafeatures import MetaFeatureSpec
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
    best = min(manifest["choice"]["candidates"].items(),
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
