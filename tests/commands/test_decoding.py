"""Models inside decoders: pyctcdecode's and flashlight's CTC beam searches driven by an
SNM (``snm.decoding.PyctcdecodeLM``, ``snm.decoding.FlashlightLM``), ``snm query``
through a pipe, ``snm rescore``.

Oracles: the sentence each utterance was made from (the decoder must find it where
only the language model can), the model's own sentence scores through the API
(for the rescoring arithmetic), and text written by hand.
"""

import io
import select
import shutil
import subprocess
import sys

import numpy as np
import pytest
from support.models import build_model

import snm
from snm.cli import main
from snm_core.scoring.compact import compile_model

pyctcdecode = pytest.importorskip("pyctcdecode")
from snm.decoding import PyctcdecodeLM  # noqa: E402  (needs pyctcdecode)

#: A skip-gram configuration reaching begin_k from end_k (at least 6 words apart).
SKIP_FAR = ("ngram_extractor { min_n: 0 max_n: 2 }\n"
            "skip_ngram_extractor { max_context_words: 2 max_remote_words: 1 "
            "max_skip_length: 9 tie_skip_length: true }")


@pytest.fixture(scope="module")
def skip_model(tmp_path_factory):
    model_dir, _ = build_model(tmp_path_factory.mktemp("decoding"), SKIP_FAR, tagged=False)
    return str(model_dir)


def ctc_log_probs(text, labels, tied=(), sharp=0.9):
    """Log-probabilities (frames, labels) that spell ``text``: each character on a frame
    of its own (``sharp`` on it, the rest spread), a blank frame after each.  At the
    character positions in ``tied``, ``tied[i]`` is a string of characters sharing the
    frame's mass equally, so that the acoustics cannot choose between them."""
    index = {c: i for i, c in enumerate(labels)}
    frames = []
    for position, char in enumerate(text):
        frame = np.full(len(labels), (1 - sharp) / (len(labels) - 1))
        if position in tied:
            frame[:] = (1 - sharp) / (len(labels) - len(tied[position]))
            for c in tied[position]:
                frame[index[c]] = sharp / len(tied[position])
        else:
            frame[index[char]] = sharp
        blank = np.full(len(labels), (1 - sharp) / (len(labels) - 1))
        blank[index[""]] = sharp
        frames += [frame, blank]
    return np.log(np.array(frames))


def test_skip_gram_model_chooses_between_acoustically_tied_words(skip_model):
    """``end1`` and ``end4`` sound alike; only a model that sees ``begin_k`` seven words
    back knows which closes the sentence."""
    model = snm.load(skip_model)
    utterances = ["begin1 the noun1 verb4 a noun22 adv1 end1",
                  "begin4 the noun1 verb4 a noun22 adv1 end4"]
    labels = ["", " "] + sorted({c for u in utterances for c in u} - {" "} | set("0123456789"))
    alphabet = pyctcdecode.Alphabet.build_alphabet(labels)
    without = pyctcdecode.BeamSearchDecoderCTC(alphabet)
    with_lm = pyctcdecode.BeamSearchDecoderCTC(
        alphabet, PyctcdecodeLM(model, alpha=0.5, beta=1.0))
    plain, fused = [], []
    for text in utterances:
        log_probs = ctc_log_probs(text, labels, tied={len(text) - 1: "14"})
        plain.append(without.decode(log_probs, beam_width=20))
        fused.append(with_lm.decode(log_probs, beam_width=20))
    assert fused == utterances
    assert plain[0][-1] == plain[1][-1]  # the acoustics alone give both the same ending
    # The model's own preference, through the API, is the decoder's choice.
    for text in utterances:
        other = text[:-1] + ("4" if text.endswith("1") else "1")
        assert model.score(text) > model.score(other)


def test_adapter_scores_as_pyctcdecode_scores_kenlm(skip_model):
    """alpha * ln P + beta per word, the unknown-word offset, and the end of the sentence."""
    model = snm.load(skip_model)
    lm = PyctcdecodeLM(model, alpha=0.7, beta=2.0, unk_score_offset=-10.0)
    state = lm.get_start_state()
    score, state = lm.score(state, "the")
    log10, expected_state = model.score_word(model.begin_state(), "the")
    assert score == pytest.approx(0.7 * log10 * np.log(10) + 2.0) and state == expected_state
    score, after = lm.score(state, "qqq", is_last_word=True)
    log10, end = model.score_word(state, "qqq")
    assert score == pytest.approx(0.7 * (log10 - 10.0 + model.end_score(end)) * np.log(10) + 2.0)
    assert lm.score_partial_token("nou") == 0.0 and lm.score_partial_token("xq") == -10.0
    assert lm.order == model.state_width + 1
    lm.reset_params(alpha=0.1)
    assert lm.alpha == 0.1


def flashlight_decode(decoder, log_probs):
    """flashlight's best hypothesis for (frames, tokens) log-probabilities."""
    emissions = np.ascontiguousarray(log_probs, dtype=np.float32)
    return decoder.decode(emissions.ctypes.data, *emissions.shape)[0]


@pytest.mark.parametrize("compiled", [True, False])
def test_flashlight_lexicon_decoder_lets_the_skip_gram_model_choose(skip_model, compiled):
    """flashlight's lexicon decoder over characters: ``end1`` and ``end4`` tie in the
    acoustics; the SNM chooses right where flashlight's ZeroLM cannot."""
    decoder_module = pytest.importorskip("flashlight.lib.text.decoder")
    from snm.decoding import FlashlightLM
    model = snm.load(skip_model)
    words = sorted(w for w in (model.vocab.word(i) for i in model.scored_words)
                   if w not in ("</S>", "<UNK>"))
    vocabulary = words + ["<unk>"]
    labels = ["", " "] + sorted({c for w in words for c in w})
    utterances = ["begin1 the noun1 verb4 a noun22 adv1 end1",
                  "begin4 the noun1 verb4 a noun22 adv1 end4"]

    def decode_all(lm):
        trie = decoder_module.Trie(len(labels), labels.index(" "))
        start = lm.start(False)
        for i, word in enumerate(words):
            trie.insert([labels.index(c) for c in word], i, lm.score(start, i)[1])
        trie.smear(decoder_module.SmearingMode.MAX)
        options = decoder_module.LexiconDecoderOptions(
            beam_size=20, beam_size_token=len(labels), beam_threshold=25.0, lm_weight=1.0,
            word_score=0.0, unk_score=float("-inf"), sil_score=0.0, log_add=False,
            criterion_type=decoder_module.CriterionType.CTC)
        decoder = decoder_module.LexiconDecoder(options, trie, lm, labels.index(" "),
                                                labels.index(""), len(words), [], False)
        return [" ".join(vocabulary[i] for i in flashlight_decode(decoder, ctc_log_probs(
            text, labels, tied={len(text) - 1: "14"})).words if i >= 0) for text in utterances]

    assert decode_all(FlashlightLM(model, vocabulary, compiled=compiled)) == utterances
    # The acoustics cannot tell: the decoder's choice is the model's preference.
    for text in utterances:
        other = text[:-1] + ("4" if text.endswith("1") else "1")
        log_probs = ctc_log_probs(text, labels, tied={len(text) - 1: "14"})
        assert log_probs[2 * (len(text) - 1), labels.index("1")] == \
            log_probs[2 * (len(text) - 1), labels.index("4")]
        assert model.score(text) > model.score(other)


@pytest.mark.parametrize("compiled", [True, False])
def test_flashlight_lexicon_free_decoder_with_word_tokens(skip_model, compiled):
    """The lexicon-free decoder calls the model with the acoustic model's tokens, here
    whole words (a word-piece model whose pieces are words)."""
    decoder_module = pytest.importorskip("flashlight.lib.text.decoder")
    from snm.decoding import FlashlightLM
    model = snm.load(skip_model)
    tokens = ["<blank>", "|"] + sorted(
        w for w in (model.vocab.word(i) for i in model.scored_words)
        if w not in ("</S>", "<UNK>"))
    utterances = ["begin1 the noun1 verb4 a noun22 adv1 end1",
                  "begin4 the noun1 verb4 a noun22 adv1 end4"]

    def log_probs(text):  # one frame a word, a blank after it; the last word tied
        frames = []
        for k, word in enumerate(text.split()):
            frame = np.full(len(tokens), 0.1 / (len(tokens) - 2))
            for w in (("end1", "end4") if k == len(text.split()) - 1 else (word,)):
                frame[tokens.index(w)] = 0.9 / (2 if k == len(text.split()) - 1 else 1)
            blank = np.full(len(tokens), 0.1 / (len(tokens) - 1))
            blank[0] = 0.9
            frames += [frame, blank]
        return np.log(np.array(frames))

    def decode_all(lm):
        options = decoder_module.LexiconFreeDecoderOptions(
            beam_size=20, beam_size_token=len(tokens), beam_threshold=25.0, lm_weight=1.0,
            sil_score=0.0, log_add=False, criterion_type=decoder_module.CriterionType.CTC)
        decoder = decoder_module.LexiconFreeDecoder(options, lm, 1, 0, [])
        return [" ".join(tokens[i] for i in flashlight_decode(decoder, log_probs(text)).tokens
                         if i >= 2) for text in utterances]

    assert decode_all(FlashlightLM(model, tokens, compiled=compiled)) == utterances
    for text in utterances:  # tied in the acoustics, chosen by the model
        tied = log_probs(text)[-2]
        assert tied[tokens.index("end1")] == tied[tokens.index("end4")]


@pytest.mark.parametrize("compiled", [True, False])
def test_flashlight_adapter_scores_and_states(skip_model, compiled):
    """log10 scores as flashlight's KenLM gives them, ``</s>`` at the end, one ``LMState``
    for equal model states, and unknown words as ``<UNK>``: the C++ LM flashlight calls
    without Python, and the Python one."""
    pytest.importorskip("flashlight.lib.text.decoder")
    from snm.decoding import FlashlightLM
    model = snm.load(skip_model)
    words = ["the", "noun1", "verb4", "qqq", "<unk>"]
    lm = FlashlightLM(model, words, compiled=compiled)
    assert FlashlightLM.compiled(lm) == compiled
    exact = {"abs": 1e-12} if not compiled else {"rel": 1e-6}  # flashlight's float scores
    state, total = lm.start(False), 0.0
    for i in range(3):
        state, log10 = lm.score(state, i)
        total += log10
    state, log10 = lm.finish(state)
    assert total + log10 == pytest.approx(model.score("the noun1 verb4"), **exact)
    start = lm.start(False)
    assert lm.score(start, 3)[1] == lm.score(start, 4)[1] == pytest.approx(
        model.score_word(model.begin_state(), "qqq")[0], **exact)
    # Within an utterance, histories the model cannot tell apart (they differ only
    # beyond the words a state holds) reach one LMState: flashlight merges by it.
    width = model.state_width
    one, other = [1] * (width + 1), [2] + [1] * width
    if not compiled:
        ends = []
        for history in (one, other):
            state = lm.start(False)  # a new utterance each: the states are compared below
            for i in history:
                state = lm.score(state, i)[0]
            ends.append(lm._ours[state])
        assert ends[0] == ends[1]
    state, same = lm.start(False), []
    for history in (one, other):
        walk = state
        for i in history:
            walk = lm.score(walk, i)[0]
        same.append(walk)
    assert same[0] is same[1]
    different = lm.score(lm.score(state, 0)[0], 1)[0]
    assert different is not same[0]
    by_path = FlashlightLM(skip_model, words, compiled=compiled)  # a directory: loaded
    assert by_path.score(by_path.start(False), 0)[1] == lm.score(lm.start(False), 0)[1]
    nothing = FlashlightLM(model, words, score_boundary=False, compiled=compiled)
    state = nothing.start(False)
    assert nothing.finish(state) == (state, 0.0)
    assert nothing.score(state, 0)[1] == pytest.approx(
        model.score_word(model.null_state(), "the")[0], **exact)


@pytest.mark.parametrize("compiled", [True, False])
def test_flashlight_adapter_answers_every_word_of_a_state_once(skip_model, compiled):
    """A lexicon decoder asks about every word after the start state (its trie's unigram
    scores): each answer is the model's, and asked again it is the same state and score."""
    pytest.importorskip("flashlight.lib.text.decoder")
    from snm.decoding import FlashlightLM
    model = snm.load(skip_model)
    words = [model.vocab.word(i) for i in model.scored_words]
    lm = FlashlightLM(model, words, compiled=compiled)
    start = lm.start(False)
    first = [lm.score(start, i) for i in range(len(words))]
    assert len(words) > 50  # beyond the short list of a state's answers
    for i, word in enumerate(words):
        assert first[i][1] == pytest.approx(model.score_word(model.begin_state(), word)[0],
                                            rel=1e-6)
        again = lm.score(start, i)
        assert again[0] is first[i][0] and again[1] == first[i][1]


def read_line(stream, seconds):
    """One line of ``stream``, or None if none came within ``seconds``."""
    ready, _, _ = select.select([stream], [], [], seconds)
    return stream.readline().decode() if ready else None


def test_query_answers_a_line_before_the_next_is_written(skip_model):
    model = snm.load(skip_model)
    lines = ["the noun1 verb4 a noun22", "begin1 zzz noun3"]
    proc = subprocess.Popen([sys.executable, "-m", "snm", "query", "--model", skip_model],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        answers = []
        for line in lines:
            proc.stdin.write((line + "\n").encode())
            proc.stdin.flush()
            # The next line is written only once this one is answered.
            answers.append(read_line(proc.stdout, 120))
            assert answers[-1] is not None, "no answer while the input stays open"
        proc.stdin.close()
        summary = proc.stdout.read().decode()
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    for line, reply in zip(lines, answers):
        fields = reply.rstrip("\n").split("\t")
        words = line.split() + ["</s>"]  # the end as KenLM spells it
        assert [f.split("=")[0] for f in fields[:-1]] == words
        expected = list(model.full_scores(line))
        for field, (log10, length, _) in zip(fields[:-1], expected):
            assert float(field.split()[-1]) == pytest.approx(log10, abs=1e-5)
            assert int(field.split()[1]) == length
        assert fields[-1] == f"Total: {model.score(line):.6g} OOV: {'zzz' in line:d}"
    assert "Perplexity including OOVs" in summary and "Sentences:\t2" in summary


def test_eval_and_score_read_standard_input(skip_model, tmp_path, monkeypatch, capsys):
    text = "the noun1 verb4 a noun22\nbegin1 the noun3 verb2\n"
    (tmp_path / "t.txt").write_text(text)
    for command in ("eval", "score"):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
        assert main([command, "--model", skip_model, "-"]) == 0
        piped = capsys.readouterr().out
        assert main([command, "--model", skip_model, str(tmp_path / "t.txt")]) == 0
        assert piped == capsys.readouterr().out and piped


def test_rescore_picks_the_best_total_per_utterance(skip_model, tmp_path):
    model = snm.load(skip_model)
    rows = [("u1", -4.0, "begin1 the noun1 verb4 a noun22 adv1 end1"),
            ("u1", -3.5, "begin1 the noun1 verb4 a noun22 adv1 end4"),
            ("u2", -9.0, "the noun1 verb4 a noun22"),
            ("u1", -30.0, "noun22 noun22"),
            ("u2", -9.0, "")]
    nbest = tmp_path / "nbest.tsv"
    nbest.write_text("".join(f"{u}\t{s}\t{h}\n" for u, s, h in rows))
    weight, penalty = 0.8, -0.5
    assert main(["rescore", "--model", skip_model, str(nbest), "--lm_weight", str(weight),
                 "--word_penalty", str(penalty), "--best", str(tmp_path / "best.txt"),
                 "--out", str(tmp_path / "all.tsv")]) == 0
    totals = [s + weight * model.score(h) * np.log(10) + penalty * len(h.split())
              for _, s, h in rows]
    best = {}
    for (u, _, h), total in zip(rows, totals):
        if u not in best or total > best[u][0]:
            best[u] = (total, h)
    assert (tmp_path / "best.txt").read_text() == "".join(
        f"{u}\t{best[u][1]}\n" for u in ("u1", "u2"))
    ranked = [line.split("\t") for line in (tmp_path / "all.tsv").read_text().splitlines()]
    assert [r[0] for r in ranked] == ["u1"] * 3 + ["u2"] * 2
    assert [r[1] for r in ranked] == ["1", "2", "3", "1", "2"]
    for r in ranked:
        i = next(i for i, (u, _, h) in enumerate(rows) if u == r[0] and h == r[6])
        assert float(r[2]) == pytest.approx(totals[i], abs=1e-5)
    assert ranked[0][6].endswith("end1")  # the skip-gram's choice outweighs 0.5 of score


def test_rescore_names_a_malformed_line(skip_model, tmp_path, capsys):
    nbest = tmp_path / "bad.tsv"
    nbest.write_text("u1\t-1\tthe noun1\nu1 -2 the noun2\n")
    assert main(["rescore", "--model", skip_model, str(nbest)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"snm rescore: error: {nbest}, line 2: expected 'UTTERANCE_ID<TAB>SCORE<TAB>HYPOTHESIS'"
        " (3 tab-separated fields), found 1"]


@pytest.mark.parametrize("layout", ["trie", "small", "hashed"])
def test_a_model_ships_as_one_scoring_directory(tmp_path, layout, capsys):
    """``snm compact --out``: eval, score, query, snm.load and the CTC adapter read it with
    the model and its Parquet tables gone; what needs the tables says where they are."""
    model_dir, test = build_model(tmp_path / "build", "5gram", tagged=False)
    shipped = tmp_path / "shipped"
    assert main(["compact", "--model", str(model_dir), "--layout", layout,
                 "--out", str(shipped)]) == 0
    assert not list(shipped.glob("*.parquet")) and (shipped / "model_card.md").is_file()
    lines = test[:20]
    source = snm.load(str(model_dir))
    if layout != "hashed":
        compile_model(str(model_dir), layout)  # the source in that layout: the same scores
        source = snm.load(str(model_dir))
    expected = [source.score(line) for line in lines]
    capsys.readouterr()
    assert main(["eval", "--model", str(model_dir), str(tmp_path / "build" / "test.txt"),
                 "--json"]) == 0
    expected_eval = capsys.readouterr().out
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    assert main(["compact", "--model", str(model_dir), "--layout", layout,
                 "--out", str(tmp_path / "taken")]) == 2
    assert capsys.readouterr().err.startswith(
        f"snm compact: error: {tmp_path / 'taken'}: exists and is not an empty directory; "
        "give a new directory for --out")
    shutil.rmtree(tmp_path / "build")
    model = snm.load(str(shipped))
    assert [model.score(line) for line in lines] == expected
    (tmp_path / "test.txt").write_text("\n".join(test) + "\n")
    assert main(["eval", "--model", str(shipped), str(tmp_path / "test.txt"), "--json"]) == 0
    assert capsys.readouterr().out == expected_eval
    for command in (["score"], ["query"]):
        assert main(command + ["--model", str(shipped), str(tmp_path / "test.txt")]) == 0
    capsys.readouterr()
    lm = PyctcdecodeLM(str(shipped), alpha=0.5, beta=1.0)
    assert lm.score(lm.get_start_state(), "the")[0] == pytest.approx(
        0.5 * model.score_word(model.begin_state(), "the")[0] * np.log(10) + 1.0)
    assert main(["export-arpa", "--model", str(shipped), "--out", str(tmp_path / "x.arpa")]) == 2
    err = capsys.readouterr().err
    assert "a scoring directory ('snm compact --out' from" in err and len(err.splitlines()) == 1
    assert main(["compact", "--model", str(shipped), "--layout", layout]) == 2
    assert "a scoring directory" in capsys.readouterr().err


def test_the_readme_example_runs(skip_model):
    """README.md's Python example, on a model of the test corpus."""
    readme = open("README.md", encoding="utf-8").read()
    section = readme[readme.index("## In a decoder"):]
    code = section[section.index("```python\n") + 10:section.index("```\n", section.index(
        "```python\n"))]
    exec(code.replace("runs/kernel/model", skip_model), {"print": lambda *a: None})
