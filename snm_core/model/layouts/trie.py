"""The trie layout of ``compact/``: an n-gram model's trie in plain arrays, for speed.

The trie of :mod:`snm_core.model.layouts.ngram_trie` as KenLM's trie stores it, without
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

About as many bytes a link as KenLM's trie (benchmarks/README.md, "Trie and
small layouts"); n-gram configurations only (tagged too), and no unadjusted
model (c(w|f)).
"""

import numpy as np

from snm_core.io.errors import SnmInputError
from snm_core.model.layouts.ngram_trie import Trie, TrieScoring, order_starts, write_arrays
from snm_core.model.layouts.npy import load_checked

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
    """Write the trie layout of a model into the local ``directory``; returns the
    compact manifest.  ``memory`` (bytes of working memory) and ``progress`` (a pass's
    :class:`~snm_core.io.progress.Progress`): :func:`snm_core.model.compact.build_resources`."""
    from snm_core.model.layouts import trie_kernels  # numba: loaded by building and scoring only
    trie = Trie.of_model(model_dir, manifest, "trie")
    if max(len(k) for k in trie.keys) > np.iinfo(np.uint32).max:
        raise SnmInputError(f"{model_dir}: an order with 2**32 entries or more: too many for "
                            "the trie layout; use --layout hashed")
    starts_by_order, m_star = [], []  # per order (of each tag): of the contexts below it
    for p, entries_of_order in enumerate(trie.keys):
        contexts, starts, ends = trie.context_runs(p)
        n_contexts = trie.contexts(p)
        # Where each context's entries start (one record more: the last one's end); a
        # context without entries starts (and ends) where the next one with entries does.
        start = np.full(n_contexts + 1, len(entries_of_order), dtype=np.int64)
        start[contexts] = starts
        starts_by_order.append(np.minimum.accumulate(start[::-1])[::-1])
        sums = np.zeros(n_contexts + 1)  # the extra record's M* is never read
        sums[contexts] = trie_kernels.run_sums(trie.values[p].astype(np.float64), starts, ends)
        m_star.append(sums)
    distinct, index = np.unique(np.concatenate(m_star), return_inverse=True)
    context_type = _smallest(CONTEXT_TYPES, len(distinct) - 1, "m_star")
    contexts = np.empty(len(index), dtype=context_type)
    contexts["start"] = np.concatenate(starts_by_order)
    contexts["m_star"] = index
    entry_type = _smallest(ENTRY_TYPES, trie.radix - 1, "word")
    entries = np.empty(sum(len(k) for k in trie.keys), dtype=entry_type)
    entries["word"] = np.concatenate([k % trie.radix for k in trie.keys])
    entries["value"] = np.concatenate(trie.values)
    arrays = {"entries": entries, "order_entries": order_starts(trie.keys),
              "contexts": contexts, "order_contexts": order_starts(starts_by_order),
              "m_star_values": distinct,
              "word_rank": trie.rank, "seen_words": trie.seen}
    return write_arrays(arrays, directory, manifest, TRIE_LAYOUT, trie, {})


def load_trie(compact_dir, compact, vocabulary_size, mmap=True):
    """The arrays of a local trie-layout ``compact/`` directory, each checked, and
    ``first_order``, each tag's empty-context entries by word rank."""
    orders = compact["tags"] * (compact["max_n"] + 1)
    expected = {"entries": (ENTRY_TYPES, None), "order_entries": (np.int64, orders + 2),
                "contexts": (CONTEXT_TYPES, None), "order_contexts": (np.int64, orders + 2),
                "m_star_values": (np.float64, None),
                "word_rank": (np.int64, vocabulary_size),
                "seen_words": (np.bool_, vocabulary_size)}
    arrays = load_checked(compact_dir, TRIE_FILES, expected, lambda a: (
        a["order_entries"][-1] == len(a["entries"])
        and a["order_contexts"][-1] == len(a["contexts"])), mmap)
    # Each tag's empty context's entries by word rank (-1: none), for a direct lookup.
    first_order = np.full((compact["tags"], compact["radix"]), -1, dtype=np.int32)
    for tag in range(compact["tags"]):
        order = tag * (compact["max_n"] + 1) + 1
        lo, hi = arrays["order_entries"][order], arrays["order_entries"][order + 1]
        words = arrays["entries"]["word"][lo:hi]
        if words.max(initial=0) >= compact["radix"]:
            raise SnmInputError(f"{compact_dir}: entries.npy holds a word outside the "
                                f"vocabulary; delete {compact_dir} to have it built again")
        first_order[tag, words] = np.arange(hi - lo)
    return {**arrays, "first_order": first_order}


class TrieModel(TrieScoring):
    """A model stored in the trie layout, loaded for scoring (adjusted probabilities)."""

    def __init__(self, manifest, vocab, compact, arrays):
        super().__init__(manifest, vocab, compact, arrays["seen_words"], arrays["word_rank"])
        from snm_core.model.layouts import trie_kernels  # numba: loaded by scoring only
        self._event_sums = trie_kernels.event_sums
        self._tables = tuple(arrays[name] for name in TRIE_FILES[:5]) + (arrays["first_order"],)
