"""Scoring left to right with states (``snm.load``, ``score_word``, ``full_scores``): the
per-event probabilities of ``snm eval``, on every family and layout; states equal
exactly when the model cannot tell the histories apart.

Oracles: the line scorer that ``snm eval`` uses (``score_lines``: another feature
extraction and another loop over the trie), and KenLM on the exported ARPA file.
"""

import itertools
import math
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.models import SKIP, build_model

import snm
from snm.cli import main
from snm_core.scoring.compact import compile_model
from snm_core.scoring.states import State, StateBatch

#: Sentences beyond the test text: words outside the vocabulary, markers inside a
#: sentence, one word, a long one.
EXTRA = ["zzz unseen noun1", "the <S> noun2 </S> verb1", "noun1",
         " ".join(["the noun1 verb2"] * 12)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """``{name: (model directory, test lines)}``: a 5-gram in the three layouts, a tagged
    5-gram (two corpus tags: two tries) hashed and as a trie, and a tagged skip-gram
    model."""
    root = tmp_path_factory.mktemp("states")
    ngram, test = build_model(root / "ngram", "5gram", tagged=False)
    dirs = {"hashed": ngram}
    for layout in ("trie", "small"):
        dirs[layout] = root / layout
        shutil.copytree(ngram, dirs[layout])
        compile_model(str(dirs[layout]), layout)
    tagged, _ = build_model(root / "tagged", "5gram", tagged=True)
    dirs["tagged"] = tagged
    dirs["tagged_trie"] = root / "tagged_trie"
    shutil.copytree(tagged, dirs["tagged_trie"])
    compile_model(str(dirs["tagged_trie"]), "trie")
    skip, skip_test = build_model(root / "skip", SKIP, tagged=True)
    result = {name: (str(d), test[:40] + EXTRA) for name, d in dirs.items()}
    result["skip"] = (str(skip), skip_test[:40] + EXTRA)
    return result


def line_log10(model, lines):
    """Per-event log10 probabilities of ``snm eval``'s scorer, sentence by sentence."""
    out = []
    for _, kept, scores in model.score_lines(lines, threads=1):
        with np.errstate(divide="ignore"):
            log10 = np.log10(scores.prob)
        out += [log10[scores.sentence == i] for i in range(len(kept))]
    return out


def state_log10(model, line):
    state = model.begin_state()
    out = []
    for word in line.split() + ["</S>"]:
        log10, state = model.score_word(state, word)
        out.append(log10)
    return np.array(out)


@pytest.mark.parametrize("name", ["hashed", "trie", "small", "tagged", "tagged_trie", "skip"])
def test_state_scores_are_the_line_scorers(models, name):
    model_dir, lines = models[name]
    model = snm.load(model_dir)
    expected = line_log10(model, lines)
    for line, want in zip(lines, expected):
        full = list(model.full_scores(line))
        np.testing.assert_array_equal([p for p, _, _ in full], want)
        if "<S>" not in line:  # a word "</S>" given alone ends the sentence
            np.testing.assert_array_equal(state_log10(model, line), want)
        assert model.score(line) == pytest.approx(want.sum(), abs=1e-9)
        assert model.perplexity(line) == pytest.approx(10 ** (-want.sum() / len(want)))
        oov = [o for _, _, o in full]
        assert oov[-1] is False and ("zzz" not in line or oov[0])


def test_full_scores_match_kenlm_on_the_exported_arpa(models, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    model_dir, lines = models["hashed"]
    arpa = tmp_path / "model.arpa"
    assert main(["export-arpa", "--model", model_dir, "--out", str(arpa)]) == 0
    lm = kenlm.Model(str(arpa))
    for name in ("hashed", "trie"):
        model = snm.load(models[name][0])
        for line in lines:
            if "<S>" in line or "</S>" in line:  # KenLM reads those as its markers
                continue
            ours = [p for p, _, _ in model.full_scores(line)]
            theirs = [p for p, _, _ in lm.full_scores(line)]
            np.testing.assert_allclose(ours, theirs, atol=2e-5)
            # without <S>: from no context, and without </S>
            ours = [p for p, _, _ in model.full_scores(line, bos=False, eos=False)]
            theirs = [p for p, _, _ in lm.full_scores(line, bos=False, eos=False)]
            np.testing.assert_allclose(ours, theirs, atol=2e-5)


def test_loglinear_state_scores_are_the_line_scorers(loglinear_run):
    model = snm.load(str(loglinear_run["model"]))
    lines = [line.strip() for line in open(loglinear_run["test"])][:40] + EXTRA
    for line, want in zip(lines, line_log10(model, lines)):
        np.testing.assert_allclose([p for p, _, _ in model.full_scores(line)], want, rtol=0,
                                   atol=1e-12)


@pytest.mark.parametrize("name", ["hashed", "trie", "small", "skip"])
def test_batched_step_equals_one_state_at_a_time(models, name):
    model_dir, lines = models[name]
    model = snm.load(model_dir)
    words = [line.split() for line in lines[:30]]
    states = [model.begin_state()] * len(words)
    for step in range(6):
        rows = [i for i, w in enumerate(words) if len(w) > step]
        batch = StateBatch.of([states[i] for i in rows], model.state_width)
        log10, after = model.score_words(batch, [words[i][step] for i in rows])
        for j, i in enumerate(rows):
            one, states[i] = model.score_word(states[i], words[i][step])
            assert one == log10[j] and after[j] == states[i]


def vocabulary_sample(model, k=12):
    return [model.vocab.word(i) for i in range(3, 3 + k)] + ["</S>", "zzz"]


@pytest.mark.parametrize("name", ["hashed", "trie", "tagged_trie", "skip"])
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_equal_states_score_every_word_alike(models, name, data):
    """Histories whose states are equal give every next word the same probability, and
    an n-gram model's states forget words beyond its longest context."""
    model = snm.load(models[name][0])
    words = vocabulary_sample(model)[:-2]
    histories = data.draw(st.lists(st.lists(st.sampled_from(words), min_size=0, max_size=7),
                                   min_size=2, max_size=8))
    states = []
    for history in histories:
        state = model.begin_state()
        for word in history:
            state = model.score_word(state, word)[1]
        states.append(state)
        assert len(state) <= model.state_width
    candidates = vocabulary_sample(model)
    for a, b in itertools.combinations(range(len(states)), 2):
        if states[a] == states[b]:
            scores = [model.score_words([states[i]] * len(candidates), candidates)[0]
                      for i in (a, b)]
            np.testing.assert_array_equal(*scores)


def test_ngram_states_merge_and_skip_gram_states_keep_their_reach(models):
    ngram = snm.load(models["trie"][0])
    skip = snm.load(models["skip"][0])
    tail = "the noun1 verb1 the noun2".split()

    def after(model, words):
        state = model.begin_state()
        for word in words:
            state = model.score_word(state, word)[1]
        return state

    # Two histories that differ five words back: one state in a 5-gram model.
    assert after(ngram, ["noun1"] + tail) == after(ngram, ["verb2"] + tail)
    assert len(after(ngram, tail)) <= 4
    # A skip-gram reaches further back than any n-gram: the states keep those words.
    assert skip.state_width > 4
    assert after(skip, ["noun1"] + tail[:3]) != after(skip, ["verb2"] + tail[:3])
    assert ngram.begin_state() != ngram.null_state()
    assert isinstance(ngram.begin_state(), State) and hash(ngram.begin_state()) == hash(
        after(ngram, []))


def test_end_score_is_the_probability_of_the_sentence_end(models):
    model = snm.load(models["skip"][0])
    line = models["skip"][1][0]
    full = [p for p, _, _ in model.full_scores(line)]
    state = model.begin_state()
    for word in line.split():
        state = model.score_word(state, word)[1]
    assert model.end_score(state) == full[-1]
    assert math.isfinite(model.score(line, bos=False, eos=False))


def kenlm_script(lib, model, lines):
    """A script written for ``kenlm.Model``: KenLM's names, its mutable states and its
    ``</s>``; run on ``kenlm`` and on ``snm`` as ``lib``."""
    results = {"order": model.order, "in": [w in model for w in ("noun1", "the", "zzz")]}
    state, out = lib.State(), lib.State()
    walks = []
    for line in lines:
        model.BeginSentenceWrite(state)
        total = 0.0
        for word in line.split() + ["</s>"]:
            total += model.BaseScore(state, word, out)
            state, out = out, state
        full = lib.State()
        model.NullContextWrite(full)
        first = model.BaseFullScore(full, line.split()[0], out)
        walks.append((total, model.score(line), model.score(line, bos=False, eos=False),
                      first.log_prob, first.ngram_length, first.oov))
    results["walks"] = walks
    return results


def test_a_kenlm_script_runs_on_snm_load_with_kenlm_s_results(models, tmp_path):
    kenlm = pytest.importorskip("kenlm")
    model_dir, lines = models["hashed"]
    lines = [line for line in lines if "<S>" not in line and "</S>" not in line]
    arpa = tmp_path / "model.arpa"
    assert main(["export-arpa", "--model", model_dir, "--out", str(arpa)]) == 0
    theirs = kenlm_script(kenlm, kenlm.Model(str(arpa)), lines)
    for name in ("hashed", "trie"):
        ours = kenlm_script(snm, snm.load(models[name][0]), lines)
        assert ours["order"] == theirs["order"] == 5
        assert ours["in"] == theirs["in"] == [True, True, False]
        for mine, kenlms in zip(ours["walks"], theirs["walks"]):
            np.testing.assert_allclose(mine[:4], kenlms[:4], atol=5e-5)
            assert mine[4:] == kenlms[4:]
