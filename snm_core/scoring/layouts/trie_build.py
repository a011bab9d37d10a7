"""A model's n-gram trie (:mod:`snm_core.scoring.layouts.ngram_trie`) built by external sort,
within a memory budget: what the trie and small layouts are written from.

Entries of order j are sorted by ``c * radix + rank(w)``, and the index c of an entry of
order j - 1 is its place in that order's sorted list: so every order's entries are in
the lexicographic order of their n-grams' word ranks, and one pass over a tag's
n-grams sorted that way (a prefix before its extensions) meets each entry of every
order in order, the first time a path reaches it.  The build:

1. ranks: one pass over the model's links counts how often each word is predicted
   (and which words the empty context predicts);
2. scan: a second pass gives each link its n-gram's sort key (tag, then the ranks;
   :mod:`snm_core.scoring.layouts.trie_build_kernels`), spilled to scratch in sorted runs
   (:class:`snm_core.scoring.layouts.sorted_runs.SortedRuns`);
3. stream: the runs are read back in key order, a key range at a time, and the
   entries of each order (position p, as :attr:`ExternalTrie.counts`) appended to
   scratch files, keys (int64) beside values (float32).

The layouts then read each order's entries in chunks, in order
(:meth:`ExternalTrie.entries`), and write their arrays in order.  Memory: the
vocabulary's arrays, and one run, partition or chunk, each sized from the budget
(:func:`plan`); never the model.  The entries do not depend on the budget: the same
sorted n-grams are streamed whatever the runs and partitions.
"""

import dataclasses
import math
import os
import shutil

import numpy as np

from snm_core.io import memory as memory_budget
from snm_core.io import model_files
from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts import trie_build_kernels as kernels
from snm_core.scoring.layouts.ngram_trie import ngram_span
from snm_core.scoring.layouts.sorted_runs import SortedRuns

#: Working bytes a record of a sorted run, and of a partition read back (the keys, the
#: value, their copies while sorted and the radix sort's work arrays), for a key of one
#: word; each further key word adds ``KEY_WORD_BYTES`` (benchmarks/README.md, "Trie and
#: small layouts").
RECORD_BYTES = 72
KEY_WORD_BYTES = 32
#: Working bytes an entry of a layout's chunk (the small layout's codes and bit lengths
#: of each field, positions, values).
ENTRY_BYTES = 208
#: Fixed bytes a word of the vocabulary (its rank, count and the small layout's code
#: tables of words).
VOCABULARY_BYTES = 64
#: The scratch directory of a build, inside the layout's directory.
SCRATCH = "trie.tmp"
#: How many times ``progress`` advances by each link (the scan, the stream).
PROGRESS_PASSES = 2
#: The least working memory: a run or a partition of this many records.
MIN_RECORDS = 1024
#: Records of a run, a partition or a sort at most, and entries of a layout's chunk,
#: whatever the budget: larger ones build no faster, and a budget's worth of them made
#: the build's peak grow with the model until the budget.
MAX_RECORDS = 1 << 23


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes from a memory budget: records a sorted run and a partition, links a chunk
    of the scan, entries a chunk of a layout's pass."""

    run_records: int
    partition_records: int
    scan_links: int
    chunk_entries: int
    sort_memory: int

    def records(self, width):
        """Records of a sort of keys of ``width`` words that the budget holds."""
        return _records(self.sort_memory // record_bytes(width))


def record_bytes(width):
    """Working bytes a record of a sort of ``width``-word keys."""
    return RECORD_BYTES + KEY_WORD_BYTES * (width - 1)


def key_shape(radix, slots, tags):
    """``(tag bits, slot bits, key words)`` of the n-gram sort keys."""
    tag_bits = (tags - 1).bit_length()
    slot_bits = int(radix).bit_length()  # ranks plus one, up to radix
    return tag_bits, slot_bits, max(1, math.ceil((tag_bits + slots * slot_bits) / 64))


def plan(memory, radix, width, where, layout):
    """The :class:`Plan` of ``memory`` bytes of working memory; a one-line error when
    it cannot hold the vocabulary's arrays and the smallest run."""
    fixed = VOCABULARY_BYTES * radix
    record = record_bytes(width)
    need = fixed + MIN_RECORDS * max(record, ENTRY_BYTES)
    if memory < need:
        raise SnmInputError(
            f"{where}: building the {layout} layout needs at least "
            f"{memory_budget.format_bytes(need)} of working memory (the vocabulary's "
            f"arrays {memory_budget.format_bytes(fixed)}, and the smallest sort run); give "
            f"--memory {memory_budget.round_up(need + memory_budget.PROCESS_BYTES)} or more")
    left = memory - fixed
    records = _records(left // record)
    return Plan(run_records=records, partition_records=records,
                scan_links=max(MIN_RECORDS, records // 8),
                chunk_entries=_records(left // ENTRY_BYTES), sort_memory=left)


def _records(fit):
    """``fit`` records (or entries), kept within MIN_RECORDS and MAX_RECORDS."""
    return min(MAX_RECORDS, max(MIN_RECORDS, fit))


def model_plan(model_dir, manifest, layout, memory=None):
    """The :class:`Plan` of building a model's trie within ``memory`` bytes of working
    memory (default the default budget's :meth:`~snm_core.io.memory.MemoryBudget.working`)."""
    radix = int(manifest["vocabulary_size"])
    width = key_shape(radix, ngram_span(manifest, model_dir, layout)[1] + 1,
                      len(manifest["tags"]))[2]
    return plan(memory_budget.MemoryBudget.parse().working() if memory is None
                else int(memory), radix, width, model_dir,
                layout)


@dataclasses.dataclass
class ExternalTrie:
    """A model's trie as files on scratch: each position p's entries (order j of tag t
    at ``p = t * (max_n + 1) + j - 1``), keys and values, in order.

    Attributes
    ----------
    directory : str, the scratch directory (:meth:`remove` deletes it)
    counts : list of int, entries at each position
    rank : int64 (vocabulary size,), each word's rank (``radix`` = vocabulary size)
    seen : bool (vocabulary size,), the words the empty context predicts
    plan : Plan, the sizes the budget gave
    """

    directory: str
    counts: list
    rank: np.ndarray
    seen: np.ndarray
    radix: int
    min_n: int
    max_n: int
    tags: int
    plan: Plan

    @classmethod
    def build(cls, model_dir, manifest, layout, scratch, memory=None, progress=None):
        """The trie of a model directory (its ``manifest``), built in the local directory
        ``scratch`` within ``memory`` bytes of working memory (default
        the default budget's :meth:`~snm_core.io.memory.MemoryBudget.working`); ``progress`` (:class:`snm_core.io.progress.Progress`)
        advances by every link :data:`PROGRESS_PASSES` times, in the scan and in the
        stream."""
        min_n, max_n = ngram_span(manifest, model_dir, layout)
        radix, tags = int(manifest["vocabulary_size"]), len(manifest["tags"])
        slots = max_n + 1
        tag_bits, slot_bits, width = key_shape(radix, slots, tags)
        sizes = model_plan(model_dir, manifest, layout, memory)
        shutil.rmtree(scratch, ignore_errors=True)
        os.makedirs(scratch)
        trie = cls(scratch, [0] * (tags * slots), None, None, radix, min_n, max_n, tags, sizes)
        try:
            trie.rank, trie.seen = _ranks(model_dir, manifest, sizes.scan_links)
            runs = SortedRuns(os.path.join(scratch, "runs"), width, {"m": np.float32},
                              sizes.run_records, sizes.partition_records,
                              int(manifest["totals"]["links"]))
            for features, links in _model_chunks(model_dir, manifest, sizes.scan_links,
                                                 ["words", "diversity", "tag"]):
                words = features["words"]
                keys, longest = kernels.gram_keys(
                    words.offsets.to_numpy(), words.values.to_numpy(),
                    features["diversity"], features["tag"], links["word"], trie.rank,
                    tag_bits, slot_bits, slots, width)
                if longest >= slots:
                    raise SnmInputError(f"{model_dir}: a feature of {longest} words in a "
                                        f"{max_n + 1}-gram model; re-run snm apply")
                runs.add(keys, {"m": links["m"]})
                if progress is not None:
                    progress.update(len(keys))
            runs.finish()
            trie._stream(runs, tag_bits, slot_bits, progress, model_dir)
            runs.remove()
        except BaseException:
            trie.remove()
            raise
        return trie

    def _stream(self, runs, tag_bits, slot_bits, progress, model_dir):
        """Append every order's entries to its files from the sorted n-grams."""
        slots = self.max_n + 1
        state = {name: np.zeros(slots, np.int64) for name in ("digit", "ident", "count")}
        files, tag = [], -1
        piece = max(MIN_RECORDS, self.plan.partition_records // 4)
        try:
            for part in runs.partitions():
                keys, m = part["keys"], part["m"]
                tags = kernels.key_tags(keys, tag_bits)
                bounds = np.flatnonzero(np.diff(tags)) + 1
                for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(keys)]):
                    if hi <= lo:
                        continue
                    if tags[lo] != tag:  # a tag's trie starts from nothing
                        self._close(files, tag, state["count"])
                        tag = int(tags[lo])
                        for values in state.values():
                            values[:] = 0
                        files = [(open(self._path(tag * slots + j, "keys"), "wb"),
                                  open(self._path(tag * slots + j, "values"), "wb"))
                                 for j in range(slots)]
                    for start in range(lo, hi, piece):
                        end = min(hi, start + piece)
                        out_keys = np.empty((slots, end - start), np.int64)
                        out_values = np.empty((slots, end - start), np.float32)
                        out_count = np.zeros(slots, np.int64)
                        repeated = kernels.trie_stream(
                            keys[start:end], m[start:end], tag_bits, slot_bits, self.radix,
                            state["digit"], state["ident"], state["count"], out_keys,
                            out_values, out_count)
                        if repeated:
                            raise SnmInputError(f"{model_dir}: an n-gram stored twice in one "
                                                "tag; re-run snm apply")
                        for j, (keys_out, values_out) in enumerate(files):
                            out_keys[j, :out_count[j]].tofile(keys_out)
                            out_values[j, :out_count[j]].tofile(values_out)
                if progress is not None:
                    progress.update(len(keys))
            self._close(files, tag, state["count"])
        finally:
            for pair in files:
                for f in pair:
                    f.close()

    def _close(self, files, tag, count):
        for pair in files:
            for f in pair:
                f.close()
        if tag >= 0:
            slots = self.max_n + 1
            self.counts[tag * slots:(tag + 1) * slots] = [int(n) for n in count]

    def _path(self, p, name):
        return os.path.join(self.directory, f"order{p}.{name}")

    def contexts(self, p):
        """How many contexts the entries of position p have: the entries of the order
        below (one, the empty context, below order 1)."""
        return 1 if p % (self.max_n + 1) == 0 else self.counts[p - 1]

    def entries(self, p, chunk=None):
        """The entries of position p in order, ``(keys int64, values float32)`` chunks of
        ``chunk`` (default the plan's)."""
        chunk = chunk or self.plan.chunk_entries
        for first in range(0, self.counts[p], chunk):
            n = min(chunk, self.counts[p] - first)
            yield (np.fromfile(self._path(p, "keys"), np.int64, n, offset=8 * first),
                   np.fromfile(self._path(p, "values"), np.float32, n, offset=4 * first))

    @property
    def total(self):
        """Entries in all."""
        return sum(self.counts)

    def remove(self):
        shutil.rmtree(self.directory, ignore_errors=True)


def _ranks(model_dir, manifest, chunk_links):
    """Each word's rank by how often it is predicted (ties by id), and the words the
    empty context predicts: one pass over the links."""
    radix = manifest["vocabulary_size"]
    predicted = np.zeros(radix, np.int64)
    seen = np.zeros(radix, bool)
    for features, links in _model_chunks(model_dir, manifest, chunk_links,
                                         ["words", "diversity"]):
        word = links["word"]
        predicted += np.bincount(word, minlength=radix)
        empty = np.diff(features["words"].offsets.to_numpy()) == 0
        seen[word[np.repeat(empty, features["diversity"])]] = True
    rank = np.empty(radix, dtype=np.int64)
    rank[np.argsort(-predicted, kind="stable")] = np.arange(radix)
    return rank, seen


def _model_chunks(model_dir, manifest, chunk_links, columns):
    """``(features, links)`` of every model bucket, about ``chunk_links`` links at a
    time (a feature's links never split): the features' ``columns`` (numpy, but a
    pyarrow list array for ``words``) and their links' ``word`` and ``m``."""
    num_buckets = int(manifest["num_buckets"])
    for bucket in range(num_buckets):
        yield from model_files.bucket_chunks(model_dir, bucket, num_buckets, columns,
                                             ["word", "m"], chunk_links)
