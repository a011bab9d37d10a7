"""An n-gram model as a forward trie: what the trie and small layouts of ``compact/`` share.

For an n-gram configuration every feature is a context (the k words before
the target) and every link (context, word) is an n-gram one word longer, so
the model is one forward trie: entry ``(c, w)`` of order j is the n-gram
whose first j - 1 words are the entry c of order j - 1 (order 0 has one
entry, the empty context) and whose last word is w.  An entry is a link
(its value M_cw) or only a prefix of longer ones (value 0: ``<S>``, or what
pruning removed), and it is the context of the entries of the next order.
Per order, entries are sorted by key ``c * radix + rank(w)``, words ranked
by how often they are predicted.

Scoring follows the trie as KenLM does: the entries found for one event's
target are the next event's contexts, so an event costs one lookup per
order (:func:`trie_loops.event_sums`, C); the layouts differ in the lookup.
"""

import numpy as np

from snm_core.io.errors import SnmInputError
from snm_core.scoring.base import LineScoring, Scores
from snm_core.scoring.layouts import trie_loops
from snm_core.scoring.states import StateBatch, StateScoring
from snm_core.stages import manifests
from snm_core.text.config import parse_config
from snm_core.text.tokenize import SentenceBatch
from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID


def ngram_span(manifest, where, layout):
    """``(min_n, max_n)`` of a model a trie can store; else a one-line error."""
    config = parse_config(manifest["config"])
    lengths = sorted(t.adjacent for t in config.feature_types())
    if not config.is_ngram_only or lengths != list(range(lengths[0], lengths[-1] + 1)):
        raise SnmInputError(f"{where}: the {layout} layout stores n-gram models only (this "
                            "one has skip-gram features); use --layout hashed")
    return lengths[0], lengths[-1]


def order_starts(counts):
    """Where the records of each order start when ``counts`` records (one count per
    position p: order j of tag t at ``p = t * (max_n + 1) + j - 1``) are concatenated:
    order ``p + 1`` at ``[p + 1]``, with a leading 0 for order 0, which has none; int64
    (len(counts) + 2,)."""
    return np.concatenate([[0, 0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def compact_manifest(names, nbytes, manifest, layout, trie, settings):
    """The compact manifest of a trie layout's arrays (``names``, ``nbytes`` of elements in
    all) built from ``trie`` (:class:`snm_core.scoring.layouts.trie_build.ExternalTrie`)."""
    return manifests.Compact(
        layout=layout, files=[n + ".npy" for n in names],
        features=int(manifest.totals["features"]), links=int(manifest.totals["links"]),
        bytes=int(nbytes),
        extra={"entries": int(trie.total), "min_n": trie.min_n, "max_n": trie.max_n,
               "tags": trie.tags, "radix": trie.radix, **settings})


class TrieScoring(LineScoring, StateScoring):
    """Scoring of a model stored as a trie (adjusted probabilities only).

    A subclass sets ``_tables`` (its arrays as :class:`trie_loops.Tables`).  Thread-safe as
    :class:`snm_core.scoring.layouts.hashed.Model` is: nothing changes after loading.
    A state (:mod:`snm_core.scoring.states`) holds the longest suffix of the history
    that is an entry of the trie, and keeps the entries of its contexts, the
    next event's first reads.
    """

    REPORTS = {"adjusted": "prob"}

    def __init__(self, manifest, vocab, compact, seen, rank):
        self.manifest = manifest
        self.compact = compact
        self.vocab = vocab
        vocab.ids([])  # its lookup table, built now rather than while scoring
        self.word_map = np.where(seen, np.arange(len(seen)), UNK_ID).astype(np.int32)
        self.word_map[[BOS_ID, EOS_ID]] = [BOS_ID, EOS_ID]
        self.word_map.flags.writeable = False
        self.rank = rank
        self.state_width = max(1, compact["max_n"])
        # Read once: a decoder's call would otherwise look each up in the manifest.
        self._shape = (int(compact["min_n"]), int(compact["max_n"]), int(compact["tags"]))

    def _null_cache(self, n):
        _, max_n, tags = self._shape
        cache = np.full((n, tags, max_n + 2), -1, np.int64)
        cache[:, :, 0] = 0
        return cache

    def _advance(self, states, target):
        """:meth:`snm_core.scoring.states.StateScoring._advance` by one compiled call,
        :func:`trie_loops.advance`: the new state holds the words of its longest
        context found."""
        target = np.ascontiguousarray(target, np.int32)
        prob, ngram, following, words, length = trie_loops.advance(
            states.cache, states.words, target, self.rank[target], *self._shape, self._tables)
        return prob, ngram, StateBatch(words, length, following)

    @property
    def WITHOUT_UNADJUSTED(self):
        return (f"the {self.compact['layout'].split('-')[0]} layout keeps no unadjusted "
                "model; store it with --layout hashed")

    @property
    def scored_words(self):
        """Word ids the model predicts (seen in training), ``</S>`` included, ``<S>`` not."""
        ids = np.flatnonzero(self.word_map == np.arange(len(self.word_map)))
        return ids[ids != BOS_ID]

    def score_batch(self, batch, unadjusted=False):
        """Probabilities of every event of a :class:`SentenceBatch` (ids from ``self.vocab``)."""
        mapped = self.word_map[batch.tokens]
        offsets = np.asarray(batch.offsets, dtype=np.int64)
        numerator, denominator = trie_loops.event_sums(
            self.rank[mapped], offsets, self.rank[BOS_ID], self.rank[EOS_ID],
            self.compact["min_n"], self.compact["max_n"], self.compact["tags"], self._tables)
        lengths = np.diff(offsets) + 1
        sentence = np.repeat(np.arange(len(lengths), dtype=np.int32), lengths)
        target = np.full(len(sentence), EOS_ID, dtype=np.int32)
        target[np.arange(len(mapped)) + np.repeat(np.arange(len(lengths)), lengths - 1)] = mapped
        with np.errstate(divide="ignore", invalid="ignore"):
            return Scores(target, sentence, numerator / denominator)

    def prob(self, context, word):
        """P(word | context): ``context`` a list of words after ``<S>`` (strings)."""
        return float(self.distribution(context, [word])[0])

    def distribution(self, context, words=None, unadjusted=False):
        """P(w | context) for the given words (default: every word the model predicts)."""
        if unadjusted:
            raise SnmInputError(self.WITHOUT_UNADJUSTED)
        ids = self.scored_words if words is None else self.word_map[self.vocab.ids(words)]
        history = self.word_map[self.vocab.ids(list(context))]
        # One sentence "context w" per word w; its event predicting w is the one wanted.
        n, width = len(ids), len(history) + 1
        tokens = np.empty((n, width), dtype=np.int32)
        tokens[:, :-1] = history
        tokens[:, -1] = ids
        scores = self.score_batch(SentenceBatch(tokens.ravel(),
                                                np.arange(n + 1, dtype=np.int64) * width))
        return scores.prob[np.arange(n) * (width + 1) + width - 1]
