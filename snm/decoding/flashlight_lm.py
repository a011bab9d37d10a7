"""Any SNM (skip-grams included) or log-linear model as flashlight's language model.

:class:`FlashlightLM` is a ``flashlight.lib.text.decoder.LM``: give it to
flashlight's ``LexiconDecoder`` (a word model over a lexicon) or
``LexiconFreeDecoder`` (a model whose words are the acoustic model's tokens, a
character model say) in place of flashlight's ``KenLM``.  torchaudio's
``ctc_decoder`` is flashlight's decoder, and its ``CTCDecoderLM`` is this ``LM``
class.  Scores are log10 probabilities, as flashlight's ``KenLM`` gives, so a
``lm_weight`` tuned for one suits the other.

Example (``tokens`` the acoustic model's output symbols, blank first, ``|`` the word
boundary; ``lexicon`` each word's spelling in them; ``emissions`` a C-contiguous
float32 (frames, tokens) array of log-probabilities)::

    import snm
    from flashlight.lib.text.decoder import (CriterionType, LexiconDecoder,
                                             LexiconDecoderOptions, SmearingMode, Trie)
    from snm.decoding import FlashlightLM

    words = sorted(lexicon) + ["<unk>"]
    lm = FlashlightLM(snm.load("runs/kernel-skip/model"), words)
    trie = Trie(len(tokens), tokens.index("|"))
    start = lm.start(False)
    for i, word in enumerate(words[:-1]):
        trie.insert([tokens.index(c) for c in lexicon[word]], i, lm.score(start, i)[1])
    trie.smear(SmearingMode.MAX)
    options = LexiconDecoderOptions(beam_size=50, beam_size_token=len(tokens),
                                    beam_threshold=25.0, lm_weight=0.8, word_score=0.0,
                                    unk_score=float("-inf"), sil_score=0.0,
                                    log_add=False, criterion_type=CriterionType.CTC)
    decoder = LexiconDecoder(options, trie, lm, tokens.index("|"), 0, len(words) - 1,
                             [], False)
    best = decoder.decode(emissions.ctypes.data, *emissions.shape)[0]
    text = " ".join(words[i] for i in best.words if i >= 0)

flashlight merges two hypotheses when their ``LMState`` is the same object: this
adapter gives equal SNM states (:class:`snm.State`) one ``LMState``, so the
decoder merges exactly the histories the model cannot tell apart.  Within an
utterance (from one ``start`` to the next) each (state, word) is scored once.

flashlight calls its LM for every hypothesis a frame, from C++; a call into Python
costs more than KenLM's whole answer.  So a model in the hashed or packed layout is
answered by a C++ LM (``snm/decoding/flashlight_native.cpp``, built with the package
where a C++ compiler is found) that calls the layout's C loop without Python; other
layouts (trie, small, log-linear) by this Python class.  ``FlashlightLM.compiled(lm)``
says which an adapter is.

flashlight-text is not a dependency of snm itself: ``pip install flashlight-text``.
"""

import numpy as np
from flashlight.lib.text.decoder import LM, LMState

import snm
from snm_core.scoring.states import StateBatch
from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID

try:  # the C++ LM: absent where the package was built without a C++ compiler
    from snm.decoding._flashlight import SnmLM as _CompiledLM
except ImportError:
    _CompiledLM = None

#: Spellings that flashlight's lexicons and KenLM use for what an SNM calls
#: ``<UNK>`` and ``</S>``.
MARKERS = {"<unk>": "<UNK>", "</s>": "</S>"}


def target_ids(model, words):
    """The model's id of each of flashlight's word indices (int32)."""
    if hasattr(words, "entry_size"):  # a flashlight Dictionary
        words = [words.get_entry(i) for i in range(words.entry_size())]
    ids = model.vocab.ids([MARKERS.get(w, w) for w in words])
    ids[ids == BOS_ID] = UNK_ID  # <S> is never predicted
    return model._target_ids(ids.astype(np.int32))


class FlashlightLM(LM):
    """An SNM scoring the words of flashlight's beams.

    Parameters
    ----------
    model : model or str
        A model from :func:`snm.load`, or a model directory to load.
    words : sequence of str, or flashlight ``Dictionary``
        What flashlight's word index means: ``words[i]`` is the word the decoder
        asks about with index ``i`` (the lexicon's word dictionary for a
        ``LexiconDecoder``, the token dictionary for a ``LexiconFreeDecoder``).
        Words the model does not know score as its ``<UNK>``; ``<unk>`` and
        ``</s>`` are read as ``<UNK>`` and ``</S>``.
    score_boundary : bool, default True
        ``start(False)`` begins after ``<S>`` (else from no context), and ``finish``
        scores ``</S>`` (else 0).
    compiled : bool or None, default None
        None: the C++ LM where the model allows it (hashed, packed), else this class;
        True: the C++ LM or ``ValueError``; False: this class.

    Attributes
    ----------
    model : the scorer
    """

    def __new__(cls, model, words, score_boundary=True, compiled=None):
        model = snm.load(model) if isinstance(model, str) else model
        possible = _CompiledLM is not None and hasattr(model, "_scorer")  # hashed, packed
        if compiled and not possible:
            raise ValueError("a compiled FlashlightLM needs a hashed or packed model and "
                             "snm built with a C++ compiler (snm.decoding._flashlight)")
        if possible and compiled is not False:
            return CompiledFlashlightLM(model, target_ids(model, words), score_boundary)
        lm = super().__new__(cls)
        lm.model = model  # loaded once, here: __init__ is given the path again
        return lm

    def __init__(self, model, words, score_boundary=True, compiled=None):
        LM.__init__(self)
        self._targets = target_ids(self.model, words)
        self.score_boundary = score_boundary
        self._reset()

    @staticmethod
    def compiled(lm):
        """Whether flashlight calls ``lm`` (a :class:`FlashlightLM`) without Python."""
        return _CompiledLM is not None and isinstance(lm, _CompiledLM)

    def _reset(self):
        self._ours = {}  # LMState -> snm State
        self._theirs = {}  # snm State -> LMState
        self._scored = {}  # (LMState, word index) -> (LMState, log10 probability)

    def _state(self, ours):
        """The one ``LMState`` of the SNM state ``ours``."""
        theirs = self._theirs.get(ours)
        if theirs is None:
            theirs = self._theirs[ours] = LMState()
            self._ours[theirs] = ours
        return theirs

    def start(self, start_with_nothing):
        """The state an utterance starts in: after ``<S>``, or of no context when
        ``start_with_nothing`` (or without ``score_boundary``).  Forgets the last
        utterance's states."""
        self._reset()
        nothing = start_with_nothing or not self.score_boundary
        return self._state(self.model.null_state() if nothing else self.model.begin_state())

    def score(self, state, usr_token_idx):
        """``(the state after the word, log10 P(word | state))`` for flashlight's word
        index ``usr_token_idx``."""
        key = (state, usr_token_idx)
        found = self._scored.get(key)
        if found is None:  # the word's model id was found once, at construction
            log10, _, after = self.model.step(self._ours[state],
                                              self._targets[usr_token_idx:usr_token_idx + 1])
            found = self._scored[key] = (self._state(after), log10)
        return found

    def finish(self, state):
        """``(the state after </S>, log10 P(</S> | state))``; 0 without
        ``score_boundary``."""
        if not self.score_boundary:
            return state, 0.0
        log10, after = self.model.score_word(self._ours[state], "</S>")
        return self._state(after), log10


if _CompiledLM is not None:
    class CompiledFlashlightLM(_CompiledLM):
        """:class:`FlashlightLM` of a hashed or packed model: the C++ LM, which calls the
        layout's C loops of one state (``Scorer.state_loops``) with the model's ``Scorer``."""

        def __init__(self, model, targets, score_boundary=True):
            def row(state):
                batch = StateBatch.of([state], model.state_width)
                return (np.ascontiguousarray(batch.words[0], np.int32).tobytes(),
                        int(batch.length[0]))

            end = model._target_ids(np.array([EOS_ID], np.int32))
            scorer, loops, pairs = model._scorer.state_loops()
            _CompiledLM.__init__(
                self, scorer, loops, model.state_width, pairs,
                np.ascontiguousarray(targets, np.int32).tobytes(), *row(model.begin_state()),
                *row(model.null_state()), int(end[0]), bool(score_boundary), model)
            self.model = model
            self.score_boundary = score_boundary
