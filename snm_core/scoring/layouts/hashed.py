"""The hashed layout of ``compact/``: any model, memory-mapped for scoring.

Two tables of random-looking 64-bit keys (:class:`EntryTable`), sorted, each
with a direct-address index on the keys' top b bits (one to two keys a slot; a
slot's first entry is a uint16 offset from its block of 256 slots).  An entry
is 8 bytes: the 32 key bits after the slot's b (the slot holds the rest) and a
float32 value, so a lookup is one index read and a scan of one cache line that
also holds the value, instead of the ~23 dependent cache misses of a binary
search.  Keys that agree in all b + 32 bits (rare: about n^2 / 2^(b+33) pairs)
are also kept whole in a small overflow table, which settles a match on them.
An absent key matches a present one with probability about 2^-32 a lookup.

* features: key -> M_f* (float32)
* links: :func:`snm_core.text.hashing.link_key` (feature key, word) -> M_fw
  (float32), and, for the unadjusted model, c(w|f) (float32, its own array).
* link collisions: links whose whole 64-bit link keys are equal (about n^2 / 2^65
  pairs: 8% of models have one at 1.8B links) are kept exactly in
  ``link_collisions`` (:data:`COLLISION`: key, feature key, word, M_fw, c(w|f)),
  sorted; their entries in the link table hold :data:`SHARED` (M and c are never
  negative), so scoring settles a match by (feature, word) only there, and a model
  without collisions costs one sign test a found link.

About 13 bytes a link and 10 a feature.  ``compact/`` is a cache of the
Parquet tables: layout 3 (before ``link_collisions``) is read as having none, any
other older layout is refused on load (``snm compact`` builds it again).  The builder is
:mod:`snm_core.scoring.layouts.hashed_build`; ``--layout trie`` and ``small``
store an n-gram model as a trie instead (:mod:`snm_core.scoring.layouts.trie`,
:mod:`snm_core.scoring.layouts.small`).
"""

import os

import numpy as np

from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts.hashed_tables import (CODEBOOK_SIZE, ENTRY, NPY_HEADER_BYTES, OVERFLOW,
                                                    PACKED_ENTRY, EntryTable, index_lengths,
                                                    table_bytes)
from snm_core.scoring.layouts.npy import load_checked, rebuild_remedy
from snm_core.scoring.base import LineScoring, Scores, ratios, suffix_closed
from snm_core.scoring.states import StateBatch, StateScoring
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import SentenceBatch
from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID

COMPACT = "compact"
#: The layout of ``compact/`` (its manifest's ``layout``) written; those of
#: :data:`READ_LAYOUTS` are read (3: no ``link_collisions``), another is refused on load.
COMPACT_LAYOUT = 4
READ_LAYOUTS = (3, 4)
#: The files of layout 3; layout 4 adds ``link_collisions``.
LAYOUT_3_FILES = ("feature_entries", "feature_index", "feature_blocks", "feature_overflow",
                  "link_entries", "link_c", "link_index", "link_blocks", "link_overflow",
                  "seen_words")
COMPACT_FILES = LAYOUT_3_FILES + ("link_collisions",)
#: The link collisions: links sharing a whole link key, by (key, feature, word) ascending.
COLLISION = np.dtype([("key", "<u8"), ("feature", "<u8"), ("word", "<i8"), ("m", "<f4"),
                      ("c", "<f4")])

#: The packed layout (``--layout packed``): the same tables with 3-byte entries, the 16
#: key bits below the slot's and an 8-bit code of the value in the table's own codebook
#: (``{table}_codebook.npy``, :func:`fit_codebook`), and no c(w|f) (no unadjusted model).
#: Its compact manifest's ``layout`` (an older packed layout is refused on load).
PACKED_LAYOUT = "packed-3"
PACKED_FILES = tuple(name for name in COMPACT_FILES if name != "link_c") + (
    "feature_codebook", "link_codebook")
def compact_files(layout):
    """The arrays of a hashed ``compact/`` of ``layout`` (one of :data:`READ_LAYOUTS`, or
    :data:`PACKED_LAYOUT`)."""
    return (LAYOUT_3_FILES if layout == 3 else PACKED_FILES if layout == PACKED_LAYOUT
            else COMPACT_FILES)


def link_key_mask(bits):
    """The mask of a link key's top ``bits`` (64: all).  Fewer are a test's hook
    (``link_key_bits`` in the compact manifest): the build and the lookups both keep only
    those bits, so that many real links collide (and, so that no absent link finds a
    present one by its short key, the build puts every link in ``link_collisions``)."""
    return np.uint64(((1 << bits) - 1) << (64 - bits))


def compact_bytes(features, links, vocabulary_size, packed=False):
    """The bytes of the arrays of a ``compact/`` of ``features`` and ``links`` (without
    link collisions or overflow entries: a few KB at most)."""
    return (table_bytes(features, packed) + table_bytes(links, packed)
            + (0 if packed else links * 4 + NPY_HEADER_BYTES)  # link_c
            + vocabulary_size + 2 * NPY_HEADER_BYTES)  # seen_words, link_collisions


class Model(LineScoring, StateScoring):
    """A trained model loaded for scoring, without Beam.

    Use :func:`snm_core.scoring.compact.load_model`; then :meth:`score_lines`,
    :meth:`evaluate_lines`, :meth:`prob`, :meth:`distribution`, or the sentence and
    state scoring of :class:`snm_core.scoring.states.StateScoring`.

    One model may be shared by threads: after ``__init__`` nothing in it
    changes (its arrays are only read, the vocabulary's lookup table is built
    here, and every call's work arrays are its own), so concurrent calls give
    exactly the scores of one thread (``tests/scoring/test_model_threads.py``).
    """

    def __init__(self, manifest, vocab, arrays, link_key_bits=64):
        from snm_core.scoring.layouts.hashed_kernels import Scorer  # loaded by scoring only
        self.manifest = manifest
        self.vocab = vocab
        vocab.ids([])  # builds its lookup table now: nothing is built lazily while scoring
        self.config = parse_config(manifest["config"])
        self.extractor = FeatureExtractor(self.config, manifest["tags"])
        self.features, self.links = (
            EntryTable(*(arrays[f"{table}_{part}"]
                         for part in ("entries", "index", "blocks", "overflow")),
                       arrays.get(f"{table}_codebook"))
            for table in ("feature", "link"))
        self.link_c = arrays.get("link_c")
        if self.link_c is None:  # packed: no c(w|f)
            self.REPORTS = {"adjusted": "prob"}
        seen = np.asarray(arrays["seen_words"])
        # Unseen words read as <UNK>; the markers keep their ids.
        self.word_map = np.where(seen, np.arange(len(seen)), UNK_ID).astype(np.int32)
        self.word_map[[BOS_ID, EOS_ID]] = [BOS_ID, EOS_ID]
        self.word_map.flags.writeable = False
        # Type id of each n-gram type's suffix one word shorter (same tag), else -1:
        # in a suffix-closed model an n-gram (and its link) is there only if that suffix
        # is, so the lookups of the longer one are skipped where the shorter one failed.
        types = self.extractor.feature_types
        closed = suffix_closed(manifest)
        ngram_type = {(tag, t.adjacent): tag * len(types) + i
                      for tag in range(len(self.extractor.tags))
                      for i, t in enumerate(types) if t.kind == "ngram"}
        self._prerequisite = np.array(
            [ngram_type.get((tag, t.adjacent - 1), -1)
             if t.kind == "ngram" and closed else -1
             for tag in range(len(self.extractor.tags)) for t in types], dtype=np.int64)
        self._init_states(closed)
        collisions = arrays["link_collisions"]
        self._scorer = Scorer(
            self.features, self.links, self.link_c, link_key_mask(link_key_bits),
            [np.ascontiguousarray(collisions[name]) for name in COLLISION.names],
            self._prerequisite, self._windows, self._type_windows, self._salts,
            self._link_length, self._minimal_states, self.state_width)

    def _init_states(self, closed):
        """What :meth:`_advance` needs: the configuration's windows by type, and how long
        a state is.  A state keeps the last ``max_span`` words; in a suffix-closed n-gram
        model (min_n 0), only those after the longest context whose link to the new word
        was found, for a longer context than that one is no feature."""
        generators = self.config.generators()
        self._windows = np.array([(r, s, a) for _, r, s, a in generators],
                                 np.int64).reshape(-1, 3)
        types = np.array([t for t, _, _, _ in generators], np.int64)
        self._type_windows = np.searchsorted(
            types, np.arange(len(self.extractor.feature_types) + 1)).astype(np.int64)
        self._salts = np.ascontiguousarray(self.extractor._salts)
        self.state_width = max(1, self.config.max_span)
        # n-gram length (context words + 1) of each type id's links; 0 for skip-grams.
        self._link_length = np.array([t.adjacent + 1 if t.kind == "ngram" else 0
                                      for _ in self.extractor.tags
                                      for t in self.extractor.feature_types], np.int64)
        lengths = sorted(t.adjacent for t in self.extractor.feature_types)
        self._minimal_states = (self.config.is_ngram_only and closed and lengths[0] == 0)

    def _advance(self, states, target):
        """:meth:`snm_core.scoring.states.StateScoring._advance`: the state's event's
        features looked up and summed as :meth:`score_batch` does, in one compiled call
        (:meth:`hashed_kernels.Scorer.advance`)."""
        prob, matched, words, length = self._scorer.advance(states.words, states.length,
                                                            target)
        return prob, matched, StateBatch(words, length)

    @property
    def scored_words(self):
        """Word ids the model predicts (seen in training), ``</S>`` included, ``<S>`` not."""
        ids = np.flatnonzero(self.word_map == np.arange(len(self.word_map)))
        return ids[ids != BOS_ID]

    def score_batch(self, batch, unadjusted=True):
        """Probabilities of every event of a :class:`SentenceBatch` (ids from ``self.vocab``)."""
        mapped = SentenceBatch(self.word_map[batch.tokens], batch.offsets)
        events = self.extractor.extract(mapped)
        type_bounds = np.searchsorted(events.type, np.arange(self.extractor.num_types + 1))
        sums = self._scorer.event_sums(events.key, events.event, type_bounds, events.target,
                                       events.num_events)
        return Scores(events.target, events.sentence,
                      *ratios(*sums, unadjusted and self.link_c is not None))

    def _probabilities(self, pair_event, row, link_m, link_c, n_events, unadjusted=True):
        """(adjusted, unadjusted) P(target) per event from the pairs' feature rows and link
        values (0 where absent)."""
        present = row >= 0
        return ratios(
            np.bincount(pair_event[present], weights=self.features.value_of(row[present]),
                        minlength=n_events),
            np.bincount(pair_event, weights=link_m, minlength=n_events),
            np.bincount(pair_event, weights=link_c, minlength=n_events),
            np.bincount(pair_event[present], minlength=n_events),
            unadjusted and self.link_c is not None)

    def prob(self, context, word):
        """P(word | context): ``context`` a list of words after ``<S>`` (strings)."""
        return float(self.distribution(context, [word])[0])

    WITHOUT_UNADJUSTED = ("the packed layout keeps no unadjusted model; store it with "
                          "--layout hashed")

    def distribution(self, context, words=None, unadjusted=False):
        """P(w | context) for the given words (default: every word the model predicts)."""
        if unadjusted and self.link_c is None:
            raise SnmInputError(self.WITHOUT_UNADJUSTED)
        ids = self.scored_words if words is None else self.word_map[self.vocab.ids(words)]
        # The sentence is the context alone: its last event, the one predicting </S>,
        # has the whole context (an EOS token appended would be a context word).
        sentence = list(self.word_map[self.vocab.ids(list(context))])
        events = self.extractor.extract(SentenceBatch.from_lists([sentence]))
        keys = events.key[events.event == events.num_events - 1]
        rows = self.features.find(keys)
        keys, rows = keys[rows >= 0], rows[rows >= 0]
        pair_event = np.repeat(np.arange(len(ids)), len(keys))
        link_m, link_c = self._scorer.link_values(np.tile(keys, len(ids)),
                                                  np.repeat(ids, len(keys)))
        probs = self._probabilities(pair_event, np.tile(rows, len(ids)), link_m, link_c,
                                    len(ids))
        return probs[1 if unadjusted else 0]


def load_compact(compact_dir, compact, vocabulary_size, mmap):
    """The arrays of a local ``compact/`` directory, each checked against its manifest
    (dtype, length): a damaged one is an :class:`SnmInputError` naming it.  A layout 3
    directory (built before collisions were kept, so it has none) gets an empty
    ``link_collisions``."""
    n_features, n_links = compact["features"], compact["links"]
    entry = PACKED_ENTRY if compact["layout"] == PACKED_LAYOUT else ENTRY
    expected = {"feature_entries": (entry, (n_features,)),
                "link_entries": (entry, (n_links,)), "link_c": (np.float32, (n_links,)),
                "seen_words": (np.bool_, (vocabulary_size,)),
                "feature_overflow": (OVERFLOW, None), "link_overflow": (OVERFLOW, None),
                "link_collisions": (COLLISION, None),
                "feature_codebook": (np.float32, (CODEBOOK_SIZE,)),
                "link_codebook": (np.float32, (CODEBOOK_SIZE,))}
    for table, n in (("feature", n_features), ("link", n_links)):
        offsets, blocks = index_lengths(n, entry != ENTRY)
        expected[table + "_index"] = (np.uint16, (offsets,))
        expected[table + "_blocks"] = (np.int64, (blocks,))
    remedy = rebuild_remedy(compact_dir, "packed" if compact["layout"] == PACKED_LAYOUT
                            else "hashed")
    arrays = load_checked(compact_dir, compact_files(compact["layout"]), expected, mmap=mmap,
                          remedy=remedy)
    arrays.setdefault("link_collisions", np.zeros(0, COLLISION))
    for table, n in (("feature", n_features), ("link", n_links)):
        rows = arrays[table + "_overflow"]["row"]
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise SnmInputError(f"{os.path.join(compact_dir, table + '_overflow.npy')}: a row "
                                f"outside the table; {remedy}")
    return arrays
