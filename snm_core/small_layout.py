"""The small layout of ``compact/``: an n-gram model's entries by context, entropy-coded.

The storage slides' context encoding, with SNM's values.  For an n-gram
configuration every feature is a context (the k words before the target)
and every link (context, word) is an n-gram one word longer, so the model is
one forward trie of n-grams: entry ``(c, w)`` of order j is the n-gram whose
first j - 1 words are the entry c of order j - 1 (order 0 has one entry, the
empty context) and whose last word is w.  An entry is a link (its value
M_cw) or only a prefix of longer ones (value 0: ``<S>``, or what pruning
removed), and it is the context of the entries of the next order.

Per order, entries are sorted by key ``c * radix + rank(w)`` (words ranked
by how often they are predicted, so frequent words get short codes) and
written in blocks of ``BLOCK_ENTRIES``.  A block's first key and its bit
offset are stored plainly; every later entry is its context step (0: same
context), then the gap to the previous word (same context) or the word's rank
(new context), then its value, each with a canonical Huffman code per order
and field (:mod:`snm_core.huffman`); steps and gaps of ``ESCAPE`` or more
are the escape symbol followed by an Elias gamma code.

Values are rounded to a grid of ``VALUE_STEP`` in log space (relative error
at most ``VALUE_STEP / 2``, about 0.05%), and M_c* is the sum of the rounded
values of c's entries, so the stored model is still exactly normalised and a
probability moves by a factor of at most ``exp(VALUE_STEP)``: perplexity
within 0.1% of the float model, whatever the model.  M_c* is summed while a
block is decoded; contexts whose entries span blocks (the empty context,
frequent words) have it stored.

Scoring follows the trie as KenLM does: the entries found for one event's
target are the next event's contexts, so an event costs one lookup per
order: a binary search of the block keys and the decoding of one block.

Kernel 5-gram: about 2 bytes a link, against 19.5 in the fast layout; only
n-gram configurations of one corpus tag are stored this way, and the
unadjusted model (c(w|f)) is not kept.
"""

import os

import numpy as np

from snm_core import huffman, storage, tables
from snm_core.config import parse_config
from snm_core.errors import SnmInputError
from snm_core.model import LineScoring, Scores
from snm_core.text import SentenceBatch
from snm_core.vocab import BOS_ID, EOS_ID, UNK_ID

#: Name of the layout in ``compact/manifest.json``, with its version.
SMALL_LAYOUT = "small-1"
BLOCK_ENTRIES = 64
#: Values are rounded to multiples of this in log space.
VALUE_STEP = 2.0 ** -10
#: Context steps and word gaps of this or more are coded as escape + gamma code.
ESCAPE = 1 << 12
SMALL_FILES = ("bits", "block_keys", "block_offsets", "order_blocks", "order_entries",
               "span_context", "span_sum", "order_spans", "code_limit", "code_first",
               "code_base", "code_symbols", "level_values", "word_rank", "seen_words")
_FIELD_COLUMNS = 5  # step code, step escape, word code, gap escape, value code


def ngram_span(manifest, where):
    """``(min_n, max_n)`` of a model the small layout can store; else a one-line error."""
    config = parse_config(manifest["config"])
    lengths = sorted(t.adjacent for t in config.feature_types())
    if not config.is_ngram_only or lengths != list(range(lengths[0], lengths[-1] + 1)):
        raise SnmInputError(f"{where}: the small layout stores n-gram models only (this one "
                            "has skip-gram features); use --layout fast")
    if len(manifest["tags"]) > 1:
        raise SnmInputError(f"{where}: the small layout stores untagged models only (this one "
                            f"has tags {', '.join(manifest['tags'])}); use --layout fast")
    return lengths[0], lengths[-1]


def _read_ngrams(model_dir, manifest, max_n):
    """Every link as an n-gram: ``(words (n_links, max_n + 1) int32 padded with -1,
    order (n_links,), M (n_links,) float32, seen)``; ``seen`` marks the words the
    empty context predicts."""
    parts = []
    for name in sorted(n for n in manifest["files"] if n.startswith("features-")):
        feats = tables.read_table(storage.join(model_dir, name), tables.MODEL_FEATURES,
                                  ["words", "diversity"])
        matrix = tables.read_table(storage.join(model_dir, "matrix-" + name[len("features-"):]),
                                   tables.MATRIX, ["word", "m"])
        diversity = feats["diversity"].to_numpy()
        words = feats["words"].combine_chunks()
        offsets = words.offsets.to_numpy()
        flat = words.values.to_numpy()
        length = np.repeat(np.diff(offsets), diversity)
        start = np.repeat(offsets[:-1], diversity)
        target = matrix["word"].to_numpy()
        grams = np.full((len(target), max_n + 1), -1, dtype=np.int32)
        for j in range(max_n):
            rows = np.flatnonzero(length > j)
            grams[rows, j] = flat[start[rows] + j]
        grams[np.arange(len(target)), length] = target
        parts.append((grams, (length + 1).astype(np.int8), matrix["m"].to_numpy()))
    grams = np.concatenate([p[0] for p in parts])
    order = np.concatenate([p[1] for p in parts])
    m = np.concatenate([p[2] for p in parts])
    seen = np.zeros(manifest["vocabulary_size"], dtype=bool)
    seen[grams[order == 1, 0]] = True
    return grams, order, m, seen


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
                            "the small layout; use --layout fast")
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


def build_small(model_dir, manifest, directory):
    """Write the small layout of a model into the local ``directory``; returns the
    compact manifest."""
    from snm_core import small_kernels  # numba: loaded by building and scoring only
    min_n, max_n = ngram_span(manifest, model_dir)
    grams, gram_order, m, seen = _read_ngrams(model_dir, manifest, max_n)
    radix = manifest["vocabulary_size"]
    # Ranks by how often a word is predicted; ties by id.
    rank = np.empty(radix, dtype=np.int64)
    rank[np.argsort(-np.bincount(grams[np.arange(len(m)), gram_order - 1], minlength=radix),
                    kind="stable")] = np.arange(radix)
    nonzero = m > 0
    level = np.zeros(len(m), dtype=np.int64)
    level[nonzero] = np.rint(np.log(m[nonzero].astype(np.float64)) / VALUE_STEP)
    grid, level_index = np.unique(level[nonzero], return_inverse=True)
    value_symbol = np.zeros(len(m), dtype=np.int64)  # symbol 0: no link (value 0)
    value_symbol[nonzero] = level_index + 1
    level_values = np.concatenate([[0.0], np.exp(grid * VALUE_STEP)])

    codes = _Codes()
    ids = np.zeros(len(m), dtype=np.int64)  # each link's prefix of the current order
    streams, block_keys, block_offsets, spans, span_sums = [], [], [], [], []
    order_entries = [0]
    bit_base = 0
    for j in range(1, max_n + 2):
        rows = np.flatnonzero(gram_order >= j)
        query = ids[rows] * radix + rank[grams[rows, j - 1]]
        keys = np.unique(query)
        ids[rows] = np.searchsorted(keys, query)
        levels = np.zeros(len(keys), dtype=np.int64)
        ending = gram_order[rows] == j
        levels[ids[rows[ending]]] = value_symbol[rows[ending]]
        fields, lengths = _encode_order(keys, levels, radix, len(level_values), codes)
        entry_bits = lengths.sum(axis=1, dtype=np.int64)
        positions = np.zeros(len(keys), dtype=np.int64)
        np.cumsum(entry_bits[:-1], out=positions[1:])
        total = int(positions[-1] + entry_bits[-1])
        streams.append(small_kernels.pack(fields, lengths, positions, (total + 63) // 64))
        block_keys.append(keys[::BLOCK_ENTRIES])
        block_offsets.append(positions[::BLOCK_ENTRIES] + bit_base)
        bit_base += 64 * len(streams[-1])
        order_entries.append(len(keys))
        # Contexts whose entries span blocks: their M* is stored.
        context = keys // radix
        starts = np.flatnonzero(np.r_[True, context[1:] != context[:-1]])
        ends = np.r_[starts[1:], len(keys)]
        spanning = starts // BLOCK_ENTRIES != (ends - 1) // BLOCK_ENTRIES
        spans.append(context[starts[spanning]])
        span_sums.append(small_kernels.run_sums(level_values[levels], starts[spanning],
                                                ends[spanning]))
        del fields, lengths, query, keys
    streams.append(np.zeros(2, dtype=np.uint64))  # readers look up to 64 bits ahead

    def bounds(parts):
        return np.concatenate([[0, 0], np.cumsum([len(p) for p in parts])]).astype(np.int64)

    arrays = {
        "bits": np.concatenate(streams),
        "block_keys": np.concatenate(block_keys).astype(np.int64),
        "block_offsets": np.concatenate(block_offsets).astype(np.int64),
        "order_blocks": bounds(block_keys),
        "order_entries": np.array(order_entries, dtype=np.int64),
        "span_context": np.concatenate(spans).astype(np.int64),
        "span_sum": np.concatenate(span_sums).astype(np.float64),
        "order_spans": bounds(spans),
        **codes.arrays(),
        "level_values": level_values,
        "word_rank": rank,
        "seen_words": seen,
    }
    sizes = 0
    for name, array in arrays.items():
        storage.write_npy(array, os.path.join(directory, name + ".npy"))
        sizes += array.nbytes
    return {"kind": "compact", "format_version": tables.FORMAT_VERSION,
            "layout": SMALL_LAYOUT, "files": [n + ".npy" for n in SMALL_FILES],
            "features": int(manifest["totals"]["features"]),
            "links": int(manifest["totals"]["links"]), "entries": int(sum(order_entries)),
            "min_n": min_n, "max_n": max_n, "radix": radix,
            "block_entries": BLOCK_ENTRIES, "escape": ESCAPE, "value_step": VALUE_STEP,
            "bytes": int(sizes)}


def load_small(compact_dir, compact, vocabulary_size, mmap=True):
    """The arrays of a local small-layout ``compact/`` directory, each checked (dtype,
    shape): a damaged one is an :class:`SnmInputError` naming it."""
    from snm_core import small_kernels
    orders = compact["max_n"] + 1
    expected = {"order_blocks": (np.int64, orders + 2), "order_entries": (np.int64, orders + 1),
                "order_spans": (np.int64, orders + 2), "word_rank": (np.int64, vocabulary_size),
                "seen_words": (np.bool_, vocabulary_size), "bits": (np.uint64, None),
                "block_keys": (np.int64, None), "block_offsets": (np.int64, None),
                "span_context": (np.int64, None), "span_sum": (np.float64, None),
                "code_symbols": (np.int64, None), "level_values": (np.float64, None)}
    tables_shape = (small_kernels.FIELDS * orders, huffman.MAX_CODE_BITS + 1)
    arrays = {}
    remedy = f"delete {compact_dir} to have it built again"
    for name in SMALL_FILES:
        path = os.path.join(compact_dir, name + ".npy")
        try:
            array = np.asarray(np.load(path, mmap_mode="r" if mmap else None))
        except (OSError, ValueError, EOFError) as e:
            raise SnmInputError(f"{path}: cannot load ({tables.one_line(e)}); {remedy}") from None
        dtype, shape = expected.get(name, (np.uint64 if name == "code_limit" else np.int64,
                                           tables_shape))
        shape = (shape,) if isinstance(shape, int) else shape
        if array.dtype != np.dtype(dtype) or (shape is not None and array.shape != shape) \
                or (shape is None and array.ndim != 1):
            raise SnmInputError(f"{path}: {array.dtype} of shape {array.shape}, expected "
                                f"{np.dtype(dtype)} of shape {shape or '(n,)'}; {remedy}")
        arrays[name] = array
    if (len(arrays["block_keys"]) != arrays["order_blocks"][-1]
            or len(arrays["block_offsets"]) != len(arrays["block_keys"])
            or len(arrays["span_sum"]) != len(arrays["span_context"])
            or arrays["block_offsets"].max(initial=0) >= 64 * len(arrays["bits"])):
        raise SnmInputError(f"{compact_dir}: its arrays do not agree in length; {remedy}")
    return arrays


class SmallModel(LineScoring):
    """A model stored in the small layout, loaded for scoring (adjusted probabilities only).

    Thread-safe as :class:`snm_core.model.Model` is: nothing changes after loading.
    """

    REPORTS = {"adjusted": "prob"}
    WITHOUT_UNADJUSTED = "the small layout keeps no unadjusted model; store it with --layout fast"

    def __init__(self, manifest, vocab, compact, arrays):
        from snm_core import small_kernels
        self._kernels = small_kernels
        self.manifest = manifest
        self.compact = compact
        self.vocab = vocab
        vocab.ids([])  # its lookup table, built now rather than while scoring
        seen = arrays["seen_words"]
        self.word_map = np.where(seen, np.arange(len(seen)), UNK_ID).astype(np.int32)
        self.word_map[[BOS_ID, EOS_ID]] = [BOS_ID, EOS_ID]
        self.word_map.flags.writeable = False
        self.rank = arrays["word_rank"]
        self._tables = tuple(arrays[name] for name in (
            "bits", "block_keys", "block_offsets", "order_blocks", "order_entries",
            "span_context", "span_sum", "order_spans")) + (
            np.int64(compact["radix"]), np.int64(compact["block_entries"]),
            np.int64(compact["escape"])) + tuple(arrays[name] for name in (
                "code_limit", "code_first", "code_base", "code_symbols", "level_values"))

    @property
    def scored_words(self):
        """Word ids the model predicts (seen in training), ``</S>`` included, ``<S>`` not."""
        ids = np.flatnonzero(self.word_map == np.arange(len(self.word_map)))
        return ids[ids != BOS_ID]

    def score_batch(self, batch, unadjusted=False):
        """Probabilities of every event of a :class:`SentenceBatch` (ids from ``self.vocab``)."""
        mapped = self.word_map[batch.tokens]
        offsets = np.asarray(batch.offsets, dtype=np.int64)
        numerator, denominator = self._kernels.event_sums(
            self.rank[mapped], offsets, self.rank[BOS_ID], self.rank[EOS_ID],
            self.compact["min_n"], self.compact["max_n"], *self._tables)
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
