"""The trie layout of ``compact/``: an n-gram model's trie in plain arrays, for speed.

The trie of :mod:`snm_core.ngram_trie` as KenLM's trie stores it, without
its bit packing: per order, each entry's word rank (uint16 when the
vocabulary allows, else uint32) and M (float32), sorted by context then
word; per context (an entry of orders 0 .. N-1), where its entries start in
the next order (uint32) and its M* (an index into the distinct M* values,
uint16 when there are at most 65,536 of them).  A lookup is a binary search
of the context's words; M* is the float64 sum of the context's stored
values, so the stored model is exactly normalised.

Kernel 5-gram: 10.0 bytes a link (KenLM's trie 10.4); n-gram configurations
of one corpus tag only, and no unadjusted model (c(w|f)).
"""

import numpy as np

from snm_core.errors import SnmInputError
from snm_core.ngram_trie import Trie, TrieScoring, load_arrays
from snm_core.small_layout import write_arrays

#: Name of the layout in ``compact/manifest.json``, with its version.
TRIE_LAYOUT = "trie-1"
TRIE_FILES = ("words", "values", "order_entries", "child_start", "order_contexts",
              "m_star_index", "m_star_values", "order_m_star", "word_rank", "seen_words")


def _smallest(dtypes, largest):
    return next(d for d in dtypes if largest <= np.iinfo(d).max)


def build_trie(model_dir, manifest, directory):
    """Write the trie layout of a model into the local ``directory``; returns the
    compact manifest."""
    from snm_core import trie_kernels  # numba: loaded by building and scoring only
    trie = Trie.of_model(model_dir, manifest, "trie")
    word_dtype = _smallest((np.uint16, np.uint32), trie.radix - 1)
    if max(len(k) for k in trie.keys) > np.iinfo(np.uint32).max:
        raise SnmInputError(f"{model_dir}: an order with 2**32 entries or more: too many for "
                            "the trie layout; use --layout hashed")
    child_start, m_star = [], []  # per order j = 1 .. N: of the contexts of order j - 1
    for j in range(1, trie.max_n + 2):
        contexts, starts, ends = trie.context_runs(j)
        n_contexts = len(trie.keys[j - 2]) if j > 1 else 1
        # Where each context's entries start: one without entries starts (and ends)
        # where the next one with entries does.
        start = np.full(n_contexts + 1, len(trie.keys[j - 1]), dtype=np.int64)
        start[contexts] = starts
        child_start.append(np.minimum.accumulate(start[::-1])[::-1].astype(np.uint32))
        sums = np.zeros(n_contexts)
        sums[contexts] = trie_kernels.run_sums(trie.values[j - 1].astype(np.float64), starts,
                                               ends)
        m_star.append(sums)
    distinct, index = np.unique(np.concatenate(m_star), return_inverse=True)
    index_dtype = _smallest((np.uint16, np.uint32), len(distinct) - 1)

    def bounds(parts):
        return np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)

    arrays = {
        "words": np.concatenate([k % trie.radix for k in trie.keys]).astype(word_dtype),
        "values": np.concatenate(trie.values),
        "order_entries": np.r_[0, bounds(trie.keys)],  # order j starts at [j]
        "child_start": np.concatenate(child_start),
        "order_contexts": np.r_[0, bounds(child_start)],
        "m_star_index": index.astype(index_dtype),
        "m_star_values": distinct,
        "order_m_star": bounds(m_star),  # contexts of order k start at [k]
        "word_rank": trie.rank,
        "seen_words": trie.seen,
    }
    return write_arrays(arrays, directory, manifest, TRIE_LAYOUT, trie, {})


def load_trie(compact_dir, compact, vocabulary_size, mmap=True):
    """The arrays of a local trie-layout ``compact/`` directory, each checked."""
    orders = compact["max_n"] + 1
    expected = {"words": ((np.uint16, np.uint32), None), "values": (np.float32, None),
                "order_entries": (np.int64, orders + 2), "child_start": (np.uint32, None),
                "order_contexts": (np.int64, orders + 2),
                "m_star_index": ((np.uint16, np.uint32), None),
                "m_star_values": (np.float64, None), "order_m_star": (np.int64, orders + 1),
                "word_rank": (np.int64, vocabulary_size),
                "seen_words": (np.bool_, vocabulary_size)}
    return load_arrays(compact_dir, TRIE_FILES, expected, lambda a: (
        len(a["words"]) == len(a["values"]) == a["order_entries"][-1]
        and a["order_contexts"][-1] == len(a["child_start"])
        and a["order_m_star"][-1] == len(a["m_star_index"])), mmap)


class TrieModel(TrieScoring):
    """A model stored in the trie layout, loaded for scoring (adjusted probabilities)."""

    def __init__(self, manifest, vocab, compact, arrays):
        super().__init__(manifest, vocab, compact, arrays["seen_words"], arrays["word_rank"])
        from snm_core import trie_kernels  # numba: loaded by scoring only
        self._event_sums = trie_kernels.trie_event_sums
        self._tables = tuple(arrays[name] for name in TRIE_FILES[:8])
