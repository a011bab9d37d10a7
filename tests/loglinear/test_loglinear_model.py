"""``snm train --family loglinear`` end to end: the model built from the count stage, its
directory, ``snm eval``/``snm score``, and the exact ARPA export.

Oracles: n-grams counted by a Python dict over the text; KenLM (the ``kenlm``
module) scoring the exported ARPA file; a sum over the whole vocabulary.
"""

import collections
import json
import math

import numpy as np
import pytest

from snm import cli
from snm.commands.train import main as train_main
from snm_core.io.errors import SnmInputError
from snm_core.loglinear import directory as loglinear_directory
from snm_core.text.vocab import BOS_ID, EOS_ID

ORDER = 4


@pytest.fixture(scope="module")
def run(loglinear_run):
    """The log-linear run of tests/conftest.py."""
    return loglinear_run


def _config(root):
    path = root / "config.txt"
    path.write_text(f"ngram_extractor {{\n  min_n: 0\n  max_n: {ORDER - 1}\n}}\n")
    return str(path)


def test_model_holds_the_ngrams_of_the_text_with_their_own_counts(run):
    """Pairs = every (context, word) seen, own counts = positions with that whole history."""
    _, vocab, model = loglinear_directory.load_arrays(str(run["model"]))
    ids = {w: i for i, w in enumerate(vocab.words)}
    own = collections.Counter()
    for line in open(run["train"]):
        words = [BOS_ID] + [ids.get(w, 2) for w in line.split()] + [EOS_ID]
        for i in range(1, len(words)):
            own[(tuple(words[max(0, i - ORDER + 1):i]), words[i])] += 1
    pairs = set()
    for (history, word) in own:
        for k in range(len(history) + 1):
            pairs.add((history[len(history) - k:], word))
    # each pair's context from the trie (oldest word first)
    context = [()]
    for j in range(1, model.tree.size):
        context.append((int(model.tree.word[j]),) + context[model.tree.parent[j]])
    got = {(context[int(j)], int(w)) for j, w in zip(model.pair_node, model.word)}
    assert got == pairs
    m, own_counts, _ = loglinear_directory.from_counts(str(run["out"] / "count"))
    got_own = {(context[int(j)], int(w)): c for j, w, c in zip(m.pair_node, m.word, own_counts)
               if c}
    assert got_own == dict(own)


def test_distribution_sums_to_one(run):
    scorer = loglinear_directory.LogLinearScorer.load(str(run["model"]))
    rng = np.random.default_rng(0)
    lines = open(run["test"]).read().split("\n")
    for line in rng.choice([x for x in lines if x], 5):
        words = line.split()
        for cut in (0, 1, len(words)):
            prob = scorer.distribution(words[:cut])
            assert prob[BOS_ID] == 0 and np.isclose(prob.sum(), 1.0, rtol=1e-10)


def test_arpa_export_is_exact_under_kenlm(run, tmp_path, capsys):
    kenlm = pytest.importorskip("kenlm")
    arpa = tmp_path / "model.arpa"
    assert cli.main(["export-arpa", "--model", str(run["model"]), "--out", str(arpa)]) == 0
    assert cli.main(["score", "--model", str(run["model"]), run["test"]]) == 0
    ours = [float(line.split("\t")[0]) for line in capsys.readouterr().out.splitlines()
            if "\t" in line]
    lm = kenlm.Model(str(arpa))
    theirs = [lm.score(line.strip(), bos=True, eos=True) for line in open(run["test"])]
    assert len(ours) == len(theirs)
    np.testing.assert_allclose(ours, theirs, atol=2e-4)
    header = arpa.read_text().split("\n\n")[0]
    assert f"ngram {ORDER}=" in header and f"ngram {ORDER + 1}=" not in header


def test_eval_reports_one_model_and_refuses_unadjusted(run, capsys):
    assert cli.main(["eval", "--model", str(run["model"]), run["test"], "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    saved = json.loads((run["out"] / "eval.json").read_text())
    assert list(report) == ["loglinear"] and math.isclose(report["loglinear"]["perplexity"],
                                                          saved["loglinear"]["perplexity"])
    manifest = json.loads((run["model"] / "manifest.json").read_text())
    start, *fits = manifest["trials"]  # the default: the Kneser-Ney start, then the path
    assert start["start"] == "kneser-ney" and start["lam"] is None
    assert [t["lam"] for t in fits] == pytest.approx([1e-4, 1e-5])
    assert manifest["heldout_perplexity"] == min(t["heldout_perplexity"] for t in fits)
    assert cli.main(["eval", "--model", str(run["model"]), run["test"], "--unadjusted"]) == 2
    assert "no unadjusted form" in capsys.readouterr().err


def test_loglinear_refuses_skip_grams_and_tags(run, tmp_path):
    args = ["--family", "loglinear", "--train", run["train"], "--heldout", run["dev"],
            "--test", run["test"], "--out", str(tmp_path / "x")]
    with pytest.raises(SnmInputError, match="skip-grams are SNM only"):
        train_main(["--config", "skip5gram", *args])
    with pytest.raises(SnmInputError, match="--alpha weights the depths"):
        train_main(["--config", _config(tmp_path), "--penalty", "t2", "--alpha", "0.5", *args])
    with pytest.raises(SnmInputError, match="lbfgs takes the penalties that are smooth"):
        train_main(["--config", _config(tmp_path), "--penalty", "wt2", "--optimizer", "lbfgs",
                    *args])


def test_score_into_a_closed_pipe_stops_quietly(run, tmp_path):
    """`snm score ... | head -1`: no traceback, the shell's status for SIGPIPE."""
    import subprocess
    import sys
    big = tmp_path / "big.txt"
    big.write_text(open(run["test"]).read() * 60)  # more than a pipe's buffer of scores
    proc = subprocess.Popen([sys.executable, "-m", "snm", "score", "--model", str(run["model"]),
                             str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline()
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_a_damaged_model_array_is_one_line_naming_it(run, tmp_path, capsys):
    import shutil
    copy = tmp_path / "model"
    shutil.copytree(run["model"], copy)
    weights = copy / "pair_weight.npy"
    weights.write_bytes(weights.read_bytes()[:-8])  # one weight short
    assert cli.main(["eval", "--model", str(copy), run["test"]]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pair_weight.npy" in err


def test_train_with_apg_reports_its_certificate(tmp_path, capsys):
    from snm_core.text import synthetic

    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), num_train=300,
                                              num_dev=50, num_test=50, seed=7)
    out = tmp_path / "run"
    assert train_main(["--family", "loglinear", "--penalty", "tinf", "--config", "3gram",
                       "--train", train, "--heldout", dev, "--test", test, "--out", str(out),
                       "--lam", "1e-4", "--optimizer", "apg", "--tol", "1e-3",
                       "--epochs", "40", "--num_buckets", "2", "-v"]) == 0
    assert "certificate" in capsys.readouterr().out
    with open(out / "loglinear" / "manifest.json") as f:
        trial, = json.load(f)["trials"]
    assert trial["converged"] and trial["certificate"] < 1e-3
