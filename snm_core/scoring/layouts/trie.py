"""The trie layout of ``compact/``: an n-gram model's trie in plain arrays, for speed.

The trie of :mod:`snm_core.scoring.layouts.ngram_trie` as KenLM's trie stores it, without
its bit packing.  ``entries``: per order, each entry's word rank (uint16
when the vocabulary allows, else uint32) beside its M (float32), sorted by
context then word.  ``contexts``: per context (an entry of orders 0 .. N-1),
where its entries start in the next order (uint32) beside its M* (an index
into ``m_star_values``, the distinct M*: uint16 when there are at most 65,536,
else uint32).  Records are packed (6 bytes with the small types) so that what
a lookup reads together sits together: a lookup is one context record, then
a binary search of the context's entries whose last probe holds the value.
M* is the float64 sum of the context's stored values, so the stored model is
exactly normalised.

Built by external sort within a memory budget
(:mod:`snm_core.scoring.layouts.trie_build`), the arrays written in order.  About as
many bytes a link as KenLM's trie (benchmarks/README.md, "Trie and small layouts");
n-gram configurations only (tagged too), and no unadjusted model (c(w|f)).
"""

import os

import numpy as np

from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts import trie_build_kernels, trie_loops
from snm_core.scoring.layouts.ngram_trie import TrieScoring, compact_manifest, order_starts
from snm_core.scoring.layouts.npy import NpyWriter, load_checked, rebuild_remedy
from snm_core.scoring.layouts.sorted_runs import SortedRuns
from snm_core.scoring.layouts.trie_build import SCRATCH, ExternalTrie

#: Name of the layout in ``compact/manifest.json``, with its version.
TRIE_LAYOUT = "trie-3"
TRIE_FILES = ("entries", "order_entries", "contexts", "order_contexts", "m_star_values",
              "word_rank", "seen_words")


def record(first, first_type, second, second_type):
    """A packed record dtype of two fields."""
    return np.dtype([(first, first_type), (second, second_type)], align=False)


ENTRY_TYPES = tuple(record("word", w, "value", np.float32) for w in (np.uint16, np.uint32))
CONTEXT_TYPES = tuple(record("start", np.uint32, "m_star", i) for i in (np.uint16, np.uint32))


def _smallest(types, largest, field):
    return next(t for t in types if largest <= np.iinfo(t[field]).max)


def build_trie(model_dir, manifest, directory, memory=None, progress=None):
    """Write the trie layout of a model into the local ``directory`` within ``memory``
    bytes of working memory (default: the default budget's
    :meth:`~snm_core.io.memory.MemoryBudget.working`),
    the trie built by external sort (:mod:`snm_core.scoring.layouts.trie_build`; its
    ``progress``); returns the compact manifest."""
    trie = ExternalTrie.build(model_dir, manifest, "trie", os.path.join(directory, SCRATCH),
                              memory, progress)
    try:
        if max(trie.counts) > np.iinfo(np.uint32).max:
            raise SnmInputError(f"{model_dir}: an order with 2**32 entries or more: too many "
                                "for the trie layout; use --layout hashed")
        return _write_trie(trie, manifest, directory)
    finally:
        trie.remove()


def _write_trie(trie, manifest, directory):
    """The arrays, in order: each order's entries, and each context's record (where its
    entries start, the index of its M*, the float64 sum of their values, among the
    distinct M* sorted: an external sort of (M*, place))."""
    chunk = trie.plan.chunk_entries
    entry_type = _smallest(ENTRY_TYPES, trie.radix - 1, "word")
    entries = NpyWriter(os.path.join(directory, "entries.npy"), entry_type, trie.total)
    starts_path = os.path.join(trie.directory, "starts")
    records = trie.plan.records(2) // 2  # half the budget: a chunk of entries is held too
    n_contexts = [trie.contexts(p) + 1 for p in range(len(trie.counts))]
    m_stars = SortedRuns(os.path.join(trie.directory, "m_star"), 2, {}, records, records,
                         sum(n_contexts))
    out_start, out_sum = np.empty(chunk, np.int64), np.empty(chunk)
    place = 0
    with open(starts_path, "wb") as starts:

        def emit(k):
            nonlocal place
            out_start[:k].astype(np.uint32).tofile(starts)
            m_stars.add(np.stack([out_sum[:k].view(np.uint64),
                                  np.arange(place, place + k, dtype=np.uint64)], axis=1), {})
            place += k

        for p in range(len(trie.counts)):
            last = trie.contexts(p)
            c, open_start, open_sum, base = 0, -1, 0.0, 0
            for context, values in _contexts_then_end(trie, p, chunk, entries, entry_type):
                i, k = 0, chunk
                while k == chunk:
                    i, c, open_start, open_sum, k = trie_build_kernels.context_records(
                        context, values, i, base, c, last, open_start, open_sum, out_start,
                        out_sum)
                    emit(k)
                base += len(context)
            out_start[0], out_sum[0] = trie.counts[p], 0.0  # the extra record
            emit(1)
    entries_bytes = entries.close()
    m_stars.finish()
    distinct, ranks_path = _rank_m_stars(m_stars, trie.directory, directory)
    context_type = _smallest(CONTEXT_TYPES, distinct - 1, "m_star")
    contexts = NpyWriter(os.path.join(directory, "contexts.npy"), context_type, place)
    run_starts = m_stars.starts()
    for run in range(m_stars.runs):
        first, n = int(run_starts[run]), m_stars.sizes[run]
        record = np.empty(n, context_type)
        record["start"] = np.fromfile(starts_path, np.uint32, n, offset=4 * first)
        where = m_stars.read_run(run, "keys")[:, 1].astype(np.int64) - first
        record["m_star"][where] = np.fromfile(ranks_path, np.uint32, n, offset=4 * first)
        contexts.append(record)
    m_stars.remove()
    nbytes = entries_bytes + contexts.close() + 8 * distinct
    small = {"order_entries": order_starts(trie.counts),
             "order_contexts": order_starts(n_contexts),
             "word_rank": trie.rank, "seen_words": trie.seen}
    for name, array in small.items():
        storage.write_npy(array, os.path.join(directory, name + ".npy"))
    nbytes += sum(a.nbytes for a in small.values())
    return compact_manifest(TRIE_FILES, nbytes, manifest, TRIE_LAYOUT, trie, {})


def _contexts_then_end(trie, p, chunk, entries, entry_type):
    """Each chunk of position p's entries as ``(contexts, values)``, the entries written to
    ``entries`` on the way; then one entry past the last context, which closes every
    context left."""
    for keys, values in trie.entries(p, chunk):
        record = np.empty(len(keys), entry_type)
        record["word"] = keys % trie.radix
        record["value"] = values
        entries.append(record)
        yield keys // trie.radix, values
    yield np.array([trie.contexts(p)], np.int64), np.zeros(1, np.float32)


def _rank_m_stars(m_stars, scratch, directory):
    """Write the distinct M* in order to ``m_star_values.npy``, and each context's index
    among them, by place, to a scratch file; returns ``(distinct, that file)``."""
    writer = NpyWriter(os.path.join(directory, "m_star_values.npy"), np.float64)
    path = os.path.join(scratch, "m_star_ranks")
    run_starts = m_stars.starts()
    distinct, previous = 0, None
    with open(path, "wb") as ranks:
        for part in m_stars.partitions():
            value = part["keys"][:, 0]
            if not len(value):
                continue
            new = np.empty(len(value), bool)
            new[0] = previous is None or value[0] != previous
            new[1:] = value[1:] != value[:-1]
            writer.append(value[new].view(np.float64))
            rank = np.empty(len(value), np.uint32)
            rank[part["order"]] = distinct + np.cumsum(new) - 1
            distinct += int(np.count_nonzero(new))
            previous = value[-1]
            at = 0
            for run, lo, hi in part["slices"]:
                ranks.seek(4 * int(run_starts[run] + lo))
                rank[at:at + hi - lo].tofile(ranks)
                at += hi - lo
    writer.close()
    return distinct, path


def load_trie(compact_dir, compact, vocabulary_size, mmap=True):
    """The arrays of a local trie-layout ``compact/`` directory, each checked, and
    ``first_order``, each tag's empty-context entries by word rank."""
    orders = compact["tags"] * (compact["max_n"] + 1)
    expected = {"entries": (ENTRY_TYPES, None), "order_entries": (np.int64, orders + 2),
                "contexts": (CONTEXT_TYPES, None), "order_contexts": (np.int64, orders + 2),
                "m_star_values": (np.float64, None),
                "word_rank": (np.int64, vocabulary_size),
                "seen_words": (np.bool_, vocabulary_size)}
    remedy = rebuild_remedy(compact_dir, "trie")
    arrays = load_checked(compact_dir, TRIE_FILES, expected, lambda a: (
        a["order_entries"][-1] == len(a["entries"])
        and a["order_contexts"][-1] == len(a["contexts"])), mmap, remedy)
    # Each tag's empty context's entries by word rank (-1: none), for a direct lookup.
    first_order = np.full((compact["tags"], compact["radix"]), -1, dtype=np.int32)
    for tag in range(compact["tags"]):
        order = tag * (compact["max_n"] + 1) + 1
        lo, hi = arrays["order_entries"][order], arrays["order_entries"][order + 1]
        words = arrays["entries"]["word"][lo:hi]
        if words.max(initial=0) >= compact["radix"]:
            raise SnmInputError(f"{compact_dir}: entries.npy holds a word outside the "
                                f"vocabulary; {remedy}")
        first_order[tag, words] = np.arange(hi - lo)
    return {**arrays, "first_order": first_order}


class TrieModel(TrieScoring):
    """A model stored in the trie layout, loaded for scoring (adjusted probabilities)."""

    def __init__(self, manifest, vocab, compact, arrays):
        super().__init__(manifest, vocab, compact, arrays["seen_words"], arrays["word_rank"])
        self._tables = trie_loops.Tables.of_trie(arrays, compact)
