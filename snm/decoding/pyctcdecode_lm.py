"""Any SNM (skip-grams included) or log-linear model inside pyctcdecode's CTC beam search.

:class:`PyctcdecodeLM` is a :class:`pyctcdecode.language_model.AbstractLanguageModel`:
give it to :class:`pyctcdecode.BeamSearchDecoderCTC` in place of pyctcdecode's
KenLM wrapper, with the same shallow-fusion score: for each completed word,
``alpha * ln P(word | state) + beta``, ``unk_score_offset`` (log10) added for a
word the model does not know, and ``ln P(</S>)`` after the last word.

Example (``labels`` the acoustic model's output symbols, ``log_probs`` its (frames,
labels) log-probabilities)::

    import snm
    from pyctcdecode import Alphabet, BeamSearchDecoderCTC
    from snm.decoding import PyctcdecodeLM

    lm = PyctcdecodeLM(snm.load("runs/kernel-skip/model"), alpha=0.5, beta=1.0)
    decoder = BeamSearchDecoderCTC(Alphabet.build_alphabet(labels), lm)
    decoder.decode(log_probs)

pyctcdecode is not a dependency of snm itself: ``pip install pyctcdecode`` (or the
``decoding`` extra).  torchaudio's ``ctc_decoder`` is flashlight's:
:class:`snm.decoding.FlashlightLM`.
"""

import math

from pyctcdecode.constants import AVG_TOKEN_LEN, DEFAULT_UNK_LOGP_OFFSET
from pyctcdecode.language_model import AbstractLanguageModel

import snm

#: log10 -> natural log, as pyctcdecode's KenLM wrapper converts.
LN_10 = math.log(10.0)


class PyctcdecodeLM(AbstractLanguageModel):
    """A model scoring the words of pyctcdecode's beams.

    Parameters
    ----------
    model : model or str
        A model from :func:`snm.load`, or a model directory to load.
    alpha : float, default 0.5
        Weight of the language model's natural-log probability.
    beta : float, default 1.0
        Score added for each word (a length bonus).
    unk_score_offset : float, default -10.0
        log10 score added for a word outside the model's vocabulary (or never seen
        in training), and, scaled as pyctcdecode does, for a partial word that
        begins no known word.
    score_boundary : bool, default True
        Start each utterance after ``<S>`` and score ``</S>`` after its last word
        (else start from no context and score no end).

    Attributes
    ----------
    model : the scorer
    unigrams : frozenset of str
        The words the model predicts.
    """

    def __init__(self, model, alpha=0.5, beta=1.0, unk_score_offset=DEFAULT_UNK_LOGP_OFFSET,
                 score_boundary=True):
        self.model = snm.load(model) if isinstance(model, str) else model
        self.alpha, self.beta = alpha, beta
        self.unk_score_offset, self.score_boundary = unk_score_offset, score_boundary
        words = self.model.vocab.words
        self.unigrams = frozenset(words[i] for i in self.model.scored_words
                                  if words[i] not in ("</S>", "<UNK>"))
        # Every beginning of a known word (pyctcdecode's wrapper walks a character trie
        # for each partial word; a set answers in one hash lookup).
        self._prefixes = frozenset(word[:end] for word in self.unigrams
                                   for end in range(len(word) + 1))
        self._ids = {}  # word -> its model id, as StateScoring.step takes it

    @property
    def order(self):
        """The longest n-gram the model's states reach (pyctcdecode prunes beam history
        to it)."""
        return self.model.state_width + 1

    def get_start_state(self):
        return self.model.begin_state() if self.score_boundary else self.model.null_state()

    def score_partial_token(self, partial_token):
        """``unk_score_offset`` if ``partial_token`` begins no known word (scaled up for a
        long one), else 0: pyctcdecode's rule."""
        unknown = partial_token not in self._prefixes
        score = self.unk_score_offset * unknown
        if len(partial_token) > AVG_TOKEN_LEN:
            score = score * len(partial_token) / AVG_TOKEN_LEN
        return score

    def score(self, prev_state, word, is_last_word=False):
        """``(alpha * ln P(word | prev_state) + beta, the state after word)``, with
        ``ln P(</S>)`` added when ``is_last_word``.  An empty ``word`` (an utterance
        that ends after a space) scores only the end."""
        log10, state = 0.0, prev_state
        if word:
            target = self._ids.get(word)
            if target is None:
                target = self._ids[word] = self.model._target_ids([word])
            log10, _, state = self.model.step(prev_state, target)
            if word not in self.unigrams:
                log10 += self.unk_score_offset
        if is_last_word and self.score_boundary:
            log10 += self.model.end_score(state)
        return self.alpha * log10 * LN_10 + (self.beta if word else 0.0), state

    def reset_params(self, **params):
        """Set ``alpha``, ``beta``, ``unk_score_offset`` or ``score_boundary`` (what
        ``BeamSearchDecoderCTC.reset_params`` passes)."""
        for name in ("alpha", "beta", "unk_score_offset", "score_boundary"):
            if params.get(name) is not None:
                setattr(self, name, params[name])
