"""The small layout of ``compact/``: an n-gram model's trie, entropy-coded.

The storage slides' context encoding, with SNM's values, on the trie of
:mod:`snm_core.scoring.layouts.ngram_trie`.  Per order, entries are written in blocks of
``BLOCK_ENTRIES``.  A block's first key and its bit offset are stored
plainly; every later entry is its context step (0: same context), then the
gap to the previous word (same context) or the word's rank (new context),
then its value, each with a canonical Huffman code per order and field
(:mod:`snm_core.scoring.layouts.huffman`); steps and gaps of ``ESCAPE`` or more are the
escape symbol followed by an Elias gamma code.

Values are rounded to a grid of ``VALUE_STEP`` in log space (relative error
at most ``VALUE_STEP / 2``, about 0.05%), and M_c* is the sum of the rounded
values of c's entries, so the stored model is still exactly normalised and a
probability moves by a factor of at most ``exp(VALUE_STEP)``: perplexity
within 0.1% of the float model, whatever the model.  M_c* is summed while a
block is decoded; contexts whose entries span blocks (the empty context,
frequent words) have it stored.  A lookup is a binary search of the block
keys and the decoding of one block; the empty context's entries, which every
event looks up, are decoded once when the model is loaded.

Built by external sort within a memory budget (:mod:`snm_core.scoring.layouts.trie_build`),
each order's entries read twice (the codes' frequencies, then the codes) and every
array written in order.  A few bytes a link, several times fewer than the hashed layout's
(benchmarks/README.md, "Trie and small layouts"); n-gram configurations only
(tagged too), and no unadjusted model (c(w|f)).
"""


import os

import numpy as np

from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts import huffman, trie_build_kernels, trie_loops
from snm_core.scoring.layouts.ngram_trie import TrieScoring, compact_manifest, order_starts
from snm_core.scoring.layouts.npy import NpyWriter, load_checked, rebuild_remedy
from snm_core.scoring.layouts.trie_build import SCRATCH, ExternalTrie

#: Name of the layout in ``compact/manifest.json``, with its version.
SMALL_LAYOUT = "small-2"
BLOCK_ENTRIES = 64
#: Values are rounded to multiples of this in log space.
VALUE_STEP = 2.0 ** -10
#: Context steps and word gaps of this or more are coded as escape + gamma code.
ESCAPE = 1 << 12
SMALL_FILES = ("bits", "block_keys", "block_offsets", "order_blocks", "order_entries",
               "span_context", "span_sum", "order_spans", "code_limit", "code_first",
               "code_base", "code_symbols", "level_values", "word_rank", "seen_words")
#: Built on load (:func:`load_small`): each tag's empty-context entries by word rank.
FIRST_ORDER = ("first_entry", "first_value", "first_m_star")
#: The fields of an entry, each with a code per order: code id = 4 * (order - 1) + field
#: (context step, word gap, word, value; trie_loops.c reads them so).
FIELDS = 4
_FIELD_COLUMNS = 5  # step code, step escape, word code, gap escape, value code


def _gamma_bits(x):
    """Bits of the Elias gamma code of each x >= 1."""
    return 2 * (np.floor(np.log2(np.maximum(x, 1)))).astype(np.int64) + 1


class _Codes:
    """The canonical codes of every (order, field), their decode tables concatenated."""

    def __init__(self):
        self.limit, self.first, self.base, self.symbols = [], [], [], []
        self._symbol_count = 0

    def add(self, frequencies):
        """A code for symbols with these frequencies; returns ``(codes, lengths)`` per symbol."""
        lengths = huffman.code_lengths(frequencies)
        table = huffman.DecodeTable.of(lengths)
        self.limit.append(table.limit)
        self.first.append(table.first)
        self.base.append(table.base + self._symbol_count)
        self.symbols.append(table.symbols)
        self._symbol_count += len(table.symbols)
        return huffman.canonical_codes(lengths), lengths

    def arrays(self):
        return {"code_limit": np.stack(self.limit), "code_first": np.stack(self.first),
                "code_base": np.stack(self.base),
                "code_symbols": np.concatenate(self.symbols).astype(np.int64)}


class _OrderCodes:
    """One order's codes (:class:`_Codes` records them): each field's code words and
    lengths by symbol, from the frequencies of a first pass over its entries."""

    def __init__(self, frequencies, codes):
        self.step, self.gap, self.word, self.value = (codes.add(f) for f in frequencies)

    def encode(self, keys, levels, base, radix):
        """Fields and bit lengths (n, 5) of a chunk of the order's entries (``base``,
        its first, a multiple of ``BLOCK_ENTRIES``), ``levels`` their value symbols."""
        n = len(keys)
        later, step, gap, context, word = _steps(keys, base, radix)
        same = later & (step == 0)
        new = later & (step > 0)
        fields = np.zeros((n, _FIELD_COLUMNS), dtype=np.uint64)
        lengths = np.zeros((n, _FIELD_COLUMNS), dtype=np.uint8)

        def escaped(rows, values, code, code_column, escape_column):
            symbol = np.minimum(values, ESCAPE)
            fields[rows, code_column] = code[0][symbol]
            lengths[rows, code_column] = code[1][symbol]
            over = values >= ESCAPE
            extra = values[over] - ESCAPE + 1
            fields[rows[over], escape_column] = extra.astype(np.uint64)
            lengths[rows[over], escape_column] = _gamma_bits(extra)

        rows = np.flatnonzero(later)
        escaped(rows, step[rows], self.step, 0, 1)
        rows = np.flatnonzero(same)
        escaped(rows, gap[rows], self.gap, 2, 3)
        fields[new, 2] = self.word[0][word[new]]
        lengths[new, 2] = self.word[1][word[new]]
        fields[:, 4] = self.value[0][levels]
        lengths[:, 4] = self.value[1][levels]
        return fields, lengths, context


def _steps(keys, base, radix):
    """``(later, step, gap, context, word)`` of a chunk of an order's entries from entry
    ``base`` (a multiple of ``BLOCK_ENTRIES``: the chunk starts a block): whether each
    is not the first of its block, its context step and word gap from the one before."""
    context, word = keys // radix, keys % radix
    later = (base + np.arange(len(keys))) % BLOCK_ENTRIES != 0
    step = np.zeros(len(keys), dtype=np.int64)
    step[1:] = np.diff(context)
    gap = np.zeros(len(keys), dtype=np.int64)
    gap[1:] = np.diff(word)
    return later, step, gap, context, word


def _levels(values):
    """Each present (positive) value's level on the log grid, and which are present."""
    present = values > 0
    return np.rint(np.log(values[present].astype(np.float64)) / VALUE_STEP).astype(
        np.int64), present


def _frequencies(trie, p, chunk, n_levels):
    """A first pass over position p's entries: the frequencies of each field's symbols,
    and its grid of levels (the value symbols n_levels + its index, 0 for no value)."""
    radix = trie.radix
    step_f, gap_f = np.zeros(ESCAPE + 1, np.int64), np.zeros(ESCAPE + 1, np.int64)
    word_f = np.zeros(radix, np.int64)
    grid, grid_counts, absent = np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    previous, base = None, 0
    for keys, values in trie.entries(p, chunk):
        later, step, gap, context, word = _steps(keys, base, radix)
        if previous is not None:  # across chunks, as one order's diff has them
            step[0], gap[0] = context[0] - previous[0], word[0] - previous[1]
        if max(step.max(initial=0), gap.max(initial=0)) >= 1 << 31:
            raise SnmInputError("a context step or word gap of 2**31 or more: too large for "
                                "the small layout; use --layout trie or hashed")
        previous = context[-1], word[-1]
        same, new = later & (step == 0), later & (step > 0)
        step_f += np.bincount(np.minimum(step[later], ESCAPE), minlength=ESCAPE + 1)
        gap_f += np.bincount(np.minimum(gap[same], ESCAPE), minlength=ESCAPE + 1)
        word_f += np.bincount(word[new], minlength=radix)
        level, present = _levels(values)
        absent += len(values) - int(np.count_nonzero(present))
        grid, inverse = np.unique(np.concatenate([grid, level]), return_inverse=True)
        grid_counts = np.bincount(inverse, weights=np.concatenate(
            [grid_counts, np.ones(len(level), np.int64)]), minlength=len(grid)).astype(np.int64)
        base += len(keys)
    value_f = np.zeros(n_levels + len(grid), np.int64)
    value_f[0], value_f[n_levels:] = absent, grid_counts
    return (step_f, gap_f, word_f, value_f), grid


def build_small(model_dir, manifest, directory, memory=None, progress=None):
    """Write the small layout of a model into the local ``directory`` within ``memory``
    bytes of working memory (default: the default budget's
    :meth:`~snm_core.io.memory.MemoryBudget.working`),
    the trie built by external sort (:mod:`snm_core.scoring.layouts.trie_build`; its
    ``progress``); returns the compact manifest."""
    trie = ExternalTrie.build(model_dir, manifest, "small", os.path.join(directory, SCRATCH),
                              memory, progress)
    try:
        return _write_small(trie, manifest, directory)
    finally:
        trie.remove()


def _write_small(trie, manifest, directory):
    """Each position's entries in two passes (the codes' frequencies, then the codes),
    every array written in order."""
    chunk = max(BLOCK_ENTRIES, trie.plan.chunk_entries // BLOCK_ENTRIES * BLOCK_ENTRIES)
    writers = {name: NpyWriter(os.path.join(directory, name + ".npy"), dtype) for name, dtype in (
        ("bits", np.uint64), ("block_keys", np.int64), ("block_offsets", np.int64),
        ("span_context", np.int64), ("span_sum", np.float64))}
    # Value symbols: 0 for no link, then each order's rounded levels (its own alphabet).
    level_values = [np.zeros(1)]
    n_levels = 1
    codes = _Codes()
    blocks, spans = [], []
    bit_base = 0
    for p in range(len(trie.counts)):
        frequencies, grid = _frequencies(trie, p, chunk, n_levels)
        order_codes = _OrderCodes(frequencies, codes)
        level_values.append(np.exp(grid * VALUE_STEP))
        spans.append(0)
        base = position = 0
        pending = np.uint64(0)  # the stream's last word, not yet full
        run = (-1, 0, 0.0)  # the run of entries of one context open at a chunk's end
        for keys, values in trie.entries(p, chunk):
            level, present = _levels(values)
            index = np.searchsorted(grid, level)
            symbols = np.zeros(len(keys), dtype=np.int64)
            symbols[present] = n_levels + index
            rounded = np.zeros(len(keys))
            rounded[present] = level_values[-1][index]
            fields, lengths, context = order_codes.encode(keys, symbols, base, trie.radix)
            entry_bits = lengths.sum(axis=1, dtype=np.int64)
            positions = np.empty(len(keys), dtype=np.int64)
            positions[0] = position
            np.cumsum(entry_bits[:-1], out=positions[1:])
            positions[1:] += position
            end = int(positions[-1] + entry_bits[-1])
            first_word = position // 64
            stream = trie_build_kernels.pack(fields, lengths, positions - 64 * first_word,
                                       (end + 63) // 64 - first_word)
            stream[0] |= pending
            full = end // 64 - first_word
            writers["bits"].append(stream[:full])
            pending = stream[full] if full < len(stream) else np.uint64(0)
            writers["block_keys"].append(keys[::BLOCK_ENTRIES])
            writers["block_offsets"].append(positions[::BLOCK_ENTRIES] + bit_base)
            *spanning, run_context, run_start, run_sum = trie_build_kernels.spanning_runs(
                context, rounded, base, BLOCK_ENTRIES, *run)
            run = (run_context, run_start, run_sum)
            _append_spans(writers, spans, *spanning)
            base += len(keys)
            position = end
            del fields, lengths
        if run[0] >= 0 and run[1] // BLOCK_ENTRIES != (base - 1) // BLOCK_ENTRIES:
            _append_spans(writers, spans, np.array([run[0]]), np.array([run[2]]))
        if position % 64:
            writers["bits"].append(np.array([pending]))
        bit_base += 64 * ((position + 63) // 64)
        blocks.append(-(-trie.counts[p] // BLOCK_ENTRIES))
        n_levels += len(grid)
    writers["bits"].append(np.zeros(2, dtype=np.uint64))  # readers look up to 64 bits ahead
    nbytes = {name: writer.close() for name, writer in writers.items()}
    bit_words = writers["bits"].n
    arrays = {
        "order_blocks": order_starts(blocks),
        "order_entries": np.array([0] + trie.counts, dtype=np.int64),
        "order_spans": order_starts(spans),
        **codes.arrays(),
        "level_values": np.concatenate(level_values),
        "word_rank": trie.rank,
        "seen_words": trie.seen,
    }
    for name, array in arrays.items():
        storage.write_npy(array, os.path.join(directory, name + ".npy"))
    return compact_manifest(SMALL_FILES, sum(nbytes.values()) + sum(
        a.nbytes for a in arrays.values()), manifest, SMALL_LAYOUT, trie, {
        "block_entries": BLOCK_ENTRIES, "escape": ESCAPE, "value_step": VALUE_STEP,
        "bit_words": bit_words})


def _append_spans(writers, spans, contexts, sums):
    writers["span_context"].append(contexts)
    writers["span_sum"].append(sums)
    spans[-1] += len(contexts)


def load_small(compact_dir, compact, vocabulary_size, mmap=True):
    """The arrays of a local small-layout ``compact/`` directory, each checked (dtype,
    shape): a damaged one is an :class:`SnmInputError` naming it; and
    :data:`FIRST_ORDER`, the empty context's entries decoded."""
    orders = compact["tags"] * (compact["max_n"] + 1)
    codes = (FIELDS * orders, huffman.MAX_CODE_BITS + 1)
    expected = {"order_blocks": (np.int64, orders + 2), "order_entries": (np.int64, orders + 1),
                "order_spans": (np.int64, orders + 2), "word_rank": (np.int64, vocabulary_size),
                "seen_words": (np.bool_, vocabulary_size),
                "bits": (np.uint64, compact["bit_words"]),
                "block_keys": (np.int64, None), "block_offsets": (np.int64, None),
                "span_context": (np.int64, None), "span_sum": (np.float64, None),
                "code_symbols": (np.int64, None), "level_values": (np.float64, None),
                "code_limit": (np.uint64, codes), "code_first": (np.int64, codes),
                "code_base": (np.int64, codes)}
    remedy = rebuild_remedy(compact_dir, "small")
    arrays = load_checked(compact_dir, SMALL_FILES, expected, lambda a: (
        len(a["block_keys"]) == a["order_blocks"][-1] == len(a["block_offsets"])
        and len(a["span_sum"]) == len(a["span_context"])
        and a["block_offsets"].max(initial=0) < 64 * len(a["bits"])), mmap, remedy)
    # Every event looks its word up in the empty context: decoded once, here.
    *first_order, intact = trie_loops.small_first_order(
        compact["tags"], compact["max_n"], trie_loops.Tables.of_small(arrays, compact))
    if not intact:
        raise SnmInputError(f"{compact_dir}: bits.npy decodes to a word outside the "
                            f"vocabulary; {remedy}")
    return {**arrays, **dict(zip(FIRST_ORDER, first_order))}


class SmallModel(TrieScoring):
    """A model stored in the small layout, loaded for scoring (adjusted probabilities)."""

    def __init__(self, manifest, vocab, compact, arrays):
        super().__init__(manifest, vocab, compact, arrays["seen_words"], arrays["word_rank"])
        self._tables = trie_loops.Tables.of_small(arrays, compact,
                                               [arrays[name] for name in FIRST_ORDER])
