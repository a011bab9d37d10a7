"""What a KenLM or SRILM user types works: ``snm query MODEL`` with KenLM's output and
``-v`` levels, and ``snm rescore --unk_penalty``, on a 5-gram model of kernel-100k.

Oracles: the ``kenlm`` module's ``full_scores`` on the ARPA exported from the same
model (KenLM's own arithmetic; the ARPA holds our probabilities to about 1e-6), the
format of KenLM's ``query`` (``word=ID NGRAM_LENGTH LOG10<TAB>...Total: T OOV: N``,
the sentence's end spelled ``</s>``), and, where it is built, KenLM's ``query`` itself.
"""

import io
import math
import os
import re
import subprocess
import sys

import pytest

from snm.cli import main
from snm.commands import export_arpa
from snm.commands import train as train_command

kenlm = pytest.importorskip("kenlm")

#: KenLM's query, where this machine has it built (the format's second oracle).
KENLM_QUERY = "/tmp/kenlm-build/bin/query"
#: Our id of a word outside the vocabulary, the one KenLM prints as id 0.
UNK_ID = 2
WORD = re.compile(r"^(\S+)=(\d+) (\d+) (-?\d+(?:\.\d+)?(?:e-?\d+)?)$")
TOTAL = re.compile(r"^Total: (-?\d+(?:\.\d+)?(?:e-?\d+)?) OOV: (\d+)$")


@pytest.fixture(scope="module")
def kernel(corpora, tmp_path_factory):
    """The model, its ARPA, and a few test lines (one with KenLM's ``<unk>`` typed)."""
    root = tmp_path_factory.mktemp("kernel")
    corpus = os.path.join(corpora, "kernel-100k")
    assert train_command.main(["--config", "5gram", "--train", f"{corpus}/train.txt",
                               "--heldout", f"{corpus}/dev.txt",
                               "--test", f"{corpus}/test.txt", "--out", str(root / "run")]) == 0
    model = str(root / "run" / "model")
    arpa = str(root / "model.arpa")
    export_arpa.main(["--model", model, "--out", arpa])
    with open(f"{corpus}/test.txt", encoding="utf-8") as text:
        lines = [line.rstrip("\n") for line, _ in zip(text, range(12))]
    lines.append("the <unk> driver")
    path = root / "lines.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"model": model, "arpa": arpa, "lines": lines, "path": str(path),
            "kenlm": kenlm.Model(arpa)}


def printed_close(printed, value):
    """``printed`` (six significant digits) is ``value`` rounded, give or take the ARPA's
    float32 and the last digit's rounding."""
    number = float(printed)
    digits = len(re.sub(r"e.*|[-.]", "", printed).lstrip("0")) or 1
    unit = 10.0 ** (math.floor(math.log10(abs(number))) - digits + 1) if number else 1e-6
    return abs(number - value) <= unit / 2 + 2e-6


def query(argv, capsys, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    assert main(["query"] + argv) == 0
    return capsys.readouterr().out


def test_query_answers_as_kenlm_on_the_exported_arpa(kernel, capsys):
    """Per line: each word as typed, ``</s>`` last, KenLM's n-gram lengths and log10
    probabilities to the printed digits, its OOVs, its Total."""
    out = query([kernel["model"], kernel["path"]], capsys).splitlines()
    for line, answer in zip(kernel["lines"], out):
        fields = answer.split("\t")
        expected = list(kernel["kenlm"].full_scores(line))
        words = [WORD.match(f) for f in fields[:-1]]
        assert all(words), answer
        assert [w.group(1) for w in words] == line.split() + ["</s>"]
        for word, (log10, length, oov) in zip(words, expected):
            assert int(word.group(3)) == length, (line, word.group(0))
            assert printed_close(word.group(4), log10), (line, word.group(0), log10)
            assert (int(word.group(2)) == UNK_ID) == oov, word.group(0)
        total = TOTAL.match(fields[-1])
        assert total, fields[-1]
        assert printed_close(total.group(1), sum(p for p, _, _ in expected))
        assert int(total.group(2)) == sum(o for _, _, o in expected)
    report = "\n".join(out[len(kernel["lines"]):])
    scores = [s for line in kernel["lines"] for s in kernel["kenlm"].full_scores(line)]
    perplexity = 10 ** (-sum(p for p, _, _ in scores) / len(scores))
    shown = float(re.search(r"Perplexity including OOVs:\t(\S+)", report).group(1))
    assert shown == pytest.approx(perplexity, rel=1e-5)


def kenlm_query(argv, path):
    """The lines KenLM's ``query`` prints for the text at ``path``."""
    with open(path, encoding="utf-8") as text:
        return subprocess.run([KENLM_QUERY] + argv, stdin=text, capture_output=True, text=True,
                              check=True).stdout.splitlines()


@pytest.mark.skipif(not os.access(KENLM_QUERY, os.X_OK), reason=f"{KENLM_QUERY} not built")
def test_query_lines_line_up_with_kenlm_s_query(kernel, capsys):
    """KenLM's own ``query`` on the ARPA: the same tokens, n-gram lengths, OOVs (its id
    0 where ours is <UNK>'s) and numbers, field for field; ``-v sentence`` the same
    Total lines."""
    theirs = kenlm_query([kernel["arpa"]], kernel["path"])
    ours = query([kernel["model"], kernel["path"]], capsys).splitlines()
    for mine, kenlm_line in zip(ours, theirs[:len(kernel["lines"])]):
        mine, kenlm_fields = mine.split("\t"), kenlm_line.rstrip("\t").split("\t")
        assert len(mine) == len(kenlm_fields)
        for a, b in zip(mine[:-1], kenlm_fields[:-1]):
            a, b = WORD.match(a), WORD.match(b)
            assert a.group(1) == b.group(1) and a.group(3) == b.group(3)
            assert (a.group(2) == str(UNK_ID)) == (b.group(2) == "0")
            assert printed_close(a.group(4), float(b.group(4)))
        a, b = TOTAL.match(mine[-1]), TOTAL.match(kenlm_fields[-1])
        assert a.group(2) == b.group(2) and printed_close(a.group(1), float(b.group(1)))
    sentences = kenlm_query(["-v", "sentence", kernel["arpa"]], kernel["path"])
    mine = query(["-v", "sentence", kernel["model"], kernel["path"]], capsys).splitlines()
    assert len(mine) == len(sentences) == len(kernel["lines"])
    for a, b in zip(mine, sentences):
        a, b = TOTAL.match(a), TOTAL.match(b)
        assert a.group(2) == b.group(2) and printed_close(a.group(1), float(b.group(1)))


def test_query_verbosity_levels(kernel, capsys):
    """``-v summary``: the report only; ``-v sentence``: a Total line a line only;
    both: the Total lines, then the report; none: words, Totals and report."""
    argv = [kernel["model"], kernel["path"]]
    everything = query(argv, capsys).splitlines()
    n = len(kernel["lines"])
    totals = [line[line.index("Total: "):] for line in everything[:n]]
    report = everything[n:]
    assert all(TOTAL.match(t) for t in totals) and "Perplexity including OOVs" in report[1]
    assert query(["-v", "summary"] + argv, capsys).splitlines() == report
    assert query(["-v", "sentence"] + argv, capsys).splitlines() == totals
    assert query(["-v", "sentence", "-v", "summary"] + argv, capsys).splitlines() == \
        totals + report
    assert query(["-v", "word"] + argv, capsys).splitlines() == everything


def test_query_takes_the_model_as_kenlm_s_query_does(kernel, capsys, monkeypatch):
    """``snm query MODEL < text``, ``snm query MODEL FILE`` and ``--model MODEL FILE``
    give the same answers."""
    with open(kernel["path"], encoding="utf-8") as file:
        text = file.read()
    piped = query([kernel["model"]], capsys, stdin=text, monkeypatch=monkeypatch)
    assert piped.count("Total: ") == len(kernel["lines"])
    assert query([kernel["model"], kernel["path"]], capsys) == piped
    assert query(["--model", kernel["model"], kernel["path"]], capsys) == piped
    assert query(["--model", kernel["model"]], capsys, stdin=text,
                 monkeypatch=monkeypatch) == piped


def test_query_without_a_model_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["query"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "snm query: error: give the model: snm query MODEL [FILE] (or --model MODEL)\n")


def test_unk_penalty_lets_the_in_vocabulary_hypothesis_win(kernel, tmp_path):
    """Kernel text is full of identifiers, so <UNK> is likely and two OOVs outscore two
    real words; an OOV penalty of -10 (log10) per OOV reverses that.  The LM column is
    KenLM's log10 sum with each OOV's probability replaced by the penalty, in ln."""
    right, wrong = "the kernel is ready", "the kermal is leady"
    model = kernel["kenlm"]
    oovs = [oov for _, _, oov in model.full_scores(wrong)]
    assert sum(oovs) == 2 and not any(o for _, _, o in model.full_scores(right))
    assert model.score(wrong) > model.score(right)  # the newcomer's surprise, by KenLM too
    nbest = tmp_path / "nbest.tsv"
    nbest.write_text(f"utt1\t0\t{wrong}\nutt1\t0\t{right}\n")
    best = tmp_path / "best.txt"
    ranked = tmp_path / "ranked.tsv"
    assert main(["rescore", "--model", kernel["model"], str(nbest), "--best", str(best)]) == 0
    assert best.read_text() == f"utt1\t{wrong}\n"
    assert main(["rescore", "--model", kernel["model"], str(nbest), "--unk_penalty", "-10",
                 "--best", str(best), "--out", str(ranked)]) == 0
    assert best.read_text() == f"utt1\t{right}\n"
    lm = {row.split("\t")[6]: float(row.split("\t")[4])
          for row in ranked.read_text().splitlines()}
    for hypothesis in (right, wrong):
        log10 = sum(-10.0 if oov else p for p, _, oov in model.full_scores(hypothesis))
        assert lm[hypothesis] == pytest.approx(log10 * math.log(10), abs=1e-4)
