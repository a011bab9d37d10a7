"""Canonical Huffman codes, length-limited: the variable-length codes of the small layout.

A code is built from symbol frequencies (:func:`code_lengths`), its code words
are canonical (:func:`canonical_codes`: shorter codes first, then by symbol),
and a decoder needs only per-length tables (:class:`DecodeTable`), which the
C reader of ``trie_loops.c`` walks on a left-justified
window of the next ``MAX_CODE_BITS`` bits of the stream.

Why Huffman and not the slides' unary-length codes (Elias gamma): the gamma
code of a word's or a value's frequency rank costs bits well above their
entropy, which a Huffman code comes within a bit of (benchmarks/README.md,
"Figures behind the code").
"""

import dataclasses
import heapq

import numpy as np

#: Longest code word: a decoder reads a 32-bit window, and frequencies are
#: flattened until every code fits.
MAX_CODE_BITS = 30


def code_lengths(frequencies, max_bits=MAX_CODE_BITS):
    """Huffman code lengths of symbols with the given frequencies (0: no code).

    Parameters
    ----------
    frequencies : array of int, shape (n_symbols,)
    max_bits : int
        No code is longer; the frequencies are halved (kept at least 1) until
        the optimal code fits, which costs a fraction of a bit on the rarest
        symbols only.

    Returns
    -------
    ndarray of int64, shape (n_symbols,)
    """
    frequencies = np.asarray(frequencies, dtype=np.int64)
    used = np.flatnonzero(frequencies > 0)
    lengths = np.zeros(len(frequencies), dtype=np.int64)
    if len(used) == 1:
        lengths[used] = 1
        return lengths
    weights = frequencies[used]
    while len(used):
        depth = _tree_depths(weights)
        if depth.max() <= max_bits:
            lengths[used] = depth
            return lengths
        weights = np.maximum(weights >> 1, 1)
    return lengths


def _tree_depths(weights):
    """Depth of each leaf of a Huffman tree over ``weights`` (heap merging)."""
    n = len(weights)
    parent = np.zeros(2 * n - 1, dtype=np.int64)
    heap = [(int(w), i) for i, w in enumerate(weights)]
    heapq.heapify(heap)
    node = n
    while len(heap) > 1:
        w1, a = heapq.heappop(heap)
        w2, b = heapq.heappop(heap)
        parent[a] = parent[b] = node
        heapq.heappush(heap, (w1 + w2, node))
        node += 1
    depth = np.zeros(2 * n - 1, dtype=np.int64)
    for i in range(2 * n - 3, -1, -1):  # parents are numbered after their children
        depth[i] = depth[parent[i]] + 1
    return depth[:n]


def canonical_codes(lengths):
    """Canonical code words (right-aligned in uint64) of the given code lengths.

    Symbols are ranked by (length, symbol); each code is the previous one plus
    one, shifted left when the length grows.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    codes = np.zeros(len(lengths), dtype=np.uint64)
    order = np.lexsort((np.arange(len(lengths)), lengths))
    order = order[lengths[order] > 0]
    code, previous = 0, 0
    for i, symbol in enumerate(order):
        length = int(lengths[symbol])
        if i:
            code = (code + 1) << (length - previous)
        previous = length
        codes[symbol] = code
    return codes


@dataclasses.dataclass
class DecodeTable:
    """What a decoder needs of one canonical code, per code length ``L`` (1..MAX_CODE_BITS).

    Attributes
    ----------
    limit : uint64 (MAX_CODE_BITS + 1,)
        One past the last code of length ``L``, left-justified in 32 bits: a
        window below ``limit[L]`` (and not below ``limit[L - 1]``) holds a code of length L.
    first : int64 (MAX_CODE_BITS + 1,)
        The first code of length ``L`` (right-aligned).
    base : int64 (MAX_CODE_BITS + 1,)
        Index in ``symbols`` of that first code's symbol.
    symbols : int64 (n_codes,)
        Symbols in canonical order.
    """

    limit: np.ndarray
    first: np.ndarray
    base: np.ndarray
    symbols: np.ndarray

    @classmethod
    def of(cls, lengths, symbol_values=None):
        """The table of a code with these lengths; ``symbol_values[s]`` is decoded for
        symbol s (default: s)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        values = np.arange(len(lengths)) if symbol_values is None else symbol_values
        order = np.lexsort((np.arange(len(lengths)), lengths))
        order = order[lengths[order] > 0]
        count = np.bincount(lengths[order], minlength=MAX_CODE_BITS + 1)
        count[0] = 0
        limit = np.zeros(MAX_CODE_BITS + 1, dtype=np.uint64)
        first = np.zeros(MAX_CODE_BITS + 1, dtype=np.int64)
        base = np.zeros(MAX_CODE_BITS + 1, dtype=np.int64)
        code = index = 0
        for length in range(1, MAX_CODE_BITS + 1):
            first[length], base[length] = code, index
            code += int(count[length])
            index += int(count[length])
            limit[length] = code << (32 - length)
            code <<= 1
        return cls(limit, first, base, np.asarray(values, dtype=np.int64)[order])
