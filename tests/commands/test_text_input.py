"""Text that does not decode, text too small to train on, and training text on standard
input, as ``snm train``, ``count``, ``eval`` and ``score`` meet them.

One policy on every command (docs/guide.md, "Input conventions and bad input"): lines that are
not valid in the text's encoding are skipped and counted while they are at most
``MAX_INVALID_SHARE`` of the lines, all of them with ``--skip_invalid``; beyond that the
command exits 2 with one line naming the file and the first such line; ``--encoding
latin-1`` reads them.  The oracles: the line numbers and counts of the lines each file
was written with in latin-1, and the words written.
"""

import filecmp
import json
import os
import subprocess
import sys

import pytest
from support import messages
from support.runs import train_argv

from snm.cli import main
from snm_core.io.textfile import MAX_INVALID_SHARE
from snm_core.stages import manifests
from snm_core.text import synthetic

LINES = 3000
#: Lines written in latin-1 (1-based): a few, below the share; a third, far above it.
FEW = (700, 2100)
MANY = tuple(n for n in range(50, LINES + 1) if n % 3 == 2)
CAFE = "caf\u00e9"


def write_text(path, bad, seed):
    """``LINES`` synthetic sentences, the ``bad`` ones ending in café encoded as latin-1
    (invalid UTF-8), the others ASCII."""
    sentences = synthetic.generate(LINES, seed=seed)
    with open(path, "wb") as f:
        for number, sentence in enumerate(sentences, 1):
            f.write(f"{sentence} {CAFE}\n".encode("latin-1") if number in bad
                    else f"{sentence}\n".encode("ascii"))
    return str(path)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    root = tmp_path_factory.mktemp("text-input")
    train, dev, test = synthetic.write_corpus(str(root / "corpus"), num_train=LINES,
                                              num_dev=300, num_test=200, seed=9)
    assert len(FEW) <= MAX_INVALID_SHARE * LINES < len(MANY)
    return {"root": root, "train": train, "dev": dev, "test": test,
            "few": write_text(root / "few.txt", FEW, 11),
            "many": write_text(root / "many.txt", MANY, 12),
            "vocab": str(root / "vocab.txt")}


@pytest.fixture(scope="module")
def vocab(texts):
    """A vocabulary file of the clean training text's words (none with é)."""
    with open(texts["train"], encoding="utf-8") as f:
        words = sorted({w for line in f for w in line.split()})
    with open(texts["vocab"], "w", encoding="utf-8") as f:
        f.write("".join(w + "\n" for w in ["<S>", "</S>", "<UNK>"] + words))
    return texts["vocab"]


def run(capsys, *argv):
    """``snm ARGV`` in this process: (exit status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def snm(*argv, stdin=None):
    """``snm ARGV`` in a new process, standard input from the file ``stdin``."""
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as given:
        return subprocess.run([sys.executable, "-m", "snm", *map(str, argv)], stdin=given,
                              capture_output=True, text=True, check=False)


def train_args(texts, train, out, *extra):
    return train_argv({"train": train, "dev": texts["dev"], "test": texts["test"]}, out) \
        + ["--epochs", "1", *extra]


def summary_row(out, stage):
    """The line snm train prints for ``stage`` once it is done."""
    return next(line for line in reversed(out.splitlines()) if line.startswith(f"{stage} "))


def data_files(directory):
    """Every file under ``directory`` but manifests, logs and the model card (they hold
    paths and timings), relative."""
    return sorted(os.path.relpath(os.path.join(d, n), directory)
                  for d, _, names in os.walk(directory) for n in names
                  if not n.endswith(("manifest.json", ".jsonl", "model_card.md")))


def assert_same_data(a, b):
    names = data_files(a)
    assert names == data_files(b) and names
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


# --- snm train ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def few_run(texts):
    """``snm train`` on the text with a few latin-1 lines (a process of its own: its whole
    standard error)."""
    out = texts["root"] / "few-run"
    proc = snm("train", *train_args(texts, texts["few"], out))
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_train_skips_and_counts_a_few_lines_that_do_not_decode(texts, few_run):
    out, proc = few_run
    for stage in ("vocab", "count"):
        assert manifests.KINDS[stage].read(str(out / stage)).totals["invalid_lines"] == len(FEW)
        assert f"; {len(FEW)} lines skipped (do not decode)" in summary_row(proc.stdout, stage)
    # One warning a stage that read the text, naming the file and its first such line.
    warnings = [line for line in messages(proc.stderr) if "lines are not valid UTF-8" in line]
    assert len(warnings) == 2 and all(
        f"{texts['few']}, line {FEW[0]}: not valid UTF-8" in w for w in warnings)
    assert f"{len(FEW)} of {LINES:,} lines are not valid UTF-8" in warnings[0]


def test_train_refuses_text_in_another_encoding_in_one_line(texts, capsys):
    out = texts["root"] / "many-run"
    status, _, err = run(capsys, "train", *train_args(texts, texts["many"], out))
    assert status == 2
    assert messages(err) == [messages(err)[0]] and messages(err)[0].startswith(
        f"snm train: error: {texts['many']}, line {MANY[0]}: not valid UTF-8 (")
    assert f"{len(MANY):,} of {LINES:,} lines are not valid UTF-8" in err
    assert "--skip_invalid" in err and "--encoding" in err
    assert not (out / "count").exists()  # refused where the vocabulary is summed


def test_train_skip_invalid_skips_and_counts_them_all(texts, capsys):
    out = texts["root"] / "skip-run"
    status, stdout, err = run(capsys, "train", *train_args(texts, texts["many"], out),
                              "--skip_invalid")
    assert status == 0, err
    totals = manifests.Count.read(str(out / "count")).totals
    assert (totals["invalid_lines"], totals["sentences"]) == (len(MANY), LINES - len(MANY))
    assert f"; {len(MANY):,} lines skipped (do not decode)" in summary_row(stdout, "count")


def test_train_encoding_latin1_reads_every_line(texts, capsys):
    out = texts["root"] / "latin1-run"
    status, stdout, err = run(capsys, "train", *train_args(texts, texts["many"], out),
                              "--encoding", "latin-1")
    assert status == 0, err
    totals = manifests.Count.read(str(out / "count")).totals
    assert (totals["invalid_lines"], totals["sentences"]) == (0, LINES)
    assert "lines skipped" not in summary_row(stdout, "count")
    with open(out / "vocab" / "vocab.txt", encoding="utf-8") as f:
        assert CAFE in f.read().split("\n")  # written once a bad line, so counted len(MANY)


# --- snm count ------------------------------------------------------------------------------

def count_args(texts, train, out, *extra):
    return ["count", "--config", "3gram", "--train", train, "--vocab", texts["vocab"],
            "--out", out, "--num_buckets", "2", *extra]


def test_count_policy_over_the_whole_input_of_several_readers(texts, vocab, capsys):
    """On two workers, each file read by two readers in small batches: the share is
    counted over every line of every file and the error names the first bad line of the
    first file given that has one."""
    root = texts["root"]
    workers = ["--direct_num_workers", "2", "--batch_bytes", "4096"]
    status, out, err = run(capsys, *count_args(texts, texts["few"], root / "c-few", *workers))
    assert status == 0, err
    assert manifests.Count.read(str(root / "c-few")).totals["invalid_lines"] == len(FEW)
    assert any(line.split() == ["invalid_lines", str(len(FEW)), str(len(FEW))]
               for line in out.splitlines())  # the summary: total and Beam metric
    status, out, err = run(capsys, *count_args(texts, texts["train"], root / "c-many",
                                               *workers),
                           "--train", texts["many"], "--train", texts["few"])
    assert status == 2 and messages(err) == [messages(err)[0]]
    assert messages(err)[0].startswith(
        f"snm count: error: {texts['many']}, line {MANY[0]}: not valid UTF-8 (")
    assert f"{len(MANY) + len(FEW):,} of {3 * LINES:,} lines" in err
    assert not (root / "c-many" / "manifest.json").exists()
    status, _, err = run(capsys, *count_args(texts, texts["many"], root / "c-skip", *workers),
                         "--skip_invalid")
    assert status == 0, err
    assert manifests.Count.read(str(root / "c-skip")).totals["invalid_lines"] == len(MANY)
    status, _, err = run(capsys, *count_args(texts, texts["many"], root / "c-latin1"),
                         "--encoding", "latin-1")
    assert status == 0, err
    totals = manifests.Count.read(str(root / "c-latin1")).totals
    assert (totals["invalid_lines"], totals["sentences"]) == (0, LINES)
    status, _, err = run(capsys, *count_args(texts, texts["train"], root / "c-utf16"),
                         "--encoding", "utf-16")
    assert status == 2 and err.startswith("snm count: error: --encoding utf-16: ")


# --- snm eval and snm score -----------------------------------------------------------------

@pytest.mark.parametrize("command", ["eval", "score"])
def test_eval_and_score_apply_the_same_policy(texts, few_run, command, tmp_path, capsys):
    model = few_run[0] / "model"
    scores = tmp_path / "scores.txt"
    extra = ["--json"] if command == "eval" else ["--out", scores]

    def report(*more):
        status, out, err = run(capsys, command, "--model", model, *more, *extra)
        assert status == 0, err
        if command == "eval":
            return json.loads(out)["adjusted"]["invalid_lines"]
        rows = scores.read_text(encoding="utf-8").splitlines()
        assert len(rows) == LINES
        return sum(row.startswith("0\t0\t0\t") for row in rows)  # skipped: scored nothing

    assert report(texts["few"]) == len(FEW)
    if scores.exists():
        scores.unlink()
    status, out, err = run(capsys, command, "--model", model, texts["many"], *extra)
    assert status == 2 and out == "" and messages(err) == [messages(err)[0]]
    assert messages(err)[0].startswith(
        f"snm {command}: error: {texts['many']}, line {MANY[0]}: not valid UTF-8 (")
    assert not scores.exists()  # refused before anything is written
    assert report(texts["many"], "--skip_invalid") == len(MANY)
    assert report(texts["many"], "--encoding", "latin-1") == 0


# --- training text too small to train on ----------------------------------------------------

def test_text_too_small_to_train_on_is_one_line_before_any_count(texts, capsys):
    """Three lines whose words are each seen once: with --min_count 2 no word makes the
    vocabulary, so the model could predict only <UNK> and </S>."""
    tiny = texts["root"] / "tiny.txt"
    tiny.write_text("alpha beta gamma\ndelta epsilon zeta\neta theta iota\n")
    out = texts["root"] / "tiny-run"
    status, _, err = run(capsys, "train", *train_args(texts, tiny, out))
    assert status == 2 and messages(err) == [messages(err)[0]]
    assert messages(err)[0].startswith(f"snm train: error: --train {tiny}: too little text "
                                       "to train on: none of its 9 distinct words")
    assert "more training text" in err and "--min_count" in err
    assert not (out / "count").exists()


def test_training_text_without_a_vocabulary_word_is_refused(texts, vocab, capsys):
    other = texts["root"] / "other.txt"
    other.write_text("alpha beta gamma\n" * 50)
    status, _, err = run(capsys, *count_args(texts, other, texts["root"] / "c-other"))
    assert status == 2 and messages(err) == [messages(err)[0]]
    assert messages(err)[0].startswith(f"snm count: error: --train {other}: too little text "
                                       "to train on: none of its 150 words is in the "
                                       "vocabulary")
    assert not (texts["root"] / "c-other" / "manifest.json").exists()


# --- --train -: standard input --------------------------------------------------------------

def test_count_reads_standard_input_once_as_the_file(texts, capsys):
    """--train - with --min_count: the vocab stage and the count both read the one copy of
    standard input, and write what they write from the file."""
    root = texts["root"]
    argv = ["--config", "3gram", "--min_count", "2", "--num_buckets", "2"]
    proc = snm("count", *argv, "--train", "-", "--out", root / "c-stdin", stdin=texts["train"])
    assert proc.returncode == 0, proc.stderr
    status, _, err = run(capsys, "count", *argv, "--train", texts["train"], "--out",
                         root / "c-file")
    assert status == 0, err
    copy = root / "c-stdin" / "_stdin" / "train.txt"
    assert filecmp.cmp(copy, texts["train"], shallow=False)
    os.remove(copy)  # the only file the file's count lacks
    os.rmdir(copy.parent)
    assert_same_data(root / "c-file", root / "c-stdin")


def test_train_from_standard_input_makes_the_models_bytes(texts, few_run):
    """snm train --train - < FILE trains the model snm train --train FILE trains, and given
    the same text again resumes: every stage up to date."""
    out = texts["root"] / "stdin-run"
    proc = snm("train", *train_args(texts, "-", out), stdin=texts["few"])
    assert proc.returncode == 0, proc.stderr
    for stage in ("vocab", "count", "join", "fit", "model"):
        assert_same_data(few_run[0] / stage, out / stage)
    assert filecmp.cmp(few_run[0] / "eval.json", out / "eval.json", shallow=False)
    assert f"{out / '_stdin' / 'train.txt'}, line {FEW[0]}: not valid UTF-8" in proc.stderr
    again = snm("train", *train_args(texts, "-", out), stdin=texts["few"])
    assert again.returncode == 0, again.stderr
    assert sum("up to date" in line for line in again.stdout.splitlines()) == 6
