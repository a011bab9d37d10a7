"""The final model: adjusted matrix M, compact storage, probabilities and perplexity.

Applying the adjustment (the logic of ``snm apply``)
    :func:`adjust_bucket` turns one count bucket into model rows:
    M_fw = c(w|f) exp(A(f, w)) for every link and M_f* = sum_w M_fw for every
    feature.  A bucket holds whole rows, so M_f* needs no shuffle.

Compact form (``compact/`` in a model directory, memory-mapped on load)
    Two tables of random-looking 64-bit keys (:class:`EntryTable`), sorted, each
    with a direct-address index on the keys' top b bits (one to two keys a
    slot; a slot's first entry is a uint16 offset from its block of 256
    slots).  An entry is 8 bytes: the 32 key bits after the slot's b (the slot
    holds the rest) and a float32 value, so a lookup is one index read and a
    scan of one cache line that also holds the value, instead of the ~23
    dependent cache misses of a binary search.  Keys that agree in all b + 32
    bits (rare: about n^2 / 2^(b+33) pairs) are also kept whole in a small
    overflow table, which settles a match on them.  An absent key matches a
    present one with probability about 2^-32 a lookup.

    * features: key -> M_f* (float32)
    * links: :func:`snm_core.hashing.link_key` (feature key, word) -> M_fw
      (float32), and, for the unadjusted model, c(w|f) (float32, its own array).

    About 13 bytes a link and 10 a feature (kernel 5-gram: 19.5 bytes a link
    in all; KenLM: 22.0 bytes an n-gram probing, 10.4 trie).  ``compact/`` is
    a cache of the Parquet tables: one of an older layout is rebuilt on load.
    This is the ``hashed`` layout, for any model; ``--layout trie`` and
    ``small`` store an n-gram model as a trie instead
    (:mod:`snm_core.trie_layout`, :mod:`snm_core.small_layout`).

Scoring
    P(w | e) = sum_{f in F(e)} M_fw / sum_{f in F(e)} M_f*, over the event's
    features present in the model; the unadjusted model (theta = 0) has
    M_f* = 1 and M_fw = c(w|f).  Words of the vocabulary that training never
    saw are read as ``<UNK>``, in contexts and as targets (as KenLM does with
    words outside its ARPA file).
"""

import dataclasses
import math
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from snm_core import kernels, memory, storage, tables, validation
from snm_core.config import parse_config
from snm_core.errors import SnmInputError
from snm_core.arrays import group_rows
from snm_core.features import FeatureExtractor
from snm_core.hashing import link_key
from snm_core.text import SentenceBatch, TokenizeStats, tokenize
from snm_core.vocab import BOS_ID, EOS_ID, UNK_ID

#: Lines scored per batch: big enough to amortise numpy's per-call cost.
SCORE_BATCH_LINES = 2048
#: Links sorted at once when the compact arrays are built (~170 MB of work
#: memory each; two are sorted at once).
COMPILE_PARTITION_LINKS = 1 << 22
COMPACT = "compact"
#: The layout of ``compact/`` (its manifest's ``layout``); another is rebuilt on load.
COMPACT_LAYOUT = 3
#: Layouts ``compact/`` may be built in (``--layout``): hashed keys (this module, any
#: model), or an n-gram model's trie, plain (:mod:`snm_core.trie_layout`) or coded
#: (:mod:`snm_core.small_layout`).
LAYOUTS = ("hashed", "trie", "small")
LAYOUT_HELP = ("scoring arrays (compact/): hashed (the default: any model, with the unadjusted "
               "model), trie (n-gram models: about 10 bytes a link, the fastest) or small "
               "(n-gram models: about 2.5 bytes a link, perplexity within 0.1%%)")
COMPACT_FILES = ("feature_entries", "feature_index", "feature_blocks", "feature_overflow",
                 "link_entries", "link_c", "link_index", "link_blocks", "link_overflow",
                 "seen_words")
#: Slots a block of an entry table's index: a slot's first entry is its block's first
#: (int64) plus the slot's uint16 offset in the block (a block holds ~380 entries).
SLOT_BLOCK_BITS = 8
#: An entry of a compact table: the 32 key bits below the slot bits, and the value.
ENTRY = np.dtype([("remainder", "<u4"), ("value", "<f4")])
#: The overflow table: whole keys (ascending) whose entries share all stored bits.
OVERFLOW = np.dtype([("key", "<u8"), ("row", "<i8")])


def adjust_bucket(features, links, theta, spec, type_fingerprint, num_feature_types):
    """Model rows of one count bucket.

    Parameters
    ----------
    features, links : pyarrow.Table, count schemas, one bucket (links grouped by feature)
    theta : float array (spec.hash_size,)
    spec : MetaFeatureSpec
    type_fingerprint : uint64 array indexed by type id (``FeatureExtractor.type_salts``)
    num_feature_types : int

    Returns
    -------
    matrix : pyarrow.Table, schema :data:`snm_core.tables.MATRIX`
    model_features : pyarrow.Table, schema :data:`snm_core.tables.MODEL_FEATURES`
    """
    key = features["feature"].to_numpy()
    type_id = (features["tag"].to_numpy().astype(np.int64) * num_feature_types
               + features["type"].to_numpy())
    feature_count = features["count"].to_numpy()
    diversity = features["diversity"].to_numpy()
    ptr = np.r_[0, np.cumsum(diversity)]
    if ptr[-1] != links.num_rows:
        raise SnmInputError("count bucket files disagree: diversities do not sum to the number "
                            "of links; re-run snm count")
    m, m_star = kernels.adjust_links(
        spec, key, type_fingerprint[type_id], feature_count, diversity, ptr,
        links["word"].to_numpy(), links["count"].to_numpy(), links["continuation"].to_numpy(),
        theta)
    matrix = pa.table({"feature": links["feature"], "word": links["word"],
                       "count": links["count"], "m": m}, schema=tables.MATRIX)
    return matrix, features.append_column("m_star", pa.array(m_star))


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
        from snm_core import compiled  # numba: loaded by scoring only (see its docstring)
        return compiled.find(self.keys, self.start, self.shift,
                            np.ascontiguousarray(queries, dtype=np.uint64))


class KeyIndexWriter:
    """The ``start`` array of a :class:`KeyIndex`, built from its sorted keys a chunk at a time.

    Parameters
    ----------
    n : int, the number of keys in all
    out : NpyWriter, optional: the entries are written there as they are
        filled, instead of kept (``finish`` then returns None)
    bits : int, optional: slot bits (default :func:`index_bits`)
    """

    def __init__(self, n, out=None, bits=None):
        self.n, self.out = n, out
        self.bits = index_bits(n) if bits is None else bits
        self.dtype = np.int32 if n < 2 ** 31 else np.int64
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
        start = start.astype(self.dtype)
        if self.out is None:
            self.parts.append(start)
        else:
            self.out.append(start)


def index_bits(n):
    """Top-bit slots of a KeyIndex over n keys: about two keys a slot."""
    return max(1, int(math.ceil(math.log2(max(n, 1)))) - 1)


def table_bits(n):
    """Top-bit slots of an :class:`EntryTable` over n keys: one to two keys a slot (two
    to four made lookups ~10% slower for 1.3 bytes a key less); at most 32, so that
    the 32 stored bits follow the slot's."""
    return min(32, index_bits(n))


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

    def __init__(self, entries, offsets, blocks, overflow):
        self.entries, self.offsets, self.blocks, self.overflow = entries, offsets, blocks, overflow
        self.shift = np.uint64(64 - int(round(math.log2(len(offsets) - 1))))
        self.values = entries["value"]
        # Contiguous views for the compiled loops (numba indexes a field view slower):
        # entry p is words[2p] (its remainder) and value_words[2p + 1] (its value).
        self.words = entries.view(np.uint32)
        self.value_words = entries.view(np.float32)
        self.overflow_keys = np.ascontiguousarray(overflow["key"])
        self.overflow_rows = np.ascontiguousarray(overflow["row"])

    @classmethod
    def build(cls, keys, values):
        """A table in memory from sorted distinct keys and their values."""
        writer = EntryTableWriter(len(keys))
        writer.add(keys, values)
        return cls(*writer.finish())

    @property
    def parts(self):
        """The arrays :func:`snm_core.compiled.find_entries` takes, in its order."""
        return (self.words, self.offsets, self.blocks, self.shift, self.overflow_keys,
                self.overflow_rows)

    def find(self, queries):
        """Row of each query key, -1 where absent."""
        from snm_core import compiled  # numba: loaded by scoring only (see its docstring)
        return compiled.find_entries(*self.parts, np.ascontiguousarray(queries, np.uint64))


class SlotIndexWriter:
    """The two-level slot index of an :class:`EntryTable` from its slot starts in order
    (the ``out`` of a :class:`KeyIndexWriter`): uint16 offsets, written as they come,
    and the int64 start of each block of ``2**SLOT_BLOCK_BITS`` slots."""

    def __init__(self, offsets_out):
        self.out = offsets_out  # NpyWriter, or None: kept
        self.kept, self.blocks = [], []
        self.pending = np.zeros(0, np.int64)

    def append(self, start):
        self.pending = np.concatenate([self.pending, np.asarray(start, np.int64)])
        whole = len(self.pending) >> SLOT_BLOCK_BITS << SLOT_BLOCK_BITS
        if whole:
            self._blocks(self.pending[:whole])
            self.pending = self.pending[whole:]

    def _blocks(self, start):
        size = 1 << SLOT_BLOCK_BITS
        block = start.reshape(-1, size) if len(start) % size == 0 else start[None, :]
        offsets = block - block[:, :1]
        if offsets.max(initial=0) > np.iinfo(np.uint16).max:
            raise SnmInputError("a block of the compact index holds more than 65,535 keys: "
                                "the keys are not hashes; please report this")
        self.blocks.append(block[:, 0])
        offsets = offsets.astype(np.uint16).ravel()
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
    ``_overflow.npy`` (or kept in memory without a directory)."""

    def __init__(self, n, directory=None, name=None):
        self.n, self.directory, self.name = n, directory, name
        self.bits = table_bits(n)
        self.low = np.uint64(64 - self.bits - 32)  # the stored bits' lowest
        self.entries = self._output("entries", ENTRY, n)
        self.slots = SlotIndexWriter(self._output("index", np.uint16, (1 << self.bits) + 1))
        self.index = KeyIndexWriter(n, self.slots, bits=self.bits)
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
        stored = keys >> self.low
        entries = np.empty(len(keys), ENTRY)
        entries["remainder"] = stored  # the low 32 of the shifted bits
        entries["value"] = values
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
            entries = np.concatenate(self.kept + [np.zeros(0, ENTRY)])
            return entries, offsets, blocks, overflow
        for part, array in (("overflow", overflow), ("blocks", blocks)):
            storage.write_npy(array, os.path.join(self.directory, f"{self.name}_{part}.npy"))
        return self.entries.close() + self.slots.out.close() + overflow.nbytes + blocks.nbytes


class NpyWriter:
    """A ``.npy`` file of ``n`` elements written in order, then renamed into place.

    Plain writes, not a memory map: the pages written are the page cache's,
    not this process's resident memory.
    """

    def __init__(self, path, dtype, n):
        from numpy.lib import format as npy_format

        self.path, self.dtype, self.n, self.count = path, np.dtype(dtype), n, 0
        self.file = open(path + ".tmp", "wb")
        npy_format.write_array_header_1_0(self.file, {"descr": npy_format.dtype_to_descr(
            self.dtype), "fortran_order": False, "shape": (n,)})

    def append(self, array):
        array = np.ascontiguousarray(array, self.dtype)
        self.file.write(memoryview(array).cast("B"))
        self.count += len(array)

    def close(self):
        self.file.close()
        if self.count != self.n:
            raise RuntimeError(f"{self.path}: wrote {self.count} of {self.n} elements")
        os.replace(self.path + ".tmp", self.path)
        return self.n * self.dtype.itemsize


def _sort_partition(scratch, p, work):
    """Link keys, M and c of scratch partition p, sorted by key."""
    keys = np.fromfile(os.path.join(scratch, f"{p}.keys"), dtype=np.uint64)
    order = kernels.argsort_keys(keys, work).astype(np.intp)
    return keys[order], *(np.fromfile(os.path.join(scratch, f"{p}.{name}"),
                                      dtype=np.float32)[order] for name in ("m", "c"))


def compile_model(model_dir, layout="hashed", partition_links=COMPILE_PARTITION_LINKS):
    """Build ``compact/`` in ``layout`` from the model's Parquet files; returns the compact
    manifest.

    ``layout`` is one of :data:`LAYOUTS`.  A remote model's arrays are built
    in a local directory, then uploaded, their manifest last.

    Memory stays bounded whatever the model size: arrays are written to their
    ``.npy`` files in order (:class:`NpyWriter`); feature keys arrive sorted
    (bucket files are key ranges), and links are sorted by link key in two
    passes, first scattered into key-range partitions of about
    ``partition_links`` links on disk, then each partition sorted alone (an
    external sort, two partitions at a time).
    """
    memory.limit_heap_retention()  # its 20-50 MB temporaries: 1.7 -> 0.9 GiB on mix skip-5-gram
    manifest = tables.read_manifest(model_dir, "model")
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout != "hashed":
        from snm_core import ngram_trie, small_layout, trie_layout
        ngram_trie.ngram_span(manifest, model_dir, layout)  # refused before anything is removed
        builder = small_layout.build_small if layout == "small" else trie_layout.build_trie

        def build(directory):
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(directory)
            compact = builder(model_dir, manifest, directory)
            storage.write_json(compact, os.path.join(directory, tables.MANIFEST))
            return compact
    else:
        def build(directory):
            return _compile(model_dir, manifest, directory, partition_links)
    if not storage.is_remote(model_dir):
        local = os.path.join(model_dir, COMPACT)
        with storage.resource_errors(local):
            return build(local)
    os.makedirs(storage.cache_directory(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=storage.cache_directory()) as staging, \
            storage.resource_errors(staging):
        compact = build(staging)
        remote = storage.join(model_dir, COMPACT)
        storage.remove_tree(remote)
        storage.upload_tree(staging, remote, last=tables.MANIFEST)
    return compact


def _compile(model_dir, manifest, directory, partition_links):
    """:func:`compile_model` into the local ``directory``."""
    n_features, n_links = manifest["totals"]["features"], manifest["totals"]["links"]
    scratch = os.path.join(directory, "partitions.tmp")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(scratch)
    bits = max(0, int(math.ceil(math.log2(max(n_links / partition_links, 1)))))
    parts = [{name: open(os.path.join(scratch, f"{p}.{name}"), "wb")
              for name in ("keys", "m", "c")} for p in range(1 << bits)]

    def output(name, dtype, n):
        return NpyWriter(os.path.join(directory, name + ".npy"), dtype, n)

    feature_table = EntryTableWriter(n_features, directory, "feature")
    seen = np.zeros(manifest["vocabulary_size"], dtype=bool)
    empty_types = [i for i, name in enumerate(manifest["feature_types"]) if name == "0-gram"]
    for name in sorted(n for n in manifest["files"] if n.startswith("features-")):
        feats = tables.read_table(storage.join(model_dir, name), tables.MODEL_FEATURES,
                                  ["feature", "type", "count", "diversity", "m_star"])
        matrix = tables.read_table(storage.join(model_dir, "matrix-" + name[len("features-"):]),
                                   tables.MATRIX)
        keys, diversity = feats["feature"].to_numpy(), feats["diversity"].to_numpy()
        feature_table.add(keys, feats["m_star"].to_numpy())
        word = matrix["word"].to_numpy()
        lk = link_key(np.repeat(keys, diversity), word)
        c = (matrix["count"].to_numpy() / np.repeat(feats["count"].to_numpy(), diversity))
        arrays = {"keys": lk, "m": matrix["m"].to_numpy(), "c": c.astype(np.float32)}
        part = (lk >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(lk), int)
        order, bounds = group_rows(part, 1 << bits)
        for p in np.flatnonzero(np.diff(bounds)):
            rows = order[bounds[p]:bounds[p + 1]]
            for key, array in arrays.items():
                array[rows].tofile(parts[p][key])
        empty = np.isin(feats["type"].to_numpy(), empty_types)
        seen[word[np.repeat(empty, diversity)]] = True
    del feats, matrix, keys, diversity, word, lk, c, arrays, part, order, bounds  # the last file's
    sizes = feature_table.finish()
    link_table = EntryTableWriter(n_links, directory, "link")
    link_c = output("link_c", np.float32, n_links)
    for files in parts:
        for f in files.values():
            f.close()
    collisions = 0
    # Partitions are sorted two at a time (the radix sort and the gathers release
    # the GIL) and written in order.
    with ThreadPoolExecutor(2) as pool:
        scratches = [{}, {}]
        sorted_parts = [pool.submit(_sort_partition, scratch, p, scratches[p % 2])
                        for p in range(min(2, len(parts)))]
        for p in range(len(parts)):
            keys, m, c = sorted_parts[p].result()
            if p + 2 < len(parts):
                sorted_parts.append(pool.submit(_sort_partition, scratch, p + 2,
                                                scratches[p % 2]))
            collisions += int(np.count_nonzero(keys[1:] == keys[:-1]))
            link_table.add(keys, m)
            link_c.append(c)
            sorted_parts[p] = None
    sizes += link_table.finish() + link_c.close()
    shutil.rmtree(scratch)
    if collisions:
        raise SnmInputError(f"{model_dir}: {collisions} pairs of links share a 64-bit link key "
                            "(expected about n**2 / 2**65); please report this")
    storage.write_npy(seen, os.path.join(directory, "seen_words.npy"))
    sizes += seen.nbytes
    compact = {"kind": "compact", "format_version": tables.FORMAT_VERSION,
               "layout": COMPACT_LAYOUT, "files": [n + ".npy" for n in COMPACT_FILES],
               "features": int(n_features), "links": int(n_links), "bytes": int(sizes)}
    storage.write_json(compact, os.path.join(directory, tables.MANIFEST))
    return compact


# --- scoring ------------------------------------------------------------------------------

@dataclasses.dataclass
class Scores:
    """Per-event probabilities of a batch, adjusted and unadjusted (theta = 0)."""

    target: np.ndarray  # int32 (n_events,)
    sentence: np.ndarray  # int32 (n_events,)
    prob: np.ndarray  # float64 (n_events,)
    prob_unadjusted: np.ndarray = None  # float64 (n_events,); None for a log-linear model


class LineScoring:
    """Scoring of text lines for a model with ``vocab`` and ``score_batch(batch, unadjusted)``
    returning :class:`Scores`; ``REPORTS`` names its models (their ``Scores`` fields)."""

    #: Report name -> the :class:`Scores` field holding that model's probabilities.
    REPORTS = {"adjusted": "prob", "unadjusted": "prob_unadjusted"}

    def score_lines(self, lines, batch_lines=SCORE_BATCH_LINES, threads=None, unadjusted=True,
                    stats=None):
        """Yield ``(first line, kept line offsets, Scores)`` per batch of lines, in order.

        Batches are scored on ``threads`` threads (default: one per core); numpy
        releases the GIL in the lookups, so they run in parallel.  ``stats``, a
        :class:`snm_core.text.TokenizeStats`, gains each batch's counts (the empty
        and undecodable lines skipped among them).
        """
        def score(start):
            batch, kept, batch_stats = tokenize(lines[start:start + batch_lines], self.vocab)
            return start, kept, self.score_batch(batch, unadjusted), batch_stats

        def counted(results):
            for start, kept, scores, batch_stats in results:
                if stats is not None:
                    stats.add(batch_stats)
                yield start, kept, scores

        starts = range(0, len(lines), batch_lines)
        threads = threads or os.cpu_count() or 1
        if threads == 1 or len(starts) == 1:
            yield from counted(map(score, starts))
            return
        with ThreadPoolExecutor(threads) as pool:
            yield from counted(pool.map(score, starts))

    def evaluate_lines(self, lines, threads=None):
        """KenLM-style perplexity report of each of ``REPORTS``, with the lines skipped
        (``invalid_lines``: not valid UTF-8 or holding a NUL byte; ``empty_lines``)."""
        totals = {name: PerplexityTotals() for name in self.REPORTS}
        stats = TokenizeStats()
        for _, kept, scores in self.score_lines(lines, threads=threads, stats=stats):
            oov = scores.target == UNK_ID
            for name, field in self.REPORTS.items():
                totals[name].add(getattr(scores, field), oov)
        return {name: {**t.report(stats.sentences), "invalid_lines": stats.invalid_lines,
                       "empty_lines": stats.empty_lines} for name, t in totals.items()}


class Model(LineScoring):
    """A trained model loaded for scoring, without Beam.

    Use :meth:`load`; then :meth:`score_lines`, :meth:`evaluate_lines`,
    :meth:`prob` or :meth:`distribution`.

    One model may be shared by threads: after ``__init__`` nothing in it
    changes (its arrays are only read, the vocabulary's lookup table is built
    here, and every call's work arrays are its own), so concurrent calls give
    exactly the scores of one thread (``tests/test_model_threads.py``).
    """

    def __init__(self, manifest, vocab, arrays):
        from snm_core import compiled  # numba: loaded by scoring only (see its docstring)
        self._kernels = compiled
        self.manifest = manifest
        self.vocab = vocab
        vocab.ids([])  # builds its lookup table now: nothing is built lazily while scoring
        self.config = parse_config(manifest["config"])
        self.extractor = FeatureExtractor(self.config, manifest["tags"])
        self.features, self.links = (
            EntryTable(*(arrays[f"{table}_{part}"]
                         for part in ("entries", "index", "blocks", "overflow")))
            for table in ("feature", "link"))
        self.m_star = self.features.values
        self.link_m = self.links.values
        self.link_c = arrays["link_c"]
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

    @classmethod
    def load(cls, model_dir, mmap=True):
        """Load a model directory; builds ``compact/`` first if it is missing.

        A remote model's scoring arrays are copied to a local cache on first
        load (:func:`snm_core.storage.local_copy`) and memory-mapped from there.
        A model whose ``compact/`` is in a trie layout loads as a
        :class:`snm_core.trie_layout.TrieModel` or
        :class:`snm_core.small_layout.SmallModel`.
        """
        from snm_core import small_layout, trie_layout
        tries = {small_layout.SMALL_LAYOUT: (small_layout.SMALL_FILES, small_layout.load_small,
                                             small_layout.SmallModel),
                 trie_layout.TRIE_LAYOUT: (trie_layout.TRIE_FILES, trie_layout.load_trie,
                                           trie_layout.TrieModel)}
        stored_compact = storage.join(model_dir, COMPACT)
        compact_manifest = storage.join(stored_compact, tables.MANIFEST)
        layout = (storage.read_json(compact_manifest).get("layout")
                  if storage.isfile(compact_manifest) else None)
        built = layout == COMPACT_LAYOUT or layout in tries
        # Manifest, vocab.txt, theta.npy; the Parquet tables only if compact/ is built from them.
        checked = validation.validate_directory(model_dir, "model", parquet=not built)
        if not built:  # missing, or an older version of its layout ("small-0": small)
            name = layout.split("-")[0] if isinstance(layout, str) else "hashed"
            compile_model(model_dir, name if name in LAYOUTS else "hashed")
        compact = tables.read_manifest(stored_compact, "compact")
        vocabulary_size = checked.manifest["vocabulary_size"]
        if compact["layout"] in tries:
            files, load, model_type = tries[compact["layout"]]
            compact_dir = storage.local_copy(stored_compact, [n + ".npy" for n in files],
                                             tables.MANIFEST)
            arrays = load(compact_dir, compact, vocabulary_size, mmap)
            return model_type(checked.manifest, checked.vocabulary, compact, arrays)
        compact_dir = storage.local_copy(stored_compact, [n + ".npy" for n in COMPACT_FILES],
                                         tables.MANIFEST)
        arrays = _load_compact(compact_dir, compact, vocabulary_size, mmap)
        return cls(checked.manifest, checked.vocabulary, arrays)

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
        sums = self._kernels.event_sums(
            events.key, events.event, type_bounds, self._prerequisite, events.target,
            events.num_events, *self.features.parts, self.features.value_words,
            *self.links.parts, self.links.value_words, self.link_c)
        return Scores(events.target, events.sentence, *_ratios(*sums, unadjusted))

    def _probabilities(self, pair_event, row, link, n_events, unadjusted=True):
        """(adjusted, unadjusted) P(target) per event from the pairs' rows and links."""
        present = row >= 0
        linked = link >= 0
        return _ratios(
            np.bincount(pair_event[present], weights=self.m_star[row[present]],
                        minlength=n_events),
            np.bincount(pair_event[linked], weights=self.link_m[link[linked]],
                        minlength=n_events),
            np.bincount(pair_event[linked], weights=self.link_c[link[linked]],
                        minlength=n_events),
            np.bincount(pair_event[present], minlength=n_events), unadjusted)

    def prob(self, context, word):
        """P(word | context): ``context`` a list of words after ``<S>`` (strings)."""
        return float(self.distribution(context, [word])[0])

    def distribution(self, context, words=None, unadjusted=False):
        """P(w | context) for the given words (default: every word the model predicts)."""
        ids = self.scored_words if words is None else self.word_map[self.vocab.ids(words)]
        # The sentence is the context alone: its last event, the one predicting </S>,
        # has the whole context (an EOS token appended would be a context word).
        sentence = list(self.word_map[self.vocab.ids(list(context))])
        events = self.extractor.extract(SentenceBatch.from_lists([sentence]))
        keys = events.key[events.event == events.num_events - 1]
        rows = self.features.find(keys)
        keys, rows = keys[rows >= 0], rows[rows >= 0]
        pair_event = np.repeat(np.arange(len(ids)), len(keys))
        links = self.links.find(link_key(np.tile(keys, len(ids)), np.repeat(ids, len(keys))))
        probs = self._probabilities(pair_event, np.tile(rows, len(ids)), links, len(ids))
        return probs[1 if unadjusted else 0]


def suffix_closed(manifest):
    """Whether every n-gram feature and link of the model has its suffix one word shorter
    in the model too: true of counts, and of pruning by back-off relative entropy (which
    keeps the ARPA closure); not of pruning by mass or count."""
    pruning = manifest.get("pruning")
    if not pruning:
        return True
    # Models pruned before the key was written: only the back-off criterion's stay closed.
    return pruning.get("suffix_closed", pruning["criterion"].startswith("relative entropy"))


def _load_compact(compact_dir, compact, vocabulary_size, mmap):
    """The arrays of a local ``compact/`` directory, each checked against its manifest
    (dtype, length): a damaged one is an :class:`SnmInputError` naming it."""
    n_features, n_links = compact["features"], compact["links"]
    expected = {"feature_entries": (ENTRY, n_features), "link_entries": (ENTRY, n_links),
                "link_c": (np.float32, n_links), "seen_words": (np.bool_, vocabulary_size),
                "feature_overflow": (OVERFLOW, None), "link_overflow": (OVERFLOW, None)}
    for table, n in (("feature", n_features), ("link", n_links)):
        slots = 1 << table_bits(n)
        expected[table + "_index"] = (np.uint16, slots + 1)
        expected[table + "_blocks"] = (np.int64, (slots >> SLOT_BLOCK_BITS) + 1)
    arrays = {}
    for name in COMPACT_FILES:
        path = os.path.join(compact_dir, name + ".npy")
        remedy = f"delete {compact_dir} to have it built again"
        try:
            array = np.load(path, mmap_mode="r" if mmap else None)
        except (OSError, ValueError, EOFError) as e:
            raise SnmInputError(f"{path}: cannot load ({tables.one_line(e)}); {remedy}") from None
        dtype, length = np.dtype(expected[name][0]), expected[name][1]
        if array.dtype != dtype or array.ndim != 1 or length not in (None, len(array)):
            raise SnmInputError(f"{path}: {array.dtype} of shape {array.shape}, expected {dtype} "
                                f"of shape ({'n' if length is None else length},); {remedy}")
        # np.asarray keeps the memory map but drops np.memmap's per-index overhead.
        arrays[name] = np.asarray(array)
    for table, n in (("feature", n_features), ("link", n_links)):
        rows = arrays[table + "_overflow"]["row"]
        if len(rows) and (rows.min() < 0 or rows.max() >= n):
            raise SnmInputError(f"{os.path.join(compact_dir, table + '_overflow.npy')}: a row "
                                f"outside the table; delete {compact_dir} to have it built again")
    return arrays


def _ratios(m_star_sum, link_m_sum, link_c_sum, n_features, unadjusted=True):
    """(adjusted, unadjusted or None) P(target) per event from its per-event sums."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return link_m_sum / m_star_sum, link_c_sum / n_features if unadjusted else None


class PerplexityTotals:
    """Log-probability sums of scored words, and the KenLM-style report they give."""

    def __init__(self):
        self.logprob = self.logprob_in_vocab = 0.0
        self.words = self.oov = self.zero = self.zero_in_vocab = 0

    def add(self, prob, oov):
        with np.errstate(divide="ignore"):
            logp = np.log(prob)
        finite = np.isfinite(logp)
        self.words += len(prob)
        self.oov += int(oov.sum())
        self.zero += int((~finite).sum())
        self.zero_in_vocab += int((~finite & ~oov).sum())
        self.logprob += float(logp[finite].sum())
        self.logprob_in_vocab += float(logp[finite & ~oov].sum())

    def report(self, sentences):
        def ppl(logprob, n, zero):
            if zero:
                return float("inf")
            return math.exp(-logprob / n) if n else float("nan")
        return {
            "perplexity": ppl(self.logprob, self.words, self.zero),
            "perplexity_excluding_oov": ppl(self.logprob_in_vocab, self.words - self.oov,
                                            self.zero_in_vocab),
            "log10_prob": self.logprob / math.log(10),
            "oov": self.oov,
            "words": self.words,
            "sentences": sentences,
            "zero_probability": self.zero,
        }


def write_model_card(model_dir, manifest, evaluation=None, keep_evaluation=False):
    """``model_card.md``: what the model is, what it was trained on, how good it is.

    ``evaluation`` maps a text's name to its ``{"adjusted": ..., "unadjusted": ...}`` report;
    with ``keep_evaluation`` the Evaluation section of the card there is kept instead.
    """
    card = storage.join(model_dir, "model_card.md")
    kept = ""
    if keep_evaluation and storage.isfile(card):
        text = storage.read_text(card)
        kept = text[text.index("\n## Evaluation"):] if "\n## Evaluation" in text else ""
    totals, fit = manifest.get("count_totals", {}), manifest.get("fit", {})
    spec, training = fit.get("metafeatures", {}), fit.get("training", {})
    tags = ", ".join(manifest["tags"]) if any(manifest["tags"]) else "none (pooled)"
    extras = "".join(f" + {name}" for name in ("diversity", "continuation") if spec.get(name))
    skipped = totals.get("empty_lines", 0) + totals.get("invalid_lines", 0)
    name = storage.basename(storage.absolute(model_dir))
    lines = [
        f"# SNM language model: {name}",
        "",
        "## Configuration",
        "```", manifest["config"].rstrip(), "```",
        f"- corpus tags: {tags}",
        f"- vocabulary: {manifest['vocabulary_size']:,} words (with <S>, </S>, <UNK>)",
        f"- meta-features: {spec.get('variant')}{extras}, hash size "
        f"{spec.get('hash_size', 0):,}, {fit.get('weights_in_use', 0):,} weights in use",
        f"- training: {training.get('epochs')} AdaGrad epoch(s), batch "
        f"{training.get('batch_size')}, gamma {training.get('gamma')}",
        "",
        "## Data",
        f"- training: {totals.get('sentences', 0):,} sentences, {totals.get('tokens', 0):,} "
        f"words ({totals.get('oov_tokens', 0):,} out of vocabulary), {skipped:,} lines skipped",
        f"- model: {manifest['totals']['features']:,} features, "
        f"{manifest['totals']['links']:,} links",
        f"- held-out: {fit.get('heldout_events', 0):,} events; perplexity "
        f"{fit.get('heldout_perplexity_unadjusted', float('nan')):.2f} unadjusted, "
        f"{fit.get('heldout_perplexity', float('nan')):.2f} adjusted",
    ]
    pruning = manifest.get("pruning")
    if pruning:
        before = pruning["links_before"]
        lines += ["", "## Pruning",
                  f"- {manifest['totals']['links']:,} of {before:,} links kept "
                  f"({manifest['totals']['links'] / max(before, 1):.1%}), "
                  f"{manifest['totals']['features']:,} of {pruning['features_before']:,} "
                  "features",
                  f"- criterion: {pruning['criterion']}; target "
                  f"{pruning['target_links'] or '-'} links, score threshold "
                  f"{pruning['threshold']:.3g}",
                  f"- pruned from: {pruning['source']}"]
        if pruning.get("heldout"):
            lines.append(f"- the features of the held-out text in {pruning['heldout']} "
                         f"weighed {pruning['heldout_weight']:g} times more")
    compact = storage.join(model_dir, COMPACT, tables.MANIFEST)
    if storage.isfile(compact):
        stored = storage.read_json(compact)
        links = max(manifest["totals"]["links"], 1)
        lines += ["", "## Storage",
                  f"- compact/: {stored['bytes']:,} bytes, {stored['bytes'] / links:.1f} bytes "
                  "a link (memory-mapped for scoring)"]
        if stored.get("layout") == COMPACT_LAYOUT:
            lines.append(f"- layout hashed ({COMPACT_LAYOUT}): hashed keys, 8-byte entries (32 "
                         "key bits and a float32 M), float32 c(w|f) for the unadjusted model")
        elif str(stored.get("layout")).startswith("trie"):
            lines.append(f"- layout trie ({stored['layout']}): {stored['entries']:,} n-gram "
                         "entries by context, word ranks and float32 M; no unadjusted model")
        elif str(stored.get("layout")).startswith("small"):
            lines.append(f"- layout small ({stored['layout']}): {stored['entries']:,} n-gram "
                         "entries by context, Huffman-coded; M rounded to a log step of "
                         f"{stored['value_step']:.3g} (perplexity within 0.1%); no unadjusted "
                         "model")
    if evaluation:
        lines += ["", "## Evaluation", "",
                  "| model | text | perplexity | excluding OOV | OOV | words | sentences |",
                  "|---|---|---|---|---|---|---|"]
        for text, report in evaluation.items():
            for kind in ("adjusted", "unadjusted"):
                if kind not in report:  # the trie layouts keep no unadjusted model
                    continue
                r = report[kind]
                lines.append(f"| {kind} | {text} | {r['perplexity']:.2f} | "
                             f"{r['perplexity_excluding_oov']:.2f} | {r['oov']:,} | "
                             f"{r['words']:,} | {r['sentences']:,} |")
    storage.write_text("\n".join(lines) + "\n" + kept, card)  # kept: "\n## Evaluation..."


def read_model_tables(model_dir):
    """``(features, matrix, manifest)`` of a model directory as whole tables (for export)."""
    manifest = validation.validate_directory(model_dir, "model").manifest
    feats = tables.read_tables(model_dir, manifest, "features", tables.MODEL_FEATURES)
    matrix = tables.read_tables(model_dir, manifest, "matrix", tables.MATRIX)
    return feats, matrix, manifest
