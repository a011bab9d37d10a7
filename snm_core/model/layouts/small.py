"""The small layout of ``compact/``: an n-gram model's trie, entropy-coded.

The storage slides' context encoding, with SNM's values, on the trie of
:mod:`snm_core.model.layouts.ngram_trie`.  Per order, entries are written in blocks of
``BLOCK_ENTRIES``.  A block's first key and its bit offset are stored
plainly; every later entry is its context step (0: same context), then the
gap to the previous word (same context) or the word's rank (new context),
then its value, each with a canonical Huffman code per order and field
(:mod:`snm_core.model.layouts.huffman`); steps and gaps of ``ESCAPE`` or more are the
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

A few bytes a link, several times fewer than the hashed layout's
(benchmarks/README.md, "Trie and small layouts"); n-gram configurations only
(tagged too), and no unadjusted model (c(w|f)).
"""


import numpy as np

from snm_core.io.errors import SnmInputError
from snm_core.model.layouts import huffman
from snm_core.model.layouts.ngram_trie import Trie, TrieScoring, order_starts, write_arrays
from snm_core.model.layouts.npy import load_checked

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


def _encode_order(keys, levels, radix, n_levels, codes):
    """Fields and bit lengths (n, 5) of one order's sorted entries, and their
    codes' frequencies recorded in ``codes``."""
    n = len(keys)
    context, word = keys // radix, keys % radix
    later = np.arange(n) % BLOCK_ENTRIES != 0
    step = np.zeros(n, dtype=np.int64)
    step[1:] = np.diff(context)
    gap = np.zeros(n, dtype=np.int64)
    gap[1:] = np.diff(word)
    same = later & (step == 0)
    new = later & (step > 0)
    if max(step.max(initial=0), gap.max(initial=0)) >= 1 << 31:
        raise SnmInputError("a context step or word gap of 2**31 or more: too large for "
                            "the small layout; use --layout trie or hashed")
    fields = np.zeros((n, _FIELD_COLUMNS), dtype=np.uint64)
    lengths = np.zeros((n, _FIELD_COLUMNS), dtype=np.uint8)

    def escaped(rows, values, code_column, escape_column):
        symbol = np.minimum(values, ESCAPE)
        code, length = codes.add(np.bincount(symbol, minlength=ESCAPE + 1))
        fields[rows, code_column] = code[symbol]
        lengths[rows, code_column] = length[symbol]
        over = values >= ESCAPE
        extra = values[over] - ESCAPE + 1
        fields[rows[over], escape_column] = extra.astype(np.uint64)
        lengths[rows[over], escape_column] = _gamma_bits(extra)

    rows = np.flatnonzero(later)
    escaped(rows, step[rows], 0, 1)
    rows = np.flatnonzero(same)
    escaped(rows, gap[rows], 2, 3)
    code, length = codes.add(np.bincount(word[new], minlength=radix))
    fields[new, 2] = code[word[new]]
    lengths[new, 2] = length[word[new]]
    code, length = codes.add(np.bincount(levels, minlength=n_levels))
    fields[:, 4] = code[levels]
    lengths[:, 4] = length[levels]
    return fields, lengths


def build_small(model_dir, manifest, directory, memory=None, progress=None):
    """Write the small layout of a model into the local ``directory``; returns the
    compact manifest.  ``memory`` (bytes of working memory) and ``progress`` (a pass's
    :class:`~snm_core.io.progress.Progress`): :func:`snm_core.model.compact.build_resources`."""
    from snm_core.model.layouts import trie_kernels  # numba: loaded by building and scoring only
    trie = Trie.of_model(model_dir, manifest, "small")
    # Value symbols: 0 for no link, then each order's rounded levels (its own alphabet).
    level_values = [np.zeros(1)]
    n_levels = 1
    codes = _Codes()
    streams, block_keys, block_offsets, spans, span_sums = [], [], [], [], []
    bit_base = 0
    for p, (keys, values) in enumerate(zip(trie.keys, trie.values)):
        present = values > 0
        level = np.rint(np.log(values[present].astype(np.float64)) / VALUE_STEP)
        grid, index = np.unique(level.astype(np.int64), return_inverse=True)
        symbols = np.zeros(len(keys), dtype=np.int64)
        symbols[present] = n_levels + index
        level_values.append(np.exp(grid * VALUE_STEP))
        rounded = np.zeros(len(keys))
        rounded[present] = level_values[-1][index]
        n_levels += len(grid)
        fields, lengths = _encode_order(keys, symbols, trie.radix, n_levels, codes)
        entry_bits = lengths.sum(axis=1, dtype=np.int64)
        positions = np.zeros(len(keys), dtype=np.int64)
        np.cumsum(entry_bits[:-1], out=positions[1:])
        total = int(positions[-1] + entry_bits[-1])
        streams.append(trie_kernels.pack(fields, lengths, positions, (total + 63) // 64))
        block_keys.append(keys[::BLOCK_ENTRIES])
        block_offsets.append(positions[::BLOCK_ENTRIES] + bit_base)
        bit_base += 64 * len(streams[-1])
        # Contexts whose entries span blocks: their M* is stored.
        contexts, starts, ends = trie.context_runs(p)
        spanning = starts // BLOCK_ENTRIES != (ends - 1) // BLOCK_ENTRIES
        spans.append(contexts[spanning])
        span_sums.append(trie_kernels.run_sums(rounded, starts[spanning], ends[spanning]))
        del fields, lengths
    streams.append(np.zeros(2, dtype=np.uint64))  # readers look up to 64 bits ahead
    order_entries = [0] + [len(k) for k in trie.keys]
    arrays = {
        "bits": np.concatenate(streams),
        "block_keys": np.concatenate(block_keys).astype(np.int64),
        "block_offsets": np.concatenate(block_offsets).astype(np.int64),
        "order_blocks": order_starts(block_keys),
        "order_entries": np.array(order_entries, dtype=np.int64),
        "span_context": np.concatenate(spans).astype(np.int64),
        "span_sum": np.concatenate(span_sums).astype(np.float64),
        "order_spans": order_starts(spans),
        **codes.arrays(),
        "level_values": np.concatenate(level_values),
        "word_rank": trie.rank,
        "seen_words": trie.seen,
    }
    return write_arrays(arrays, directory, manifest, SMALL_LAYOUT, trie, {
        "block_entries": BLOCK_ENTRIES, "escape": ESCAPE, "value_step": VALUE_STEP,
        "bit_words": len(arrays["bits"])})


def load_small(compact_dir, compact, vocabulary_size, mmap=True):
    """The arrays of a local small-layout ``compact/`` directory, each checked (dtype,
    shape): a damaged one is an :class:`SnmInputError` naming it; and
    :data:`FIRST_ORDER`, the empty context's entries decoded."""
    from snm_core.model.layouts.trie_kernels import FIELDS
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
    arrays = load_checked(compact_dir, SMALL_FILES, expected, lambda a: (
        len(a["block_keys"]) == a["order_blocks"][-1] == len(a["block_offsets"])
        and len(a["span_sum"]) == len(a["span_context"])
        and a["block_offsets"].max(initial=0) < 64 * len(a["bits"])), mmap)
    # Every event looks its word up in the empty context: decoded once, here.
    from snm_core.model.layouts import trie_kernels  # numba: loaded by scoring only
    *first_order, intact = trie_kernels.small_first_order(
        compact["tags"], compact["max_n"], _stored_tables(arrays, compact))
    if not intact:
        raise SnmInputError(f"{compact_dir}: bits.npy decodes to a word outside the "
                            f"vocabulary; delete {compact_dir} to have it built again")
    return {**arrays, **dict(zip(FIRST_ORDER, first_order))}


def _stored_tables(arrays, compact):
    """The stored arrays and settings in the order the compiled lookups take them."""
    return tuple(arrays[name] for name in (
        "bits", "block_keys", "block_offsets", "order_blocks", "order_entries",
        "span_context", "span_sum", "order_spans")) + (
        np.int64(compact["radix"]), np.int64(compact["block_entries"]),
        np.int64(compact["escape"])) + tuple(arrays[name] for name in (
            "code_limit", "code_first", "code_base", "code_symbols", "level_values"))


class SmallModel(TrieScoring):
    """A model stored in the small layout, loaded for scoring (adjusted probabilities)."""

    def __init__(self, manifest, vocab, compact, arrays):
        super().__init__(manifest, vocab, compact, arrays["seen_words"], arrays["word_rank"])
        from snm_core.model.layouts import trie_kernels  # numba: loaded by scoring only
        self._event_sums = trie_kernels.event_sums
        self._tables = _stored_tables(arrays, compact)
        self._tables += tuple(arrays[name] for name in FIRST_ORDER)
