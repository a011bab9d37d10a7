"""Models inside decoders: pyctcdecode's CTC beam search driven by an SNM
(``snm.decoding.PyctcdecodeLM``), ``snm query`` through a pipe, ``snm rescore``.

Oracles: the sentence each utterance was made from (the decoder must find it where
only the language model can), the model's own sentence scores through the API
(for the rescoring arithmetic), and text written by hand.
"""

import numpy as np
import pytest
from test_model import build_model

import snm

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
