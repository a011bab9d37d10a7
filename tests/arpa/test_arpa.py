"""``snm export-arpa`` streams: the same file at any memory budget, compressed or not,
and a full disk leaves nothing behind (object storage: ``tests/io/test_storage.py``)."""

import gzip
import os
import subprocess
import sys

import pytest
from support import messages

from snm.cli import main
from snm_core.scoring.compact import load_model


@pytest.fixture(scope="module")
def tagged(tagged_ngram_model):
    """A tagged 5-gram: every n-gram's tag copies are summed into one ARPA line."""
    return tagged_ngram_model


@pytest.fixture(scope="module")
def exported(tagged, tmp_path_factory):
    """The export at the default budget, in one partition."""
    path = tmp_path_factory.mktemp("arpa") / "model.arpa"
    assert main(["export-arpa", "--model", str(tagged[0]), "--out", str(path)]) == 0
    return path.read_bytes()


def test_any_budget_gives_the_same_file_and_gz_compresses_it(tagged, exported, tmp_path,
                                                             capsys):
    """1 MiB of working memory a thread (the budget less the process's) cuts the joins into partitions and the model's buckets
    into chunks; the ARPA is the same, gzip-compressed, and KenLM reads it as snm scores."""
    capsys.readouterr()
    out = tmp_path / "model.arpa.gz"
    assert main(["export-arpa", "--model", str(tagged[0]), "--out", str(out),
                 "--memory", "202M", "--threads", "2", "--scratch", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "in 1 partition(s)" not in printed and "partition(s)" in printed
    assert gzip.decompress(out.read_bytes()) == exported
    assert os.listdir(tmp_path) == ["model.arpa.gz"]  # the scratch files are gone
    kenlm = pytest.importorskip("kenlm")
    lm = kenlm.Model(str(out))
    test = tagged[1]
    kenlm_ppl = 10 ** (-sum(lm.score(s, bos=True, eos=True) for s in test)
                       / sum(len(s.split()) + 1 for s in test))
    ours = load_model(str(tagged[0])).evaluate_lines(test)["adjusted"]["perplexity"]
    assert abs(kenlm_ppl - ours) / ours < 1e-4


def test_a_full_disk_is_one_line_and_leaves_no_file(tagged, exported, tmp_path):
    """The file size limit (ulimit -f) stands in for a full disk: the scratch files or the
    ARPA do not fit."""
    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(exported) // 2,) * 2)

    out = tmp_path / "out" / "model.arpa"
    proc = subprocess.run([sys.executable, "-m", "snm", "export-arpa", "--model",
                           str(tagged[0]), "--out", str(out), "--scratch", str(tmp_path)],
                          capture_output=True, text=True, check=False, preexec_fn=limit)
    assert proc.returncode == 1
    error = messages(proc.stderr)
    assert len(error) == 1, proc.stderr
    assert error[0].startswith("snm export-arpa: failed: writing ")
    assert error[0].endswith("the file size limit was reached (ulimit -f)")
    assert os.listdir(tmp_path) in ([], ["out"]) and not out.exists()
    assert not out.parent.exists() or os.listdir(out.parent) == []


def test_a_memory_budget_is_checked_before_anything_runs(tagged, tmp_path, capsys):
    assert main(["export-arpa", "--model", str(tagged[0]), "--out", str(tmp_path / "m.arpa"),
                 "--memory", "201M"]) == 2
    assert "give --memory 202M or more" in capsys.readouterr().err
    assert main(["export-arpa", "--model", str(tagged[0]), "--out", "x", "--memory",
                 "lots"]) == 2
    assert "--memory lots: expected a size" in capsys.readouterr().err
    assert not os.path.exists("x")


def test_lines_give_back_each_float32_and_the_sign_of_zero():
    """Every line reads back as its words and exactly its float32 numbers; a back-off of
    -0 stays -0."""
    import numpy as np

    from snm_core.arpa.export import format_lines, vocabulary_text
    rng = np.random.default_rng(3)
    backoff = rng.choice(np.array([0.0, -0.0, -0.25, -1.5, 3e-7], np.float32), 500)
    backoff[::7] = rng.uniform(-4, 0, len(backoff[::7]))
    log_prob = rng.uniform(-6, 0, 500).astype(np.float32)
    names = ["a", "bb", "a word of twenty bytes", "dé"]  # one longer than a cell
    words = rng.integers(0, len(names), (500, 2))
    text = format_lines(vocabulary_text(names), words, log_prob, backoff)
    lines = text.tobytes().decode().split("\n")
    assert lines[-1] == "" and len(lines) == 501
    for line, p, row, b in zip(lines, log_prob, words, backoff):
        prob_text, gram, backoff_text = line.split("\t")
        assert gram == " ".join(names[w] for w in row)
        assert np.float32(prob_text).view(np.uint32) == p.view(np.uint32)
        assert np.float32(backoff_text).view(np.uint32) == b.view(np.uint32)
