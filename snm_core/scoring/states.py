"""Left-to-right scoring with states, for decoders: what every model family shares.

A decoder extends hypotheses one word at a time and wants P(word | what came
before) without rescoring the prefix.  KenLM's ``State`` answers that for an
n-gram model: the longest suffix of the history that is a context of the model.
Here a :class:`State` holds the words of the history the model can still use:

* an n-gram model (every layout, and the log-linear family): the longest suffix
  of the history that the model holds as a context, so that hypotheses that
  differ only in older words have equal states (KenLM's state minimisation);
* a model with skip-gram features (or one pruned so that a longer n-gram may
  outlive a shorter one): the last words its longest feature reaches.

States are hashable, and equal exactly when they hold the same words, so a
beam may merge the hypotheses whose states are equal.  A scorer (the hashed
:class:`~snm_core.scoring.layouts.hashed.Model`, the trie layouts'
:class:`~snm_core.scoring.layouts.ngram_trie.TrieScoring`, the log-linear
:class:`~snm_core.loglinear.directory.LogLinearScorer`) inherits
:class:`StateScoring` and implements ``_advance`` on a :class:`StateBatch`:
the states of many hypotheses and one word for each, scored in one call of
its compiled loop.  The probabilities are those of ``snm eval`` (and of
:meth:`~snm_core.scoring.base.LineScoring.score_lines`), event for event.
"""

import collections
import dataclasses
import math

import numpy as np

from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID

#: Up to this many words are looked up one by one in a dictionary (a decoder's single
#: words), more through the vocabulary's vectorised lookup.
FEW_WORDS = 16


#: KenLM's spellings of the sentence markers, read by the methods that carry KenLM's names.
KENLM_MARKERS = {"</s>": "</S>", "<s>": "<S>", "<unk>": "<UNK>"}

#: What :meth:`StateScoring.BaseFullScore` returns (KenLM's ``FullScoreReturn``).
FullScore = collections.namedtuple("FullScore", ["log_prob", "ngram_length", "oov"])


class State:
    """The part of a history a model can still use (KenLM's ``State``).

    Made by :meth:`StateScoring.begin_state`, :meth:`StateScoring.null_state`
    and :meth:`StateScoring.score_word`.  Hashable; equal when the words are
    equal, whatever the history before them.

    Attributes
    ----------
    words : tuple of int
        Word ids (the model's vocabulary; words training never saw read as
        ``<UNK>``), oldest first; ``<S>`` (id 0) first when the history starts
        the sentence.
    """

    __slots__ = ("words", "_cache", "_row")

    def __init__(self, words=(), cache=None, row=None):
        self.words = tuple(words)
        self._cache = cache  # a layout's lookups of these words (the trie's entries)
        self._row = row  # the words as a row of a StateBatch, when made from one

    def _assign(self, other):
        """Become ``other`` (what KenLM's ``...Write`` methods do to a ``kenlm.State``)."""
        self.words, self._cache, self._row = other.words, other._cache, other._row

    def __eq__(self, other):
        return isinstance(other, State) and self.words == other.words

    def __hash__(self):
        return hash(self.words)

    def __len__(self):
        return len(self.words)

    def __repr__(self):
        return f"State({self.words})"


@dataclasses.dataclass
class StateBatch:
    """Many states as arrays: what the compiled loops take and give.

    Attributes
    ----------
    words : ndarray of int32, shape (n, width)
        Each state's words right-aligned (the newest last), -1 before them;
        ``width`` is the model's :attr:`StateScoring.state_width`.
    length : ndarray of int64, shape (n,)
        How many words each state holds.
    cache : ndarray or None
        A layout's per-state lookups (the trie layouts: the entries of the
        state's contexts, shape (n, tags, max_n + 2)); None for the others.
    """

    words: np.ndarray
    length: np.ndarray
    cache: np.ndarray = None

    def __len__(self):
        return len(self.length)

    def __getitem__(self, i):
        row = self.words[i]
        return State(row[len(row) - self.length[i]:].tolist(),
                     None if self.cache is None else self.cache[i], row)

    def states(self):
        """The states as a list of :class:`State`."""
        return [self[i] for i in range(len(self))]

    def take(self, rows):
        """The states of ``rows`` (an index array), as a new batch."""
        return StateBatch(self.words[rows], self.length[rows],
                          None if self.cache is None else self.cache[rows])

    @classmethod
    def of(cls, states, width):
        """A batch of a sequence of :class:`State` (of one model)."""
        n = len(states)
        if n == 1 and states[0]._row is not None:  # a decoder's one state: no copying
            state = states[0]
            return cls(state._row[None, :], np.array([len(state.words)], np.int64),
                       None if state._cache is None else state._cache[None])
        words = np.full((n, width), -1, np.int32)
        length = np.empty(n, np.int64)
        for i, state in enumerate(states):
            k = len(state.words)
            length[i] = k
            if k:
                words[i, width - k:] = state.words
        caches = [s._cache for s in states]
        cache = None if not n or caches[0] is None else np.stack(caches)
        return cls(words, length, cache)


class StateScoring:
    """Sentence and state scoring (KenLM's ``score``, ``full_scores``, ``BaseScore``) for a
    scorer with ``vocab``, ``state_width`` and ``_advance``.

    Log-probabilities are base 10, as KenLM's.  A sentence is a string of
    whitespace-separated words; ``<S>`` and ``</S>`` inside it read as
    ``<UNK>``, as ``snm eval`` reads them.

    Examples
    --------
    >>> import snm                                      # doctest: +SKIP
    >>> model = snm.load("runs/kernel/model")           # doctest: +SKIP
    >>> state = model.begin_state()                     # doctest: +SKIP
    >>> for word in "the kernel".split():               # doctest: +SKIP
    ...     log10p, state = model.score_word(state, word)
    >>> total = log10p + model.end_score(state)         # doctest: +SKIP
    """

    #: Subclasses: how many words a state may hold (the longest context of the model).
    state_width = 0

    def _advance(self, states, target):
        """Score ``target`` (int32 ids, mapped) after each of ``states`` (a
        :class:`StateBatch`); returns ``(probability float64 (n,), n-gram length int64
        (n,), the states after it)``."""
        raise NotImplementedError

    def _start(self, n, bos):
        """``n`` states of an empty history: the sentence's start (``<S>``) or no context."""
        null = StateBatch(np.full((n, self.state_width), -1, np.int32), np.zeros(n, np.int64),
                          self._null_cache(n))
        if not bos:
            return null
        # <S> is never predicted, so the state after it is set here, not by what was found.
        start = self._advance(null, np.full(n, BOS_ID, np.int32))[2]
        start.words[:] = -1
        start.words[:, -1] = BOS_ID
        start.length[:] = 1
        return start

    def _null_cache(self, n):
        return None

    def _target_ids(self, words):
        """Model ids of words (strings, or vocabulary ids): unseen words read as ``<UNK>``."""
        if isinstance(words, np.ndarray) and words.dtype.kind in "iu":
            ids = words.astype(np.int32)
        else:  # "</S>" ends the sentence; "<S>" is never predicted: a word like any unknown
            words = list(words)
            if len(words) <= FEW_WORDS:  # a dictionary beats building an Arrow array
                ids = np.array([self.vocab.id(w) or UNK_ID for w in words],  # 0 is <S>
                               np.int32)
            else:
                ids = self.vocab.ids(words).astype(np.int32)
                ids[ids == BOS_ID] = UNK_ID
        word_map = getattr(self, "word_map", None)
        return ids if word_map is None else word_map[ids]

    def begin_state(self):
        """The state at the start of a sentence (after ``<S>``; KenLM's
        ``BeginSentenceWrite``)."""
        return self._start(1, True)[0]

    def null_state(self):
        """The state of no context at all (KenLM's ``NullContextWrite``)."""
        return self._start(1, False)[0]

    def score_words(self, states, words):
        """Score one word after each of many states, in one compiled call (a beam step).

        Parameters
        ----------
        states : StateBatch, or sequence of State, length n
        words : sequence of str, or ndarray of int (vocabulary ids), length n
            ``</S>`` ends the sentence (its score is :meth:`end_score`'s); ``<S>``
            reads as ``<UNK>``.

        Returns
        -------
        log10_prob : ndarray of float64, shape (n,)
            log10 P(word | state); ``-inf`` where the model gives the word no
            probability (it never saw ``<UNK>``).
        states : StateBatch, or list of State (as given)
            The state after each word.
        """
        batch = states if isinstance(states, StateBatch) else StateBatch.of(
            list(states), self.state_width)
        target = self._target_ids(words)
        if len(target) != len(batch):
            raise ValueError(f"{len(batch)} states and {len(target)} words")
        prob, _, after = self._advance(batch, target)
        with np.errstate(divide="ignore"):
            log10 = np.log10(prob)
        return log10, after if isinstance(states, StateBatch) else after.states()

    def score_word(self, state, word):
        """``(log10 P(word | state), the state after it)``: KenLM's ``BaseScore``."""
        log10, _, after = self.step(state, self._target_ids([word]))
        return log10, after

    def step(self, state, target):
        """One word after one state: ``(log10 probability, n-gram length, the state
        after it)``, ``target`` an int32 array of the word's model id (as ``_target_ids``
        gives it; a decoder adapter converts its words once)."""
        prob, length, after = self._advance(StateBatch.of([state], self.state_width), target)
        p = prob[0]
        return (float(np.log10(p)) if p > 0 else -math.inf), int(length[0]), after[0]

    def end_score(self, state):
        """log10 P(``</S>`` | state): the end of the sentence."""
        return self.score_word(state, "</S>")[0]

    # --- kenlm.Model's spellings, so that a script written for KenLM runs unchanged -------

    @property
    def order(self):
        """KenLM's ``order``: one more than the words a state may hold (5 for a 5-gram;
        for a skip-gram model, one more than the reach of its longest feature)."""
        return self.state_width + 1

    def __contains__(self, word):
        """``word in model``: the model predicts ``word`` (it is in the vocabulary and
        training saw it), as KenLM's ``in`` tells a word from ``<unk>``."""
        found = self.vocab.id(word)  # <UNK>'s id for a word outside the vocabulary
        if found in (BOS_ID, EOS_ID, UNK_ID):
            return False
        word_map = getattr(self, "word_map", None)
        return word_map is None or int(word_map[found]) != UNK_ID

    def BeginSentenceWrite(self, state):  # noqa: N802 (KenLM's name)
        """KenLM's ``BeginSentenceWrite``: make ``state`` (a :class:`State`) the start of
        a sentence."""
        state._assign(self.begin_state())

    def NullContextWrite(self, state):  # noqa: N802
        """KenLM's ``NullContextWrite``: make ``state`` the state of no context."""
        state._assign(self.null_state())

    def BaseScore(self, in_state, word, out_state):  # noqa: N802
        """KenLM's ``BaseScore``: log10 P(word | in_state), the state after it written to
        ``out_state``.  KenLM's markers are read as such: ``</s>`` ends the sentence."""
        return self.BaseFullScore(in_state, word, out_state)[0]

    def BaseFullScore(self, in_state, word, out_state):  # noqa: N802
        """KenLM's ``BaseFullScore``: ``(log10 probability, n-gram length, oov)``, the
        state after the word written to ``out_state``."""
        target = self._target_ids([KENLM_MARKERS.get(word, word)])
        log10, length, after = self.step(in_state, target)
        out_state._assign(after)
        return FullScore(log10, length, bool(target[0] == UNK_ID))

    def sentence_ids(self, sentence):
        """Model ids of the words of a sentence (a string), as ``snm eval`` reads them:
        ``<S>`` and ``</S>`` inside it, and unseen words, read as ``<UNK>``."""
        ids = self._target_ids(sentence.split())
        ids[ids == EOS_ID] = UNK_ID  # as tokenize reads them
        return ids

    def full_scores(self, sentence, bos=True, eos=True):
        """Per-word scores of a sentence, as KenLM's ``full_scores``.

        Parameters
        ----------
        sentence : str
            Words separated by whitespace.
        bos : bool, default True
            Start from ``<S>`` (else from no context).
        eos : bool, default True
            Score ``</S>`` after the last word.

        Yields
        ------
        (log10_prob, ngram_length, oov) : (float, int, bool)
            For each word (and ``</S>``): its log10 probability, the length of
            the longest n-gram ending in it that the model holds (its context
            plus the word; 0 if none, so then the probability is 0), and
            whether the word reads as ``<UNK>`` (outside the vocabulary, or
            never seen in training).
        """
        target = self.sentence_ids(sentence)
        if eos:
            target = np.append(target, np.int32(EOS_ID))
        state = self._start(1, bos)
        for word in target:
            prob, length, state = self._advance(state, np.array([word], np.int32))
            with np.errstate(divide="ignore"):
                yield float(np.log10(prob[0])), int(length[0]), bool(word == UNK_ID)

    def score(self, sentence, bos=True, eos=True):
        """log10 probability of a sentence (``</S>`` included when ``eos``), as KenLM's
        ``score``."""
        return float(sum(log10 for log10, _, _ in self.full_scores(sentence, bos, eos)))

    def perplexity(self, sentence):
        """Perplexity of one sentence: 10 ** (-score / (words + 1)), ``</S>`` counted."""
        words = len(sentence.split()) + 1
        return math.pow(10.0, -self.score(sentence) / words)
