"""The trie layouts (``snm_core.scoring.layouts.trie``, ``snm_core.scoring.layouts.small``): the float
model's probabilities (the small layout's within its rounding bound), normalised, in
about 10 and under 3 bytes a link, for n-gram models only."""

import json
import math
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import SKIP, brute_force_perplexity, build_model
from support.runs import train_argv

from snm.cli import main
from snm_core.io.errors import SnmInputError
from snm_core.scoring.compact import compile_model, load_model
from snm_core.scoring.layouts import huffman, trie_build_kernels, trie_loops
from snm_core.scoring.layouts import small as small_layout
from snm_core.scoring.layouts import trie as trie_layout
from snm_core.scoring.layouts.small import SmallModel
from snm_core.scoring.layouts.trie import TrieModel
from snm_core.text.tokenize import tokenize

#: Largest factor between a probability of a layout and the hashed layout's: float32
#: values summed in another order (trie), values rounded to a log grid (small).
BOUND = {"trie": 1 + 1e-6, "small": math.exp(small_layout.VALUE_STEP) * (1 + 1e-6)}
TRIES = ("trie", "small")


@pytest.fixture(scope="module")
def models(ngram_model, tmp_path_factory):
    """The same 5-gram model in each layout: ``({layout: directory}, test lines)``; the
    hashed one is the session's (tests/conftest.py)."""
    hashed, test = ngram_model
    dirs = {"hashed": hashed}
    copies = tmp_path_factory.mktemp("layouts")
    for layout in TRIES:
        dirs[layout] = copies / layout
        shutil.copytree(hashed, dirs[layout])
        compile_model(str(dirs[layout]), layout)
    return dirs, test


def event_probabilities(model, lines):
    batch, _, _ = tokenize(lines, model.vocab)
    return model.score_batch(batch).prob


def within(ratio, layout):
    return np.all((ratio <= BOUND[layout]) & (ratio >= 1 / BOUND[layout]))


@pytest.mark.parametrize("layout", TRIES)
def test_trie_model_is_the_float_model(models, layout):
    dirs, test = models
    model = load_model(str(dirs[layout]))
    assert isinstance(model, {"trie": TrieModel, "small": SmallModel}[layout])
    ratio = event_probabilities(model, test) / event_probabilities(
        load_model(str(dirs["hashed"])), test)
    assert within(ratio, layout)
    if layout == "small":
        assert not np.all(np.abs(ratio - 1) < 1e-6)  # values were rounded
    ppl = model.evaluate_lines(test)["adjusted"]["perplexity"]
    assert ppl == pytest.approx(brute_force_perplexity(dirs["hashed"], test, adjusted=True),
                                rel=BOUND[layout] - 1)


@pytest.mark.parametrize("widths", [(1, 0), (0, 1), (1, 1)])
def test_every_record_width_of_the_trie_layout_scores_the_same(models, widths, tmp_path,
                                                             monkeypatch):
    """A vocabulary above 65,536 words stores 32-bit words, and more than 65,536 distinct
    M* 32-bit indices; the scoring loop is compiled for each pair of widths: each gives
    the 16-bit layout's probabilities and decoder states."""
    dirs, test = models
    narrow = load_model(str(dirs["trie"]))
    wide = tmp_path / "wide"
    shutil.copytree(dirs["hashed"], wide)
    # the narrow types left out: the build and the loader's checks take the wide ones
    monkeypatch.setattr(trie_layout, "ENTRY_TYPES", trie_layout.ENTRY_TYPES[widths[0]:])
    monkeypatch.setattr(trie_layout, "CONTEXT_TYPES", trie_layout.CONTEXT_TYPES[widths[1]:])
    compile_model(str(wide), "trie")
    entries = np.load(wide / "compact" / "entries.npy", mmap_mode="r")
    contexts = np.load(wide / "compact" / "contexts.npy", mmap_mode="r")
    assert (entries.dtype.itemsize, contexts.dtype.itemsize) == (6 + 2 * widths[0],
                                                                6 + 2 * widths[1])
    model = load_model(str(wide))
    assert np.array_equal(event_probabilities(model, test), event_probabilities(narrow, test))
    words = test[0].split()[:6]
    states = [model.begin_state(), narrow.begin_state()]
    for word in words:
        (p, states[0]), (q, states[1]) = (m.score_word(s, word)
                                          for m, s in zip((model, narrow), states))
        assert p == q


@pytest.mark.parametrize("layout", TRIES)
def test_trie_model_distributions_sum_to_one_and_agree_with_scoring(models, layout):
    dirs, test = models
    model = load_model(str(dirs[layout]))
    rng = np.random.default_rng(0)
    words = model.vocab.words[3:]
    for context in [[], ["begin1"], test[0].split()[:4]] + [
            list(rng.choice(words, size=rng.integers(1, 9))) for _ in range(6)]:
        assert model.distribution(context).sum() == pytest.approx(1.0, abs=1e-9), context
    words = test[1].split()
    probs = event_probabilities(model, [test[1]])
    for cut in range(len(words)):
        assert model.prob(words[:cut], words[cut]) == probs[cut]


@pytest.mark.parametrize("layout", TRIES)
def test_scores_do_not_depend_on_batches_or_threads(models, layout):
    """Sentences are scored side by side in lanes: which sentences share a batch, and
    how many threads score the batches, changes no probability."""
    dirs, test = models
    model = load_model(str(dirs[layout]))
    lines = test * 3

    def probabilities(**kwargs):
        return np.concatenate([s.prob for _, _, s in model.score_lines(lines, **kwargs)])

    whole = probabilities(threads=1, batch_lines=len(lines))
    np.testing.assert_array_equal(probabilities(threads=1, batch_lines=1), whole)
    np.testing.assert_array_equal(probabilities(threads=2, batch_lines=7), whole)


def test_escapes_and_blocks_do_not_change_a_probability(models, monkeypatch, tmp_path):
    """Escape codes for every step and gap of 2 or more, and blocks of 4 entries (most
    contexts span blocks, their M* stored): the same probabilities, to the bit."""
    dirs, test = models
    other = tmp_path / "other"
    shutil.copytree(dirs["hashed"], other)
    monkeypatch.setattr(small_layout, "ESCAPE", 2)
    monkeypatch.setattr(small_layout, "BLOCK_ENTRIES", 4)
    compile_model(str(other), "small")
    expected = event_probabilities(load_model(str(dirs["small"])), test)
    np.testing.assert_array_equal(event_probabilities(load_model(str(other)), test), expected)


@pytest.mark.parametrize("criterion", ["backoff", "mass"])
def test_pruned_model_in_the_trie_layouts(models, criterion, tmp_path):
    """Pruning leaves n-grams that are only prefixes (value 0) and, by mass, contexts
    whose shorter context is gone: each layout scores them as the model defines."""
    dirs, test = models
    target = load_model(str(dirs["hashed"])).manifest["totals"]["links"] // 3
    scored = {}
    for layout in ("hashed",) + TRIES:
        out = tmp_path / layout
        assert main(["prune", "--model", str(dirs["hashed"]), "--out", str(out),
                     "--target_links", str(target), "--criterion", criterion,
                     "--layout", layout]) == 0
        model = load_model(str(out))
        scored[layout] = event_probabilities(model, test)
        # the sums over every feature present, as a Python loop over the tables has them
        assert model.evaluate_lines(test)["adjusted"]["perplexity"] == pytest.approx(
            brute_force_perplexity(out, test, adjusted=True),
            rel=1e-6 if layout == "hashed" else BOUND[layout] - 1)
        for context in ([], test[0].split()[:3], test[2].split()[:4]):
            assert model.distribution(context).sum() == pytest.approx(1.0, abs=1e-6)
    for layout in TRIES:
        assert within(scored[layout] / scored["hashed"], layout)


@pytest.mark.parametrize("layout", TRIES)
def test_trie_layouts_are_deterministic_and_stated(models, layout, tmp_path):
    dirs, _ = models
    again = tmp_path / "again"
    shutil.copytree(dirs["hashed"], again)
    compile_model(str(again), layout)
    for path in (dirs[layout] / "compact").glob("*.npy"):
        assert (again / "compact" / path.name).read_bytes() == path.read_bytes(), path.name
    counts, fit = (str(dirs["hashed"].parent / name) for name in ("counts", "adjust"))
    assert main(["apply", "--count", counts, "--fit", fit, "--out",
                 str(tmp_path / "applied"), "--layout", layout]) == 0
    compact = json.loads((tmp_path / "applied" / "compact" / "manifest.json").read_text())
    assert compact["layout"].startswith(layout)
    card = (tmp_path / "applied" / "model_card.md").read_text()
    assert f"{compact['bytes'] / compact['links']:.1f} bytes a link" in card
    assert f"layout {layout}" in card


def test_eval_of_a_trie_model_reports_the_adjusted_model_only(models, capsys):
    dirs, _ = models
    text = str(dirs["hashed"].parent / "test.txt")
    assert main(["eval", "--model", str(dirs["trie"]), text, "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert list(reports) == ["adjusted"]  # the trie layouts keep no unadjusted model
    assert main(["eval", "--model", str(dirs["small"]), text, "--unadjusted"]) == 2
    assert "no unadjusted model" in capsys.readouterr().err


def test_skip_gram_models_are_refused(tmp_path):
    skip, _ = build_model(tmp_path / "skip", SKIP, tagged=False)
    for layout in TRIES:
        with pytest.raises(SnmInputError, match="n-gram models only"):
            compile_model(str(skip), layout)
    assert (skip / "compact" / "manifest.json").exists()  # the hashed arrays are left alone


def test_a_tagged_model_is_one_trie_per_tag_summed(tagged_ngram_model, tmp_path):
    """Corpus tags: the features of each tag form a trie; an event sums over all."""
    hashed, test = tagged_ngram_model
    expected = event_probabilities(load_model(str(hashed)), test)
    for layout in TRIES:
        copy = tmp_path / layout
        shutil.copytree(hashed, copy)
        compile_model(str(copy), layout)
        model = load_model(str(copy))
        assert model.compact["tags"] == 2
        assert within(event_probabilities(model, test) / expected, layout)
        assert model.evaluate_lines(test)["adjusted"]["perplexity"] == pytest.approx(
            brute_force_perplexity(hashed, test, adjusted=True), rel=BOUND[layout] - 1)
        for context in ([], test[0].split()[:3]):
            assert model.distribution(context).sum() == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1 << 40), min_size=1, max_size=300), st.integers(0, 1 << 30))
def test_huffman_codes_round_trip_and_are_optimal(frequencies, seed):
    frequencies = np.array(frequencies)
    lengths = huffman.code_lengths(frequencies)
    used = frequencies > 0
    assert np.all((lengths > 0) == used) and lengths.max(initial=0) <= huffman.MAX_CODE_BITS
    kraft = np.sum(2.0 ** -lengths[used])
    assert kraft <= 1 + 1e-12 and (used.sum() < 2 or kraft == pytest.approx(1))
    if used.sum() >= 2 and lengths.max() < huffman.MAX_CODE_BITS:  # not flattened: optimal
        p = frequencies[used] / frequencies[used].sum()
        entropy = -np.sum(p * np.log2(p))
        assert entropy - 1e-9 <= np.sum(p * lengths[used]) < entropy + 1
    if not used.any():
        return
    symbols = np.random.default_rng(seed).choice(np.flatnonzero(used), size=200)
    codes = huffman.canonical_codes(lengths)
    table = huffman.DecodeTable.of(lengths)
    fields = codes[symbols].reshape(-1, 1)
    bits = lengths[symbols].astype(np.uint8).reshape(-1, 1)
    positions = np.r_[0, np.cumsum(bits[:-1, 0], dtype=np.int64)]
    stream = trie_build_kernels.pack(fields, bits, positions, int(bits.sum()) // 64 + 3)
    pos = 0
    for symbol in symbols:
        got, n = trie_loops.decode(stream, pos, table)
        assert (got, n) == (symbol, lengths[symbol])
        pos += n


def test_train_stores_its_model_in_the_layout_asked_for(tmp_path, capsys):
    """``snm train --layout trie``: the model and its evaluation in that layout; asking
    for another layout then redoes apply and eval only; a skip-gram configuration is
    refused before any stage runs."""
    from snm_core.text import synthetic
    train, dev, test = synthetic.write_corpus(str(tmp_path / "corpus"), 600, 80, 80, seed=4)
    corpus = {"train": train, "dev": dev, "test": test}
    out = tmp_path / "run"
    assert main(["train", *train_argv(corpus, out), "--layout", "trie"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^eval +test perplexity [\d.]+ adjusted +[\d.]+ s$", printed,
                     re.MULTILINE), printed  # no unadjusted figure
    assert isinstance(load_model(str(out / "model")), TrieModel)
    reports = json.loads((out / "eval.json").read_text())
    assert list(reports) == ["adjusted"]
    assert main(["train", *train_argv(corpus, out), "--layout", "small"]) == 0
    assert capsys.readouterr().out.count("up to date") == 4  # vocab .. fit
    assert isinstance(load_model(str(out / "model")), SmallModel)
    argv = train_argv(corpus, tmp_path / "skip")
    argv[argv.index("5gram")] = "skip5gram"
    assert main(["train", *argv, "--layout", "trie"]) == 2
    assert "n-gram models only" in capsys.readouterr().err
    assert not (tmp_path / "skip" / "counts").exists()


@pytest.mark.parametrize("layout", TRIES)
def test_a_damaged_array_is_a_one_line_error_naming_it(models, layout, tmp_path):
    dirs, _ = models
    copy = tmp_path / layout
    shutil.copytree(dirs[layout], copy)
    name = {"trie": "entries", "small": "bits"}[layout]
    path = copy / "compact" / f"{name}.npy"
    stored = np.load(path)
    np.save(path, np.zeros(len(stored)))
    remedy = re.escape(f"build the arrays again: snm compact --model {copy} --layout {layout}")
    with pytest.raises(SnmInputError, match=f"{name}.npy: float64 .*{remedy}"):
        load_model(str(copy))
    np.save(path, stored[:-1])
    with pytest.raises(SnmInputError, match="(do not agree in length|bits.npy: uint64 of "
                                            f"shape).*{remedy}"):  # one entry short
        load_model(str(copy))


@pytest.mark.parametrize("layout", TRIES)
def test_entries_outside_the_vocabulary_are_refused(models, layout, tmp_path):
    """Loading puts the empty context's entries into a table by word: entries that do not
    agree with the vocabulary (here its radix) are a one-line error, never a write past
    the table."""
    copy = tmp_path / layout
    shutil.copytree(models[0][layout], copy)
    path = copy / "compact" / "manifest.json"
    compact = json.loads(path.read_text())
    compact["radix"] = 3
    path.write_text(json.dumps(compact))
    message = {"trie": "entries.npy holds", "small": "bits.npy decodes to"}[layout]
    with pytest.raises(SnmInputError, match=f"{message} a word outside the vocabulary; build "
                                            "the arrays again: snm compact --model"):
        load_model(str(copy))


@pytest.mark.parametrize("layout", ["trie", "small"])
def test_scoring_a_trie_model_imports_no_numba(models, layout):
    """Loading, scoring and a decoder's states on a trie or small model run in C: a process
    that only scores pays no numba start (nearly a second) or memory."""
    script = ("import sys, snm; m = snm.load(sys.argv[1]); "
              "p, state = m.score_word(m.begin_state(), 'the'); "
              "print(m.score('the verb1 noun3'), p + m.end_score(state), 'numba' in sys.modules)")
    printed = subprocess.run([sys.executable, "-c", script, str(models[0][layout])],
                             capture_output=True, text=True, check=True).stdout.split()
    assert float(printed[0]) < 0 and float(printed[1]) < 0 and printed[2] == "False"


def test_compact_converts_a_finished_model_and_keeps_its_card(models, tmp_path, capsys):
    dirs, test = models
    model = tmp_path / "model"
    shutil.copytree(dirs["hashed"], model)
    card = model / "model_card.md"
    card.write_text(card.read_text() + "\n## Evaluation\n\n| adjusted | test | 1.00 |\n")
    for layout in ("small", "trie", "hashed"):
        assert main(["compact", "--model", str(model), "--layout", layout]) == 0
        assert f"layout {layout}" in capsys.readouterr().out
        text = card.read_text()
        assert f"- layout {layout} (" in text and text.endswith("| adjusted | test | 1.00 |\n")
        probs = event_probabilities(load_model(str(model)), test)
        np.testing.assert_array_equal(probs, event_probabilities(
            load_model(str(dirs[layout])), test))
    assert main(["compact", "--model", str(dirs["hashed"].parent / "counts"), "--layout",
                 "trie"]) == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 64).flatmap(lambda n: st.tuples(
    st.integers(0, (1 << n) - 1), st.just(n))), min_size=1, max_size=40), st.integers(0, 200))
def test_pack_writes_each_field_after_the_last(fields, start):
    """The small layout's bit streams: each field (a value of its length's bits), most
    significant bit first, after the last (against a string of bits)."""
    values = np.array([[v] for v, _ in fields], np.uint64)
    lengths = np.array([[n] for _, n in fields], np.uint8)
    positions = start + np.r_[0, np.cumsum(lengths[:-1, 0], dtype=np.int64)]
    n_words = (start + int(lengths.sum())) // 64 + 2
    stream = trie_build_kernels.pack(values, lengths, positions, n_words)
    expected = "0" * start + "".join(format(v, f"0{n}b") if n else "" for v, n in fields)
    expected = expected.ljust(64 * n_words, "0")
    assert "".join(format(int(w), "064b") for w in stream) == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=50),
       st.data())
def test_run_sums_add_in_order(values, data):
    """A stored M* is the sum the scorer makes: each run's values added left to right."""
    n = len(values)
    starts = np.array(data.draw(st.lists(st.integers(0, n), min_size=1, max_size=10)))
    ends = np.minimum(n, starts + np.array(data.draw(st.lists(
        st.integers(0, n), min_size=len(starts), max_size=len(starts)))))
    expected = []
    for lo, hi in zip(starts, ends):
        total = 0.0
        for v in values[lo:hi]:
            total += v
        expected.append(total)
    got = trie_build_kernels.run_sums(np.array(values), starts, ends)
    assert got.tolist() == expected
