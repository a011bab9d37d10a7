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

import math
import os

import numpy as np

from snm_core.fit import kernels
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts.npy import NpyWriter, load_checked, rebuild_remedy
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
#: Slots a block of an entry table's index: a slot's first entry is its block's first
#: (int64) plus the slot's uint16 offset in the block (a block holds ~380 entries).
SLOT_BLOCK_BITS = 8
#: An entry of a compact table: the 32 key bits below the slot bits, and the value.
ENTRY = np.dtype([("remainder", "<u4"), ("value", "<f4")])
#: The overflow table: whole keys (ascending) whose entries share all stored bits.
OVERFLOW = np.dtype([("key", "<u8"), ("row", "<i8")])
#: The link collisions: links sharing a whole link key, by (key, feature, word) ascending.
COLLISION = np.dtype([("key", "<u8"), ("feature", "<u8"), ("word", "<i8"), ("m", "<f4"),
                      ("c", "<f4")])
#: M_fw and c(w|f) of the link entries whose key several links share: look in
#: ``link_collisions``.
SHARED = np.float32(-1.0)

#: The packed layout (``--layout packed``): the same tables with 3-byte entries, the 16
#: key bits below the slot's and an 8-bit code of the value in the table's own codebook
#: (``{table}_codebook.npy``, :func:`fit_codebook`), and no c(w|f) (no unadjusted model).
#: Its compact manifest's ``layout`` (an older packed layout is refused on load).
PACKED_LAYOUT = "packed-3"
PACKED_ENTRY = np.dtype([("remainder", "<u2"), ("value", "u1")])
PACKED_FILES = tuple(name for name in COMPACT_FILES if name != "link_c") + (
    "feature_codebook", "link_codebook")
#: A packed table's codebook: code 0 is 0, code 255 :data:`SHARED`, codes 1 to 254 the
#: centres of the values' log2, fitted by :data:`CODEBOOK_ROUNDS` rounds of Lloyd's
#: algorithm on at most :data:`CODEBOOK_SAMPLE` of them.
CODEBOOK_SIZE = 256
CODEBOOK_ROUNDS = 40
CODEBOOK_SAMPLE = 1 << 20


def fit_codebook(values):
    """A packed table's codebook (float32, :data:`CODEBOOK_SIZE`) for ``values`` (a
    sample of its values: every k-th of a table's first buckets)."""
    values = np.asarray(values, np.float64)
    logs = np.log2(values[values > 0])
    if len(logs) > CODEBOOK_SAMPLE:
        logs = logs[::-(-len(logs) // CODEBOOK_SAMPLE)]
    levels = CODEBOOK_SIZE - 2
    distinct = np.unique(logs)
    if len(distinct) <= levels:
        centres = distinct
    else:
        # Started where squared error is least for a smooth density p (centres spread
        # as p^(1/3)), then Lloyd's rounds.
        counts, edges = np.histogram(logs, bins=16 * levels)
        spread = np.cumsum(np.cbrt(counts))
        centres = np.interp((np.arange(levels) + 0.5) / levels * spread[-1], spread,
                            (edges[1:] + edges[:-1]) / 2)
        for _ in range(CODEBOOK_ROUNDS):
            nearest = np.searchsorted((centres[1:] + centres[:-1]) / 2, logs)
            sums = np.bincount(nearest, logs, levels)
            counts = np.bincount(nearest, minlength=levels)
            centres = np.where(counts > 0, sums / np.maximum(counts, 1), centres)
            # The extremes kept exact: a few values far out are not read as the mean of
            # their cell.
            centres[0], centres[-1] = distinct[0], distinct[-1]
        centres = np.unique(centres)
    codebook = np.ones(CODEBOOK_SIZE, np.float32)  # unused codes: the last centre, or 1
    codebook[0] = 0.0
    codebook[1:1 + len(centres)] = np.exp2(centres)
    if len(centres):
        codebook[1 + len(centres):-1] = codebook[len(centres)]
    codebook[-1] = SHARED
    return codebook


def value_codes(values, codebook):
    """Each value's code (uint8) in a packed table's ``codebook`` (:func:`fit_codebook`):
    the nearest centre in log2; 0 for 0, the last for :data:`SHARED`."""
    values = np.asarray(values, np.float64)
    with np.errstate(divide="ignore"):
        logs = np.log2(np.where(values > 0, values, 1.0))
    centres = np.log2(codebook[1:-1].astype(np.float64))
    codes = (1 + np.searchsorted((centres[1:] + centres[:-1]) / 2, logs)).astype(np.uint8)
    codes[values <= 0] = 0
    codes[values == SHARED] = CODEBOOK_SIZE - 1
    return codes


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


# --- compact storage ----------------------------------------------------------------------

class KeyIndex:
    """Lookup in a sorted array of uniformly spread uint64 keys.

    ``start[b]`` is the first position whose key has top bits ``b``; with one to
    two keys per slot, finding a key reads ``start`` twice and compares a key
    or two: about two cache misses, where a binary search takes ~23 dependent
    ones.  The index costs 2-4 bytes a key.

    Parameters
    ----------
    keys : uint64 array, sorted, distinct
    start : int array (2**bits + 1,), optional (built when absent)

    Examples
    --------
    >>> idx = KeyIndex(np.array([3, 2**63, 2**64 - 1], dtype=np.uint64))
    >>> idx.find(np.array([2**63, 5], dtype=np.uint64)).tolist()
    [1, -1]
    """

    def __init__(self, keys, start=None):
        self.keys = keys
        if start is None:
            writer = KeyIndexWriter(len(keys))
            writer.add(keys)
            start = writer.finish()
        self.start = start
        self.shift = np.uint64(64 - int(round(math.log2(len(start) - 1))))

    def find(self, queries):
        """Position of each query key, -1 where absent."""
        from snm_core.scoring.layouts import hashed_kernels  # loaded by scoring only
        return hashed_kernels.find(self.keys, self.start, self.shift,
                            np.ascontiguousarray(queries, dtype=np.uint64))


class KeyIndexWriter:
    """The ``start`` array of a :class:`KeyIndex`, built from its sorted keys a chunk at a time.

    Parameters
    ----------
    n : int, the number of keys in all
    out : NpyWriter or SlotIndexWriter, optional: the entries are given there as
        they are filled, instead of kept (``finish`` then returns None)
    bits : int, optional: slot bits (default :func:`index_bits`)
    dtype : optional: the starts' type (default int32 where the keys' number fits)
    """

    def __init__(self, n, out=None, bits=None, dtype=None):
        self.n, self.out = n, out
        self.bits = index_bits(n) if bits is None else bits
        self.dtype = dtype or (np.int32 if n < 2 ** 31 else np.int64)
        self.done = self.next_slot = 0
        self.parts = []

    def add(self, keys):
        start, self.next_slot = kernels.key_index_chunk(keys, self.bits, self.done,
                                                        self.next_slot)
        self._emit(start)
        self.done += len(keys)

    def finish(self):
        self._emit(np.full((1 << self.bits) + 1 - self.next_slot, self.n, np.int64))
        if self.out is None:
            return np.concatenate(self.parts)

    def _emit(self, start):
        start = start.astype(self.dtype, copy=False)
        if self.out is None:
            self.parts.append(start)
        else:
            self.out.append(start)


def index_bits(n):
    """Top-bit slots of a KeyIndex over n keys: about two keys a slot."""
    return max(1, int(math.ceil(math.log2(max(n, 1)))) - 1)


def table_bits(n, packed=False):
    """Top-bit slots of an :class:`EntryTable` over n keys: one to two keys a slot (two
    to four make lookups slower for less memory), at most 32, so that the 32 stored bits
    follow the slot's; in a packed table, made for its size, two to four."""
    return max(1, min(32, index_bits(n)) - (1 if packed else 0))


#: Bytes of a ``.npy`` file besides its elements (numpy pads every header to 128).
NPY_HEADER_BYTES = 128


def index_lengths(n, packed=False):
    """``(offsets, blocks)``: the lengths of the slot offsets and block starts of an
    :class:`EntryTable` of n keys."""
    slots = 1 << table_bits(n, packed)
    return slots + 1, (slots >> SLOT_BLOCK_BITS) + 1


def table_bytes(n, packed=False):
    """The bytes of an :class:`EntryTable` of n keys as written (its overflow table, of a
    few hundred keys at most, aside): entries, slot offsets and block starts."""
    offsets, blocks = index_lengths(n, packed)
    codebook = CODEBOOK_SIZE * 4 + NPY_HEADER_BYTES if packed else 0
    return (n * (PACKED_ENTRY if packed else ENTRY).itemsize + offsets * 2 + blocks * 8
            + 4 * NPY_HEADER_BYTES + codebook)


def compact_bytes(features, links, vocabulary_size, packed=False):
    """The bytes of the arrays of a ``compact/`` of ``features`` and ``links`` (without
    link collisions or overflow entries: a few KB at most)."""
    return (table_bytes(features, packed) + table_bytes(links, packed)
            + (0 if packed else links * 4 + NPY_HEADER_BYTES)  # link_c
            + vocabulary_size + 2 * NPY_HEADER_BYTES)  # seen_words, link_collisions


class EntryTable:
    """Lookup of 64-bit keys in a compact table (see the module docstring).

    The keys are hashes (bits spread uniformly): a query that differs from a
    present key only in the bits below the stored ones is taken for it.

    Parameters
    ----------
    entries : ENTRY array (n,), sorted by key
    offsets : uint16 array (2**bits + 1,), each slot's first entry less its block's
    blocks : int64 array ((2**bits >> SLOT_BLOCK_BITS) + 1,), each block's first entry
    overflow : OVERFLOW array, the whole keys of entries sharing all stored bits

    Examples
    --------
    >>> table = EntryTable.build(np.array([2**40, 2**63, 2**64 - 1], dtype=np.uint64),
    ...                          np.array([0.5, 1.5, 2.5], dtype=np.float32))
    >>> table.find(np.array([2**63, 2**50], dtype=np.uint64)).tolist()
    [1, -1]
    """

    def __init__(self, entries, offsets, blocks, overflow, codebook=None):
        self.entries, self.offsets, self.blocks, self.overflow = entries, offsets, blocks, overflow
        self.shift = np.uint64(64 - int(round(math.log2(len(offsets) - 1))))
        self.packed = entries.dtype == PACKED_ENTRY
        # A contiguous view for the compiled loops: entry p is words[2p] (its remainder)
        # and words[2p + 1] (its value's bits); packed, bytes 3p to 3p + 2.
        self.words = entries.view(np.uint8 if self.packed else np.uint32)
        self.codebook = np.asarray(codebook, np.float32) if self.packed else None
        self.overflow_keys = np.ascontiguousarray(overflow["key"])
        self.overflow_rows = np.ascontiguousarray(overflow["row"])

    @classmethod
    def build(cls, keys, values, packed=False):
        """A table in memory from sorted distinct keys and their values."""
        writer = EntryTableWriter(len(keys), packed=packed,
                                  codebook=fit_codebook(values) if packed else None)
        writer.add(keys, values)
        return cls(*writer.finish())

    def value_of(self, rows):
        """The values (float32) of entries ``rows``."""
        values = self.entries["value"][rows]
        return self.codebook[values] if self.packed else values

    @property
    def parts(self):
        """The arrays :func:`snm_core.scoring.layouts.hashed_kernels.find_entries` takes, in its order."""
        return (self.words, self.offsets, self.blocks, self.shift, self.overflow_keys,
                self.overflow_rows, self.codebook)

    def find(self, queries):
        """Row of each query key, -1 where absent."""
        from snm_core.scoring.layouts import hashed_kernels  # loaded by scoring only
        return hashed_kernels.find_entries(*self.parts, np.ascontiguousarray(queries, np.uint64))


class SlotIndexWriter:
    """The two-level slot index of an :class:`EntryTable` from its slot starts in order
    (the ``out`` of a :class:`KeyIndexWriter`): uint16 offsets, written as they come,
    and the int64 start of each block of ``2**SLOT_BLOCK_BITS`` slots."""

    def __init__(self, offsets_out):
        self.out = offsets_out  # NpyWriter, or None: kept
        self.kept, self.blocks = [], []
        self.pending = np.zeros(0, np.int64)

    def append(self, start):
        start = np.asarray(start, np.int64)
        size = 1 << SLOT_BLOCK_BITS
        if len(self.pending):  # the block begun by the chunk before, completed first
            head = np.concatenate([self.pending, start[:size - len(self.pending)]])
            start = start[len(head) - len(self.pending):]
            if len(head) < size:
                self.pending = head
                return
            self._blocks(head)
        whole = len(start) >> SLOT_BLOCK_BITS << SLOT_BLOCK_BITS
        if whole:
            self._blocks(start[:whole])
        self.pending = start[whole:].copy()

    def _blocks(self, start):
        size = 1 << SLOT_BLOCK_BITS
        block = start.reshape(-1, size) if len(start) % size == 0 else start[None, :]
        # The starts do not decrease: a block's largest offset is its last.
        if len(start) and (block[:, -1] - block[:, 0]).max() > np.iinfo(np.uint16).max:
            raise SnmInputError("a block of the compact index holds more than 65,535 keys: "
                                "the keys are not hashes; please report this")
        self.blocks.append(block[:, 0].copy())  # a view would keep every slot's start
        offsets = np.subtract(block, block[:, :1], dtype=np.uint16, casting="unsafe").ravel()
        if self.out is None:
            self.kept.append(offsets)
        else:
            self.out.append(offsets)

    def finish(self):
        """``(offsets or None when written, blocks)``."""
        for i in range(0, len(self.pending), 1 << SLOT_BLOCK_BITS):  # the last, short block
            self._blocks(self.pending[i:i + (1 << SLOT_BLOCK_BITS)])
        blocks = np.concatenate(self.blocks + [np.zeros(0, np.int64)])
        if self.out is None:
            return np.concatenate(self.kept), blocks
        return None, blocks


class EntryTableWriter:
    """An :class:`EntryTable` built from sorted keys a chunk at a time, written to
    ``directory/{name}_entries.npy``, ``_index.npy``, ``_blocks.npy`` and
    ``_overflow.npy`` (or kept in memory without a directory); ``packed``: in
    :data:`PACKED_ENTRY` s (16 stored bits, value codes)."""

    def __init__(self, n, directory=None, name=None, packed=False, codebook=None):
        self.n, self.directory, self.name = n, directory, name
        self.bits = table_bits(n, packed)
        self.packed = packed
        self.codebook = codebook  # packed: the table's (fit_codebook)
        self.entry = PACKED_ENTRY if packed else ENTRY
        self.stored_mask = np.uint64(0xFFFF if packed else 0xFFFFFFFF)
        self.low = np.uint64(64 - self.bits - (16 if packed else 32))  # the stored bits' lowest
        self.entries = self._output("entries", self.entry, n)
        self.slots = SlotIndexWriter(self._output("index", np.uint16, (1 << self.bits) + 1))
        self.index = KeyIndexWriter(n, self.slots, bits=self.bits, dtype=np.int64)
        self.overflow = []
        self.kept = []  # the entries, without a directory
        self.done = 0
        self.last = None  # (stored bits, key, already in overflow) of the previous chunk's last

    def _output(self, part, dtype, n):
        if self.directory is None:
            return None
        return NpyWriter(os.path.join(self.directory, f"{self.name}_{part}.npy"), dtype, n)

    def add(self, keys, values):
        keys = np.ascontiguousarray(keys, np.uint64)
        stored = (keys >> self.low) & self.stored_mask
        entries = np.empty(len(keys), self.entry)
        entries["remainder"] = stored
        entries["value"] = value_codes(values, self.codebook) if self.packed else values
        if self.entries is None:
            self.kept.append(entries)
        else:
            self.entries.append(entries)
        self.index.add(keys)
        if len(keys):
            same = stored[1:] == stored[:-1]
            shared = np.zeros(len(keys), bool)
            shared[1:] |= same
            shared[:-1] |= same
            if self.last is not None and self.last[0] == stored[0]:
                shared[0] = True
                if not self.last[2]:
                    self.overflow.append((np.array([self.last[1]]), np.array([self.done - 1])))
            rows = np.flatnonzero(shared)
            self.overflow.append((keys[rows], rows + self.done))
            self.last = (stored[-1], keys[-1], bool(shared[-1]))
        self.done += len(keys)

    def finish(self):
        """In memory: ``(entries, offsets, blocks, overflow)``; written: the bytes written."""
        self.index.finish()
        offsets, blocks = self.slots.finish()
        overflow = np.zeros(sum(len(k) for k, _ in self.overflow), OVERFLOW)
        if len(overflow):
            overflow["key"] = np.concatenate([k for k, _ in self.overflow])
            overflow["row"] = np.concatenate([r for _, r in self.overflow])
        if self.directory is None:
            entries = np.concatenate(self.kept + [np.zeros(0, self.entry)])
            return entries, offsets, blocks, overflow, self.codebook
        written = [("overflow", overflow), ("blocks", blocks)]
        if self.packed:
            written.append(("codebook", self.codebook))
        for part, array in written:
            storage.write_npy(array, os.path.join(self.directory, f"{self.name}_{part}.npy"))
        return self.entries.close() + self.slots.out.close() + sum(a.nbytes for _, a in written)


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
