"""The trie and small layouts' arrays built with the whole model in memory: the builders
as they were before the external sort (``Trie.of_model``), kept as the oracle the
external build (``snm_core.scoring.layouts.trie_build``) must equal byte for byte.

Nothing here calls the code it checks: the n-grams are read whole, each order's
entries found with ``np.unique`` and ``np.searchsorted``, and every array made in one
piece; only the Huffman codes (``huffman``, ``small._Codes``), the bit packer and the
in-order sums (``trie_build_kernels``, C) are shared, and they have their own tests
(``test_trie_layouts``: against a string of bits and additions in order).
"""

import dataclasses

import numpy as np
from support import paper

from snm_core.scoring.layouts import small, trie, trie_build_kernels
from snm_core.scoring.layouts.ngram_trie import ngram_span


@dataclasses.dataclass
class Trie:
    """A model's trie entries, order by order, one trie per corpus tag.

    Attributes
    ----------
    keys : list of int64 arrays
        ``keys[p]``, shape (n_p,): the sorted keys of order j = 1 .. max_n + 1 of tag t
        at ``p = t * (max_n + 1) + j - 1`` (the features of each tag form a trie; an
        event's sums run over all of them).
    values : list of float32 arrays
        M of each entry (0: a prefix only).
    rank : int64 (vocabulary size,)
        Each word's rank (``radix`` = vocabulary size).
    seen : bool (vocabulary size,)
        The words the empty context predicts.
    """

    keys: list
    values: list
    rank: np.ndarray
    seen: np.ndarray
    radix: int
    min_n: int
    max_n: int
    tags: int

    @classmethod
    def of_model(cls, model_dir, manifest, layout):
        """The trie of a model directory's Parquet tables (all in memory)."""
        min_n, max_n = ngram_span(manifest, model_dir, layout)
        grams, gram_order, m, gram_tag = _read_ngrams(model_dir, max_n)
        radix = manifest["vocabulary_size"]
        seen = np.zeros(radix, dtype=bool)
        seen[grams[gram_order == 1, 0]] = True
        # Ranks by how often a word is predicted; ties by id.
        rank = np.empty(radix, dtype=np.int64)
        targets = grams[np.arange(len(m)), gram_order - 1]
        rank[np.argsort(-np.bincount(targets, minlength=radix), kind="stable")] = \
            np.arange(radix)
        keys, values = [], []
        for tag in range(len(manifest["tags"])):
            rows = np.flatnonzero(gram_tag == tag)
            tag_keys, tag_values = _tag_trie(grams[rows], gram_order[rows], m[rows], rank,
                                             radix, max_n)
            keys += tag_keys
            values += tag_values
        return cls(keys, values, rank, seen, radix, min_n, max_n, len(manifest["tags"]))

    def contexts(self, p):
        """How many contexts the entries ``keys[p]`` have: the entries of the order below
        (one, the empty context, below order 1)."""
        return 1 if p % (self.max_n + 1) == 0 else len(self.keys[p - 1])

    def context_runs(self, p):
        """``(contexts, starts, ends)`` of the entries ``keys[p]``: each context (an entry
        of the order below) that has entries, and their index range."""
        context = self.keys[p] // self.radix
        starts = np.flatnonzero(np.r_[True, context[1:] != context[:-1]])
        ends = np.r_[starts[1:], len(context)]
        return context[starts], starts, ends


def _tag_trie(grams, gram_order, m, rank, radix, max_n):
    """``(keys, values)`` of each order of one tag's links (n-grams)."""
    ids = np.zeros(len(m), dtype=np.int64)  # each link's prefix of the current order
    keys, values = [], []
    for j in range(1, max_n + 2):
        rows = np.flatnonzero(gram_order >= j)
        query = ids[rows] * radix + rank[grams[rows, j - 1]]
        keys.append(np.unique(query))
        ids[rows] = np.searchsorted(keys[-1], query)
        ending = rows[gram_order[rows] == j]
        values.append(np.zeros(len(keys[-1]), dtype=np.float32))
        values[-1][ids[ending]] = m[ending]
    return keys, values


def _read_ngrams(model_dir, max_n):
    """Every link as an n-gram: ``(words (n_links, max_n + 1) int32 padded with -1,
    order (n_links,), M (n_links,) float32, tag (n_links,))``."""
    feats, matrix = (paper.model_table(model_dir, t) for t in ("features", "matrix"))
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
    return (grams, (length + 1).astype(np.int8), matrix["m"].to_numpy(),
            np.repeat(feats["tag"].to_numpy(), diversity))


def _encode_order(keys, levels, radix, n_levels, codes):
    """Fields and bit lengths (n, 5) of one order's sorted entries, and their
    codes' frequencies recorded in ``codes``."""
    BLOCK_ENTRIES, ESCAPE, _FIELD_COLUMNS = small.BLOCK_ENTRIES, small.ESCAPE, 5
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
        raise ValueError("a context step or word gap of 2**31 or more: too large for "
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
        lengths[rows[over], escape_column] = small._gamma_bits(extra)

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


def small_arrays(model_dir, manifest):
    """``(arrays, manifest extra)`` of the small layout."""
    BLOCK_ENTRIES, VALUE_STEP = small.BLOCK_ENTRIES, small.VALUE_STEP
    trie = Trie.of_model(model_dir, manifest, "small")
    # Value symbols: 0 for no link, then each order's rounded levels (its own alphabet).
    level_values = [np.zeros(1)]
    n_levels = 1
    codes = small._Codes()
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
        streams.append(trie_build_kernels.pack(fields, lengths, positions, (total + 63) // 64))
        block_keys.append(keys[::BLOCK_ENTRIES])
        block_offsets.append(positions[::BLOCK_ENTRIES] + bit_base)
        bit_base += 64 * len(streams[-1])
        # Contexts whose entries span blocks: their M* is stored.
        contexts, starts, ends = trie.context_runs(p)
        spanning = starts // BLOCK_ENTRIES != (ends - 1) // BLOCK_ENTRIES
        spans.append(contexts[spanning])
        span_sums.append(trie_build_kernels.run_sums(rounded, starts[spanning], ends[spanning]))
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
    return arrays, {**_extra(trie), "block_entries": BLOCK_ENTRIES, "escape": small.ESCAPE,
                    "value_step": VALUE_STEP, "bit_words": len(arrays["bits"])}




def order_starts(parts):
    return np.concatenate([[0, 0], np.cumsum([len(p) for p in parts])]).astype(np.int64)


def _extra(trie):
    return {"entries": int(sum(len(k) for k in trie.keys)), "min_n": trie.min_n,
            "max_n": trie.max_n, "tags": trie.tags, "radix": trie.radix}


def trie_arrays(model_dir, manifest):
    """``(arrays, manifest extra)`` of the trie layout."""
    trie_ = Trie.of_model(model_dir, manifest, "trie")
    starts_by_order, m_star = [], []  # per order (of each tag): of the contexts below it
    for p, entries_of_order in enumerate(trie_.keys):
        contexts, starts, ends = trie_.context_runs(p)
        n_contexts = trie_.contexts(p)
        start = np.full(n_contexts + 1, len(entries_of_order), dtype=np.int64)
        start[contexts] = starts
        starts_by_order.append(np.minimum.accumulate(start[::-1])[::-1])
        sums = np.zeros(n_contexts + 1)
        sums[contexts] = trie_build_kernels.run_sums(trie_.values[p].astype(np.float64), starts, ends)
        m_star.append(sums)
    distinct, index = np.unique(np.concatenate(m_star), return_inverse=True)
    context_type = next(t for t in trie.CONTEXT_TYPES
                        if len(distinct) - 1 <= np.iinfo(t["m_star"]).max)
    contexts = np.empty(len(index), dtype=context_type)
    contexts["start"] = np.concatenate(starts_by_order)
    contexts["m_star"] = index
    entry_type = next(t for t in trie.ENTRY_TYPES if trie_.radix - 1 <= np.iinfo(t["word"]).max)
    entries = np.empty(sum(len(k) for k in trie_.keys), dtype=entry_type)
    entries["word"] = np.concatenate([k % trie_.radix for k in trie_.keys])
    entries["value"] = np.concatenate(trie_.values)
    return {"entries": entries, "order_entries": order_starts(trie_.keys),
            "contexts": contexts, "order_contexts": order_starts(starts_by_order),
            "m_star_values": distinct, "word_rank": trie_.rank,
            "seen_words": trie_.seen}, _extra(trie_)
