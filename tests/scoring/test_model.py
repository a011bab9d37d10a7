"""The hashed model (``snm apply``'s directory): scoring, distributions, perplexity
against a brute force over its Parquet rows, ``snm eval``/``snm score``, and the ARPA
export scored by KenLM.  The models are the session's (tests/conftest.py)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from support.models import brute_force_perplexity

from snm.cli import main
from snm_core.scoring.compact import load_model
from snm_core.scoring.base import SCORE_BATCH_LINES
from snm_core.stages import manifests


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_distribution_agrees_with_scoring_the_sentence(which, request):
    """P(w | context) from ``distribution`` is what scoring ``context w`` gives its last
    word (the compiled scoring path)."""
    model_dir, test = request.getfixturevalue(which)
    model = load_model(str(model_dir))
    for line in test[:6]:
        words = line.split()
        for cut in range(len(words)):
            context, word = words[:cut], words[cut]
            (_, _, scores), = list(model.score_lines([" ".join(words[:cut + 1])]))
            for unadjusted, probs in ((False, scores.prob), (True, scores.prob_unadjusted)):
                got = model.distribution(context, [word], unadjusted=unadjusted)[0]
                assert got == pytest.approx(probs[cut], rel=1e-9), (context, word)


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_probabilities_sum_to_one(which, request):
    model_dir, test = request.getfixturevalue(which)
    model = load_model(str(model_dir))
    rng = np.random.default_rng(0)
    words = [w for w in model.vocab.words[3:]]
    contexts = [[], ["begin1"], test[0].split()[:3]] + [
        list(rng.choice(words, size=rng.integers(1, 9))) for _ in range(8)]
    for context in contexts:
        for unadjusted in (False, True):
            total = model.distribution(context, unadjusted=unadjusted).sum()
            assert total == pytest.approx(1.0, abs=1e-6), (context, unadjusted)


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_perplexity_equals_brute_force(which, request):
    model_dir, test = request.getfixturevalue(which)
    reports = load_model(str(model_dir)).evaluate_lines(test, threads=2)
    for name, adjusted in (("adjusted", True), ("unadjusted", False)):
        expected = brute_force_perplexity(model_dir, test, adjusted)
        # compact/ stores M_f*, M_fw and c(w|f) as float32 (relative error < 6e-8 each);
        # the brute force computes in float64 from the Parquet tables.
        assert reports[name]["perplexity"] == pytest.approx(expected, rel=1e-6)
    assert reports["adjusted"]["sentences"] == len(test)
    assert reports["adjusted"]["oov"] >= 4  # "never seen words here"


def test_model_matches_the_trainer_on_heldout(ngram_model):
    """M from apply equals M in the trainer: the model's dev perplexity is the fit's."""
    model_dir, _ = ngram_model
    fit = manifests.Fit.read(str(model_dir.parent / "adjust"))
    dev = (model_dir.parent / "dev.txt").read_text().splitlines()
    report = load_model(str(model_dir)).evaluate_lines(dev)
    assert report["adjusted"]["perplexity"] == pytest.approx(fit["heldout_perplexity"], rel=1e-5)
    assert report["unadjusted"]["perplexity"] == pytest.approx(
        fit["heldout_perplexity_unadjusted"], rel=1e-9)


@pytest.mark.parametrize("which", ["ngram_model", "tagged_skip_model"])
def test_eval_json_and_score(which, request, tmp_path, capsys):
    model_dir, test = request.getfixturevalue(which)
    test_path = model_dir.parent / "test.txt"
    capsys.readouterr()  # what building the fixture printed, if this test built it
    assert main(["eval", "--model", str(model_dir), str(test_path), "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert sorted(reports) == ["adjusted", "unadjusted"]  # eval.json's shape
    for key in ("perplexity", "perplexity_excluding_oov", "oov", "words", "sentences"):
        assert key in reports["adjusted"] and key in reports["unadjusted"]
    assert reports["adjusted"]["words"] == sum(len(t.split()) + 1 for t in test)
    assert main(["score", "--model", str(model_dir), str(test_path), "--out",
                 str(tmp_path / "s.tsv")]) == 0
    rows = [r.split("\t") for r in (tmp_path / "s.tsv").read_text().splitlines()]
    assert len(rows) == len(test) and rows[0][3] == test[0]
    total = sum(float(r[0]) for r in rows)
    assert total == pytest.approx(reports["adjusted"]["log10_prob"], abs=1e-6 * len(rows))


def test_score_writes_one_row_per_line_across_batches(ngram_model, tmp_path):
    """More lines than a scoring batch, an empty line among them: one row per line, in order."""
    model_dir, test = ngram_model
    lines = (test * (2 * SCORE_BATCH_LINES // len(test) + 1))[:2 * SCORE_BATCH_LINES + 5]
    lines[SCORE_BATCH_LINES + 1] = ""
    text = tmp_path / "t.txt"
    text.write_text("\n".join(lines) + "\n")
    assert main(["score", "--model", str(model_dir), str(text), "--out",
                 str(tmp_path / "s.tsv")]) == 0
    rows = [r.split("\t") for r in (tmp_path / "s.tsv").read_text().splitlines()]
    assert [r[3] for r in rows] == lines
    assert rows[SCORE_BATCH_LINES + 1][:3] == ["0", "0", "0"]
    again = next(i for i in range(SCORE_BATCH_LINES, len(lines)) if lines[i] == lines[0])
    assert rows[again] == rows[0]  # the same sentence scores the same in a later batch


@pytest.mark.parametrize("which", ["ngram_model", "tagged_ngram_model"])
def test_kenlm_scores_the_exported_arpa_like_snm_eval(which, request, tmp_path):
    """KenLM's perplexity of the export is snm's; a tagged model's n-grams are exported
    summed over its tags."""
    kenlm = pytest.importorskip("kenlm")
    model_dir, test = request.getfixturevalue(which)
    arpa = tmp_path / "model.arpa"
    assert main(["export-arpa", "--model", str(model_dir), "--out", str(arpa)]) == 0
    lm = kenlm.Model(str(arpa))
    total = sum(lm.score(line, bos=True, eos=True) for line in test)
    words = sum(len(line.split()) + 1 for line in test)
    kenlm_ppl = 10 ** (-total / words)
    ours = load_model(str(model_dir)).evaluate_lines(test)["adjusted"]["perplexity"]
    assert abs(kenlm_ppl - ours) / ours < 1e-4


def test_export_of_a_skip_gram_model_is_a_clear_error(tagged_skip_model, tmp_path):
    model_dir, _ = tagged_skip_model
    proc = subprocess.run([sys.executable, "-m", "snm", "export-arpa", "--model", str(model_dir),
                           "--out", str(tmp_path / "x.arpa")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "ARPA holds only n-gram models" in proc.stderr
