"""The loops of building the trie layouts by external sort
(:mod:`snm_core.scoring.layouts.trie_build`), in C (``trie_loops.c``; no GIL, no numba):
n-gram sort keys, the trie streamed from sorted n-grams, the per-context records streamed
from each order's entries, and the small layout's bit streams (:func:`pack`: read most
significant bit first, bit p is bit ``63 - p % 64`` of word ``p // 64``).

An n-gram's sort key is one unsigned integer of ``width`` uint64 words, the most
significant first: its tag in ``tag_bits`` bits, then one ``slot_bits`` field per
word, oldest first, holding the word's rank plus one (0: no word).  Keys compare
as (tag, ranks) in lexicographic order, a prefix before its extensions.

The tests hold the builds to ``tests/scoring/layouts/reference_tries.py``, which makes
the same arrays with the whole model in memory by numpy alone.
"""

import ctypes

import numpy as np

from snm_core.io import native

_P, _I = native.ptr, native.i64
_gram_keys = native.function("trie_gram_keys", [_P, _P, _P, _P, _I, _P, _P, _I, _I, _I, _I, _P],
                             _I)
_key_tags = native.function("trie_key_tags", [_P, _I, _I, _I, _P])
_stream = native.function("trie_stream", [_P, _P, _I, _I, _I, _I, _I, _P, _P, _P, _I, _P, _P,
                                          _I, _P], _I)
_context_records = native.function("trie_context_records", [_P, _P, _I, _I, _I, _P, _P, _P,
                                                            _P, _I])
_spanning_runs = native.function("trie_spanning_runs", [_P, _P, _I, _I, _I, _P, _P, _P, _P],
                                 _I)
_pack = native.function("trie_pack", [_P, _P, _P, _I, _I, _P])
_run_sums = native.function("trie_run_sums", [_P, _P, _P, _I, _P])


def _typed(array, dtype):
    return np.ascontiguousarray(array, dtype)


def _checked(array, dtype, what):
    """``array`` itself, which a loop writes into: it must already be of ``dtype``, in
    order."""
    if array.dtype != np.dtype(dtype) or not array.flags.c_contiguous:
        raise TypeError(f"{what}: expected a contiguous {np.dtype(dtype)} array")
    return native.address(array)


def gram_keys(offsets, flat, diversity, tag, target, rank, tag_bits, slot_bits, slots, width):
    """Sort keys (n_links, width) of the n-grams of links: feature i (its words
    ``flat[offsets[i]:offsets[i + 1]]``, its ``tag``) has ``diversity[i]`` links, in
    order, whose words are ``target``.  Returns ``(keys, the longest feature's words)``
    (a feature of ``slots`` words or more has no key: the caller refuses it)."""
    offsets, flat = _typed(offsets, np.int64), _typed(flat, np.int32)
    diversity, tag = _typed(diversity, np.int64), _typed(tag, np.int64)
    target, rank = _typed(target, np.int32), _typed(rank, np.int64)
    keys = np.zeros((len(target), width), np.uint64)
    longest = _gram_keys(native.address(offsets), native.address(flat),
                         native.address(diversity), native.address(tag), len(diversity),
                         native.address(target), native.address(rank), int(tag_bits),
                         int(slot_bits), int(slots), int(width), native.address(keys))
    return keys, longest


def key_tags(keys, tag_bits):
    """The tag of each key."""
    keys = _typed(keys, np.uint64)
    tags = np.zeros(len(keys), np.int64)
    _key_tags(native.address(keys), len(keys), keys.shape[1] if keys.ndim > 1 else 1,
              int(tag_bits), native.address(tags))
    return tags


def trie_stream(keys, m, tag_bits, slot_bits, radix, digit, ident, count, out_keys,
                out_values, out_count):
    """The trie entries that sorted n-grams (``keys`` of one tag, M ``m``) add, order by
    order: entry (c, w) of order j + 1 goes to ``out_keys[j]`` (int64, slots x capacity)
    as ``c * radix + rank(w)`` beside its value (``out_values``, float32: M of the n-gram
    it is, else 0), ``out_count[j]`` of them.

    ``digit[j]``, ``ident[j]`` (int64): the field and entry index of order j + 1 of the
    last n-gram's path; ``count[j]``: entries of order j + 1 so far; all carried from
    call to call (zeros for a tag's first).  An n-gram's entries are those of its path
    below the longest prefix it shares with the previous n-gram: each new, as sorted keys
    put a prefix before its extensions.  Returns how many n-grams equal the one before
    (none in a model)."""
    keys, m = _typed(keys, np.uint64), _typed(m, np.float32)
    slots = len(digit)
    if out_keys.shape[0] != slots or out_values.shape != out_keys.shape:
        raise ValueError("out_keys and out_values must be (slots, capacity)")
    return _stream(native.address(keys), native.address(m), len(keys),
                   keys.shape[1] if keys.ndim > 1 else 1, int(tag_bits), int(slot_bits),
                   int(radix), _checked(digit, np.int64, "digit"),
                   _checked(ident, np.int64, "ident"), _checked(count, np.int64, "count"),
                   slots, _checked(out_keys, np.int64, "out_keys"),
                   _checked(out_values, np.float32, "out_values"), out_keys.shape[1],
                   _checked(out_count, np.int64, "out_count"))


def context_records(context, values, i, base, c, last, open_start, open_sum, out_start,
                    out_sum):
    """Each context's record from its order's entries, streamed: where its entries start
    (a context without entries: where the next context's do) and the float64 sum of
    their values, added in order.

    ``context``, ``values``: a chunk of the order's entries (sorted), the first of them
    entry ``base``; from entry ``i`` on.  ``c``: the next context to write, below
    ``last``; ``open_start`` (-1: none yet), ``open_sum``: its entries so far.  Writes
    at most ``len(out_start)`` records (int64 starts, float64 sums); returns ``(i, c,
    open_start, open_sum, records written)``: context c stays open at the chunk's end
    (more of its entries may follow)."""
    context, values = _typed(context, np.int64), _typed(values, np.float32)
    state = np.array([i, c, open_start, 0], np.int64)
    total = ctypes.c_double(open_sum)
    _context_records(native.address(context), native.address(values), len(context), int(base),
                     int(last), native.address(state), ctypes.byref(total),
                     _checked(out_start, np.int64, "out_start"),
                     _checked(out_sum, np.float64, "out_sum"), len(out_start))
    i, c, open_start, k = (int(x) for x in state)
    return i, c, open_start, total.value, k


def spanning_runs(context, values, base, block, run_context, run_start, run_sum):
    """The contexts whose entries span blocks of ``block`` entries, streamed: ``context``
    a chunk of an order's entries (sorted) from entry ``base`` on, ``values`` their
    (rounded) values; the run open before the chunk (``run_context`` -1: none).
    Returns ``(spanning contexts, their float64 sums in order, the open run's context,
    start, sum)``."""
    context, values = _typed(context, np.int64), _typed(values, np.float64)
    run = np.array([run_context, run_start], np.int64)
    total = ctypes.c_double(run_sum)
    spans, sums = np.empty(len(context), np.int64), np.empty(len(context), np.float64)
    k = _spanning_runs(native.address(context), native.address(values), len(context),
                       int(base), int(block), native.address(run), ctypes.byref(total),
                       native.address(spans), native.address(sums))
    return spans[:k], sums[:k], int(run[0]), int(run[1]), total.value


def pack(fields, lengths, positions, n_words):
    """Write ``fields[i, f]`` (right-aligned, ``lengths[i, f]`` bits, up to 64) of every
    entry i from bit ``positions[i]`` on, field after field; returns the stream."""
    fields, lengths = _typed(fields, np.uint64), _typed(lengths, np.uint8)
    positions = _typed(positions, np.int64)
    if fields.shape != lengths.shape or len(positions) != len(fields):
        raise ValueError("fields, lengths and positions must have a row an entry")
    bits = np.zeros(int(n_words), np.uint64)
    _pack(native.address(fields), native.address(lengths), native.address(positions),
          len(fields), fields.shape[1] if fields.ndim > 1 else 1, native.address(bits))
    return bits


def run_sums(values, starts, ends):
    """Sum of ``values[starts[i]:ends[i]]`` for every i, added in order as the scorer
    adds them (so a stored M* is bit for bit the one decoding would give)."""
    values = _typed(values, np.float64)
    starts, ends = _typed(starts, np.int64), _typed(ends, np.int64)
    sums = np.empty(len(starts), np.float64)
    _run_sums(native.address(values), native.address(starts), native.address(ends),
              len(starts), native.address(sums))
    return sums
