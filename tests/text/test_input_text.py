"""Input text edge cases, through the code every stage reads text with.

The rules (docs/guide.md, "Input conventions and bad input"; ``snm_core.text.tokenize`` and
``snm_core.io.textfile``): a line ends at ``\\n`` only; tokens are separated by
what ``str.split()`` splits on; a ``\\r\\n`` line end and a byte order mark at
the start of a file are dropped; a line holding a NUL byte is invalid, like
one that is not UTF-8; words are not Unicode-normalised; ``<S>``/``</S>``
inside a sentence are ``<UNK>``, counted.  Each rule is checked on the
reader and tokenizer, then end to end: ``snm count``, ``snm join``, ``snm
eval`` and ``snm score`` on one small model trained on text that breaks all
of them at once, against expectations computed from the sentences the text
was written from.
"""

import collections
import gzip
import json
import logging
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest
from support import messages

from snm.cli import main
from snm.commands import apply as apply_cmd
from snm.commands import count as count_cmd
from snm.commands import join as join_cmd
from snm_core.fit.selection import FitOptions, fit_directory
from snm_core.io import textfile
from snm_core.stages import manifests
from snm_core.text import synthetic
from snm_core.text.tokenize import count_words, split_lines, tokenize
from snm_core.text.vocab import SPECIALS, UNK_ID, Vocabulary

#: Every character Python's str.split() splits on, but the newline.
SPACES = [c for c in map(chr, range(0x110000)) if c.isspace() and c != "\n"]
BOM = "\ufeff"
CAFE, CAFE_DECOMPOSED = "caf\u00e9", "cafe\u0301"  # é: one code point / e + combining acute
RESUME, RESUME_DECOMPOSED = "r\u00e9sum\u00e9", "re\u0301sume\u0301"
NUL_WORD = "nul\x00word"


def odd_text(sentences):
    """``sentences`` (lists of words; [] an empty line) as the bytes of a file that uses
    every whitespace character between words, leading and trailing whitespace, CRLF
    line ends and a byte order mark."""
    lines = []
    for k, words in enumerate(sentences):
        gaps = [SPACES[(k + i) % len(SPACES)] * (1 + i % 2) for i in range(len(words))]
        line = "".join(w + g for w, g in zip(words[:-1], gaps)) + "".join(words[-1:])
        if k % 4 == 1 or not words:
            line = SPACES[(3 * k) % len(SPACES)] + line
        if k % 4 == 2:
            line += SPACES[(5 * k) % len(SPACES)] + "\r"  # "\r\r\n": the first \r is a space
        lines.append(line)
    return (BOM + "\r\n".join(lines) + "\r\n").encode("utf-8")


def plain_text(sentences):
    return "".join(" ".join(words) + "\n" for words in sentences).encode("utf-8")


def expected_stats(sentences, vocab_words):
    """Tokenizer totals of ``sentences`` computed from the word lists themselves."""
    valid = [s for s in sentences if s and not any("\0" in w for w in s)]
    tokens = [w for s in valid for w in s]
    markers = ("<S>", "</S>")
    return {"sentences": len(valid), "tokens": len(tokens),
            "empty_lines": sum(not s for s in sentences),
            "invalid_lines": len(sentences) - len(valid) - sum(not s for s in sentences),
            "marker_tokens": sum(w in markers for w in tokens),
            "oov_tokens": sum(w not in vocab_words and w not in markers for w in tokens),
            "events": len(tokens) + len(valid)}


TRAIN = ([s.split() for s in synthetic.generate(400, seed=31)]
         + [["the", CAFE, "verb0"]] * 3 + [["the", CAFE_DECOMPOSED, "verb1"]] * 3
         + [["the", RESUME, "verb2"]] * 3
         + [["the", "<S>", "noun1", "</S>", "verb2"], [], ["the", NUL_WORD, "verb0"]] * 2)
DEV = ([s.split() for s in synthetic.generate(60, seed=32)]
       + [["the", "</S>", "noun2"], ["the", NUL_WORD, "verb3"], []])


def build_model(root, train, dev, *vocab_args):
    """count -> join -> fit -> apply (the real stages, small and quick); the model dir."""
    (root / "train.txt").write_bytes(train)
    (root / "dev.txt").write_bytes(dev)
    # The texts' NUL lines are more than the share skipped without --skip_invalid.
    count_cmd.main(["--config", "5gram", "--train", str(root / "train.txt"), *vocab_args,
                      "--out", str(root / "counts"), "--num_buckets", "2", "--skip_invalid"])
    join_cmd.main(["--count", str(root / "counts"), "--heldout", str(root / "dev.txt"),
                     "--out", str(root / "heldout"), "--skip_invalid"])
    fit_directory(str(root / "heldout"), str(root / "adjust"),
                  FitOptions(variants=("unlexicalized",), epochs=1, hash_size=1 << 12,
                             batch_size=128), say=lambda *_: None)
    apply_cmd.main(["--count", str(root / "counts"), "--fit", str(root / "adjust"),
                      "--out", str(root / "model")])
    return root / "model"


@pytest.fixture(scope="module")
def odd_model(tmp_path_factory):
    """A model trained (and held out) on :func:`odd_text`: min_count 2, so <UNK> is seen."""
    return build_model(tmp_path_factory.mktemp("odd"), odd_text(TRAIN), odd_text(DEV),
                       "--min_count", "2")


def run(capsys, *argv):
    """``snm ARGV`` in this process: (exit status, stdout, stderr)."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def eval_json(capsys, model_dir, path, model="adjusted"):
    """A model's report of ``snm eval --json --skip_invalid`` (the adjusted one's)."""
    status, out, err = run(capsys, "eval", "--model", str(model_dir), str(path), "--json",
                           "--skip_invalid")
    assert status == 0, err
    return json.loads(out)[model]


def score_rows(capsys, model_dir, path, tmp_path):
    out = tmp_path / (path.name + ".scores")
    status, _, err = run(capsys, "score", "--model", str(model_dir), str(path), "--out", str(out),
                         "--skip_invalid")
    assert status == 0, err
    text = out.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return [row.split("\t", 3) for row in text[:-1].split("\n")]  # the sentence may hold tabs


# --- the reader and the tokenizer -------------------------------------------------------------

def test_whitespace_is_exactly_what_str_split_splits_on():
    """Every code point: the tokenizer splits (and trims) on it iff str.split() does."""
    chars = [chr(i) for i in range(0x110000) if not 0xD800 <= i < 0xE000]
    words, kept, _ = split_lines(["a" + c + "b" for c in chars])
    assert len(kept) == len(chars)
    parts = pc.list_value_length(words).to_numpy()
    splits = {c for c, n in zip(chars, parts) if n == 2}
    assert set(parts.tolist()) == {1, 2}
    assert splits == {c for c in chars if len(("a" + c + "b").split()) == 2}
    assert len(splits) == len(SPACES) + 1  # 28 characters and the newline
    _, kept, stats = split_lines(SPACES + ["".join(SPACES)])  # whitespace only: empty lines
    assert len(kept) == 0 and stats.empty_lines == len(SPACES) + 1
    for c in ("\u200b", "\u2060", BOM, "\x00"):  # zero-width and NUL: part of the word
        assert split_lines(["a" + c + "b"])[0].to_pylist() == [["a" + c + "b"]]


def test_only_a_newline_ends_a_line(tmp_path):
    """U+2028, U+2029, U+0085, \\r, \\v, \\f, \\x1c inside a line separate words, not lines
    (str.splitlines() would split on each of them)."""
    breaks = ["\u2028", "\u2029", "\u0085", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
    lines = [f"w{i}{c}x{i}" for i, c in enumerate(breaks)]
    path = tmp_path / "breaks.txt"
    path.write_bytes("\n".join(lines).encode() + b"\n")
    assert len(path.read_bytes().decode().splitlines()) > len(lines)  # what we do not do
    read = textfile.read_lines(str(path))
    assert read == lines
    batch, kept, stats = tokenize(read, Vocabulary([f"x{i}" for i in range(len(lines))]))
    assert kept.tolist() == list(range(len(lines))) and stats.tokens == 2 * len(lines)
    assert [batch.sentence(i)[1] for i in range(len(lines))] == list(range(3, 3 + len(lines)))


@pytest.mark.parametrize("name", ["crlf.txt", "crlf.txt.gz"])
def test_crlf_line_ends_are_newlines(tmp_path, name):
    data = b"a b\r\nc d\r\n\r\ne\rf\r\n  \r\ng h\r\r\nlast\r"
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    expected = ["a b", "c d", "", "e\rf", "  ", "g h\r", "last\r"]
    assert textfile.read_lines(str(path)) == expected
    for batch_bytes in range(1, 12):  # every place a read can end, between \r and \n too
        got = list(textfile.line_batches(str(path), batch_bytes))
        assert [line for _, batch in got for line in batch] == expected
        sizes = [len(batch) for _, batch in got]
        assert [first for first, _ in got] == np.cumsum([1] + sizes)[:-1].tolist()
    vocab = Vocabulary(["a", "b", "c", "d", "e", "f", "g", "h", "last"])
    batch, kept, stats = tokenize(expected, vocab)  # a \r left inside a line is a space
    assert [vocab.words[i] for i in batch.tokens] == ["a", "b", "c", "d", "e", "f", "g", "h",
                                                      "last"]
    assert (stats.oov_tokens, stats.empty_lines, kept.tolist()) == (0, 2, [0, 1, 3, 5, 6])


@pytest.mark.parametrize("name", ["bom.txt", "bom.txt.gz"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_dropped(tmp_path, name):
    data = (BOM + "the cat\nsat " + BOM + "on\n").encode()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    assert textfile.read_lines(str(path)) == ["the cat", "sat " + BOM + "on"]  # only the first
    assert [f for f, _ in textfile.line_batches(str(path), 2)][:2] == [1, 2]
    (tmp_path / "only.txt").write_bytes(BOM.encode())
    assert textfile.read_lines(str(tmp_path / "only.txt")) == [""]


def test_a_line_with_a_nul_byte_is_skipped_counted_and_logged(tmp_path, caplog):
    data = b"a b\nc\x00d e\n\x00\x00\x00\x00\nf \xff g\nh i\n"
    path = tmp_path / "nul.txt"
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="snm_core.io.textfile"):
        lines = textfile.read_lines(str(path))
    assert lines == ["a b", None, None, None, "h i"]
    logged = [r.getMessage() for r in caplog.records]
    nul = "a NUL byte at byte {} (binary data or UTF-16 text?)"
    assert logged == [f"{path}, line {n}: {problem}; line skipped" for n, problem in [
        (2, nul.format(1)), (3, nul.format(0)),
        (4, "not valid UTF-8 (invalid start byte at byte 2)")]]
    _, kept, stats = tokenize(lines, Vocabulary(["a", "b", "h", "i"]))
    assert (kept.tolist(), stats.invalid_lines, stats.tokens, stats.oov_tokens) == (
        [0, 4], 3, 4, 0)
    # A UTF-16 file is not read as words with NULs in them.
    (tmp_path / "utf16.txt").write_bytes("the cat\nsat on\n".encode("utf-16-le"))
    assert textfile.read_lines(str(tmp_path / "utf16.txt")) == [None, None, None]


def test_a_line_of_a_million_tokens(tmp_path, odd_model, capsys):
    """Read whole as one sentence (not cut at a batch), the lines after it numbered right,
    and scored: every one of its words and its </S> counted."""
    n = 1_000_000
    words = " ".join(synthetic.generate(3000, seed=7)).split()
    words = (words * (n // len(words) + 1))[:n]
    path = tmp_path / "long.txt"
    path.write_text("the noun1\n" + " ".join(words) + "\nthe noun2 verb1\n")
    for batch_bytes in (1 << 16, textfile.DEFAULT_BATCH_BYTES):
        batches = list(textfile.line_batches(str(path), batch_bytes))
        sizes = [len(batch) for _, batch in batches]
        assert [first for first, _ in batches] == np.cumsum([1] + sizes)[:-1].tolist()
        lines = [line for _, batch in batches for line in batch]
        assert len(lines) == 3 and lines[1].split() == words
    batch, _, stats = tokenize(lines, Vocabulary(sorted(set(words))))
    assert (stats.sentences, stats.tokens, stats.oov_tokens) == (3, n + 5, 0)
    assert batch.sentence(1).shape == (n,)
    report = eval_json(capsys, odd_model, path)
    assert (report["sentences"], report["words"]) == (3, n + 5 + 3)
    assert 1 < report["perplexity"] < 1000 and report["zero_probability"] == 0
    rows = score_rows(capsys, odd_model, path, tmp_path)
    assert [int(r[1]) for r in rows] == [3, n + 1, 4]
    assert sum(float(r[0]) for r in rows) == pytest.approx(report["log10_prob"], abs=1e-5)


def test_combining_marks_are_not_normalised():
    """e + U+0301 and U+00E9 are different words: two vocabulary entries, two ids; the
    word counts keep them apart."""
    lines = [f"the {CAFE} x", f"the {CAFE_DECOMPOSED} y", f"{CAFE} {RESUME}"]
    counts = count_words(lines)[0].to_pylist()
    assert {r["word"]: r["count"] for r in counts}[CAFE] == 2
    assert {r["word"]: r["count"] for r in counts}[CAFE_DECOMPOSED] == 1
    vocab = Vocabulary([CAFE, CAFE_DECOMPOSED, RESUME])
    assert vocab.ids([CAFE, CAFE_DECOMPOSED, RESUME, RESUME_DECOMPOSED]).tolist() == [
        3, 4, 5, UNK_ID]


def test_fake_gz_is_one_line_error_and_exit_2(tmp_path, odd_model, capsys):
    fake = tmp_path / "fake.txt.gz"
    fake.write_bytes(b"plain text, not gzip\n")
    proc = subprocess.run([sys.executable, "-m", "snm", "eval", "--model", str(odd_model),
                           str(fake)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    error = messages(proc.stderr)
    assert len(error) == 1, proc.stderr
    assert error[0].startswith(f"snm eval: error: {fake}: cannot decompress it after line 0")
    status, out, err = run(capsys, "score", "--model", str(odd_model), str(fake))
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and f"{fake}: cannot decompress" in err
    # A pipeline stage: the worker's error reaches the user as the same one line, without
    # the traceback Beam logs for it.
    proc = subprocess.run([sys.executable, "-m", "snm", "count", "--config", "5gram",
                           "--min_count", "1", "--train", str(fake), "--out",
                           str(tmp_path / "counts")], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    error = messages(proc.stderr)
    assert len(error) == 1, proc.stderr
    assert error[0].startswith(f"snm count: error: {fake}: cannot decompress it after line 0")
    assert not (tmp_path / "counts" / "manifest.json").exists()


# --- end to end: count, join, eval and score read text alike --------------------------------

def test_count_and_join_read_odd_text_as_its_sentences(odd_model):
    """Totals and vocabulary of text written with every whitespace, CRLF, a BOM, NUL lines,
    markers: what the sentences it was written from give."""
    vocab = Vocabulary.load(str(odd_model / "vocab.txt"))
    frequency = collections.Counter(w for s in TRAIN if NUL_WORD not in s for w in s)
    expected_words = {w for w, c in frequency.items() if c >= 2} - set(SPECIALS)
    assert set(vocab.words[3:]) == expected_words
    assert {CAFE, CAFE_DECOMPOSED, RESUME} <= expected_words and NUL_WORD not in expected_words
    counted = manifests.Count.read(str(odd_model.parent / "counts"))["totals"]
    expected = expected_stats(TRAIN, set(vocab.words[3:]))
    assert {k: counted[k] for k in expected} == expected
    assert expected["marker_tokens"] == 4 and expected["invalid_lines"] == 2
    joined = manifests.Join.read(str(odd_model.parent / "heldout"))["totals"]
    expected = expected_stats(DEV, set(vocab.words[3:]))
    assert {k: joined[k] for k in expected} == expected


def test_eval_and_score_read_odd_text_as_its_sentences(odd_model, tmp_path, capsys):
    sentences = ([s.split() for s in synthetic.generate(40, seed=33)]
                 + [["the", CAFE, "verb1"], ["zzz", "the", "noun3"], [], ["a", NUL_WORD]])
    plain, odd = tmp_path / "plain.txt", tmp_path / "odd.txt"
    plain.write_bytes(plain_text(sentences))
    odd.write_bytes(odd_text(sentences))
    report = eval_json(capsys, odd_model, odd)
    assert report == eval_json(capsys, odd_model, plain)  # every float, exactly
    valid = [s for s in sentences if s and NUL_WORD not in s]
    assert (report["sentences"], report["words"]) == (len(valid), sum(map(len, valid))
                                                      + len(valid))
    # The lines eval skipped are counted in its report (the NUL line, the empty one).
    assert (report["invalid_lines"], report["empty_lines"]) == (1, 1)
    rows, plain_rows = (score_rows(capsys, odd_model, p, tmp_path) for p in (odd, plain))
    assert [r[:3] for r in rows] == [r[:3] for r in plain_rows]
    echoed = odd.read_bytes().decode("utf-8")[1:].split("\r\n")[:-1]  # no BOM, no CRLF
    nul = sentences.index(["a", NUL_WORD])
    echoed[nul] = ""  # an invalid line is echoed empty
    assert [r[3] for r in rows] == echoed
    assert rows[nul][:3] == ["0", "0", "0"]
    assert rows[sentences.index([])][:3] == ["0", "0", "0"]


def test_combining_marks_in_eval_are_the_words_counted(odd_model, tmp_path, capsys):
    """The trained vocabulary holds café twice (two spellings), résumé once: a test text's
    words are the vocabulary's only byte for byte."""
    path = tmp_path / "marks.txt"
    path.write_text(f"the {CAFE} verb1\nthe {CAFE_DECOMPOSED} verb1\n"
                    f"the {RESUME} verb2\nthe {RESUME_DECOMPOSED} verb2\n")
    rows = score_rows(capsys, odd_model, path, tmp_path)
    assert [int(r[2]) for r in rows] == [0, 0, 0, 1]  # OOVs
    assert rows[0][0] != rows[1][0]  # trained with verb0 after one spelling, verb1 the other
    assert float(rows[1][0]) > float(rows[0][0])


def test_markers_inside_text_are_read_as_unk(odd_model, tmp_path, capsys):
    path = tmp_path / "markers.txt"
    path.write_text("the <S> noun1 </S> verb2\nthe qqq1 noun1 qqq2 verb2\nthe <UNK> noun1 "
                    "<UNK> verb2\n")
    rows = score_rows(capsys, odd_model, path, tmp_path)
    assert rows[0][:3] == rows[1][:3] == rows[2][:3]  # all three are "the <UNK> noun1 <UNK> verb2"
    assert rows[0][1:3] == ["6", "2"]
    _, _, stats = tokenize(["the <S> noun1 </S> verb2"],
                           Vocabulary.load(str(odd_model / "vocab.txt")))
    assert (stats.marker_tokens, stats.oov_tokens) == (2, 0)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_text_of_only_oov_words(odd_model, tmp_path, capsys):
    """Every word outside the vocabulary: a finite perplexity over <UNK> and </S>."""
    path = tmp_path / "oov.txt"
    path.write_text("zzz qqq\nxxx\n\nzzz zzz zzz\n")
    report = eval_json(capsys, odd_model, path)
    assert (report["words"], report["oov"], report["sentences"]) == (9, 6, 3)
    for r in (report, eval_json(capsys, odd_model, path, "unadjusted")):
        assert r["zero_probability"] == 0
        assert 1 < r["perplexity"] < 1e6 and 1 < r["perplexity_excluding_oov"] < 1e6


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_only_oov_words_with_a_model_that_never_saw_unk(tmp_path, capsys):
    """min_count 1: every training word is in the vocabulary, so <UNK> has probability 0.
    eval says so (infinite perplexity, the zero-probability count and why) and exits 0;
    the perplexity excluding OOVs stays finite."""
    model = build_model(tmp_path, plain_text([s.split() for s in synthetic.generate(150, 41)]),
                        plain_text([s.split() for s in synthetic.generate(30, 42)]),
                        "--min_count", "1")
    capsys.readouterr()  # the stages' summaries
    path = tmp_path / "oov.txt"
    path.write_text("zzz qqq\nxxx\n")
    report = eval_json(capsys, model, path)
    for r in (report, eval_json(capsys, model, path, "unadjusted")):
        assert (r["words"], r["oov"], r["zero_probability"]) == (5, 3, 3)
        assert r["perplexity"] == float("inf")
        assert 1 < r["perplexity_excluding_oov"] < 1e6
    status, out, _ = run(capsys, "eval", "--model", str(model), str(path))
    assert status == 0
    assert "Zero-probability tokens:\t3 (perplexity is infinite: the model never saw <UNK>" in out
    rows = score_rows(capsys, model, path, tmp_path)
    assert [r[0] for r in rows] == ["-inf", "-inf"]


def test_text_that_does_not_decode_is_an_error_unless_skipped_or_decoded(odd_model, tmp_path,
                                                                          capsys):
    """A latin-1 test file (a quarter of its lines not UTF-8, far above the share skipped
    without --skip_invalid): eval exits 2 before any report, naming the file and its first
    such line; --skip_invalid reports over the lines that decode, --encoding latin-1 reads
    them all."""
    sentences = [s.split() for s in synthetic.generate(30, seed=3)]
    lines = [" ".join(s) for s in sentences]
    lines[::4] = [line + " caf\u00e9" for line in lines[::4]]
    path = tmp_path / "latin1.txt"
    path.write_bytes("".join(line + "\n" for line in lines).encode("latin-1"))
    status, out, err = run(capsys, "eval", "--model", str(odd_model), str(path))
    undecoded = len(lines[::4])
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(
        f"snm eval: error: {path}, line 1: not valid UTF-8 (")
    assert f"{undecoded:,} of {len(lines):,} lines are not valid UTF-8" in err
    status, out, _ = run(capsys, "eval", "--model", str(odd_model), str(path), "--skip_invalid")
    assert status == 0 and f"the figures are over the other {len(lines) - undecoded}" in out
    decoded = eval_json(capsys, odd_model, path)
    assert decoded["invalid_lines"] == undecoded
    status, out, err = run(capsys, "eval", "--model", str(odd_model), str(path), "--json",
                           "--encoding", "latin-1")
    assert status == 0, err
    report = json.loads(out)["adjusted"]
    assert (report["invalid_lines"], report["sentences"]) == (0, len(lines))
    status, _, err = run(capsys, "score", "--model", str(odd_model), str(path),
                         "--out", str(tmp_path / "scores"))
    assert status == 2 and not (tmp_path / "scores").exists()
