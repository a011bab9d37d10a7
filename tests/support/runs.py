"""``snm train`` runs in tests: the arguments of a small run, and the comparison of two
runs' outputs byte for byte."""

import filecmp
import json
import os

import pytest

#: The launch scripts' real end-to-end runs, which take ~10 s each: with SNM_TEST_SCRIPTS=1.
SLOW_SCRIPTS = pytest.mark.skipif(not os.environ.get("SNM_TEST_SCRIPTS"),
                                  reason="real script runs take ~10 s each: SNM_TEST_SCRIPTS=1")


def train_argv(corpus, out):
    """``snm train`` arguments of a small, quick 5-gram run of ``corpus`` (``{"train",
    "dev", "test"}`` paths) into ``out``."""
    return ["--config", "5gram", "--train", corpus["train"], "--heldout", corpus["dev"],
            "--test", corpus["test"], "--out", str(out), "--min_count", "2",
            "--num_buckets", "4", "--metafeatures", "unlexicalized", "--epochs", "2"]


def assert_same_run(a, b, stages=("vocab", "count", "join", "fit", "model")):
    """Every output of two ``snm train`` runs is byte-identical, paths and timings aside."""
    for stage in stages:
        names = sorted(os.path.relpath(os.path.join(d, n), a / stage)
                       for d, _, files in os.walk(a / stage) for n in files)
        other = sorted(os.path.relpath(os.path.join(d, n), b / stage)
                       for d, _, files in os.walk(b / stage) for n in files)
        assert names == other, (stage, set(names) ^ set(other))
        data = [n for n in names if not n.endswith(("manifest.json", ".jsonl", "model_card.md"))]
        _, mismatch, errors = filecmp.cmpfiles(a / stage, b / stage, data, shallow=False)
        assert not mismatch and not errors, f"{stage}: {mismatch} {errors}"
        for name in names:
            if name.endswith(("manifest.json", ".jsonl")):  # JSON with paths and timings
                assert normalized(a / stage / name, a) == normalized(b / stage / name, b), name
    assert filecmp.cmp(a / "eval.json", b / "eval.json", shallow=False)


def normalized(path, run_dir):
    """The JSON objects of a manifest or a .jsonl log, without run paths and timings."""
    with open(path, encoding="utf-8") as f:
        text = f.read().replace(str(run_dir), "RUN")
    objects = [json.loads(line) for line in text.splitlines()] if path.suffix == ".jsonl" \
        else [json.loads(text)]
    for obj in objects:
        obj.pop("seconds", None)
        for name in list((obj.get("checksums") or {}).get("files", {})):
            if name.endswith(".jsonl"):  # a log's checksum covers its timings
                del obj["checksums"]["files"][name]
    return objects
