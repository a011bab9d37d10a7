"""The n-gram trie layouts' scoring, in C (``trie_loops.c``; no GIL, no numba).

:func:`event_sums` walks sentences through the n-gram trie of a model stored in the
trie or the small layout (:mod:`snm_core.scoring.layouts.ngram_trie`), with the
layout's lookup: a binary search of a context's plain records (trie), or a decoded
block of Huffman-coded entries (small); :func:`advance` takes many decoder states one
event on.  Both give the sums in the order of :mod:`tests.scoring.layouts.
reference_tries`' numpy definitions, which the tests hold them to, with the float
model's probabilities.
"""

import ctypes

import numpy as np

from snm_core.io import native

_P, _I = native.ptr, native.i64


class Tables(ctypes.Structure):
    """A trie-layout or small-layout model's arrays as the C loops read them; holds the
    arrays (``arrays``) so that they outlive it, and its pointer made once, for the
    ctypes calls (``reference``) and for the module's methods (``address``: a decoder
    passes it for each word)."""

    _fields_ = [("small", native.i32), ("radix", _I),
                ("entries", _P), ("entry_bytes", _I), ("word_bytes", _I),
                ("order_entries", _P), ("contexts", _P), ("context_bytes", _I),
                ("m_star_bytes", _I), ("order_contexts", _P), ("m_star_values", _P),
                ("first_order", _P),
                ("bits", _P), ("block_keys", _P), ("block_offsets", _P), ("order_blocks", _P),
                ("small_order_entries", _P), ("span_context", _P), ("span_sum", _P),
                ("order_spans", _P), ("block_entries", _I), ("escape", _I), ("limit", _P),
                ("first", _P), ("base", _P), ("symbols", _P), ("level_values", _P),
                ("first_entry", _P), ("first_value", _P), ("first_m_star", _P)]

    @classmethod
    def of_trie(cls, arrays, compact):
        """The trie layout's (:func:`snm_core.scoring.layouts.trie.load_trie`'s arrays)."""
        entries, contexts = arrays["entries"], arrays["contexts"]
        held = {name: arrays[name] for name in ("entries", "contexts", "first_order")}
        for name in ("order_entries", "order_contexts"):
            held[name] = np.ascontiguousarray(arrays[name], np.int64)
        held["m_star_values"] = np.ascontiguousarray(arrays["m_star_values"], np.float64)
        tables = cls(small=0, radix=int(compact["radix"]),
                     entries=native.address(entries.view(np.uint8).reshape(-1)),
                     entry_bytes=entries.dtype.itemsize,
                     word_bytes=entries.dtype["word"].itemsize,
                     contexts=native.address(contexts.view(np.uint8).reshape(-1)),
                     context_bytes=contexts.dtype.itemsize,
                     m_star_bytes=contexts.dtype["m_star"].itemsize,
                     **{name: native.address(held[name]) for name in (
                         "order_entries", "order_contexts", "m_star_values")},
                     first_order=native.address(held["first_order"], np.int32))
        tables.arrays = held
        tables.reference = ctypes.byref(tables)
        tables.address = ctypes.addressof(tables)
        return tables

    @classmethod
    def of_small(cls, arrays, compact, first_order=None):
        """The small layout's (:func:`snm_core.scoring.layouts.small.load_small`'s arrays),
        with ``first_order`` (:data:`snm_core.scoring.layouts.small.FIRST_ORDER`'s three
        arrays) once :func:`small_first_order` has decoded them."""
        typed = {"bits": np.uint64, "block_keys": np.int64, "block_offsets": np.int64,
                 "order_blocks": np.int64, "order_entries": np.int64,
                 "span_context": np.int64, "span_sum": np.float64, "order_spans": np.int64,
                 "code_limit": np.uint64, "code_first": np.int64, "code_base": np.int64,
                 "code_symbols": np.int64, "level_values": np.float64}
        held = {name: np.ascontiguousarray(arrays[name], dtype) for name, dtype in typed.items()}
        if first_order is not None:
            held.update(zip(("first_entry", "first_value", "first_m_star"), first_order))
        tables = cls(small=1, radix=int(compact["radix"]),
                     block_entries=int(compact["block_entries"]),
                     escape=int(compact["escape"]),
                     small_order_entries=native.address(held["order_entries"]),
                     limit=native.address(held["code_limit"]),
                     first=native.address(held["code_first"]),
                     base=native.address(held["code_base"]),
                     symbols=native.address(held["code_symbols"]),
                     **{name: native.address(held[name]) for name in (
                         "bits", "block_keys", "block_offsets", "order_blocks",
                         "span_context", "span_sum", "order_spans", "level_values")})
        if first_order is not None:
            tables.first_entry = native.address(held["first_entry"], np.int32)
            tables.first_value = native.address(held["first_value"], np.float64)
            tables.first_m_star = native.address(held["first_m_star"], np.float64)
        tables.arrays = held
        tables.reference = ctypes.byref(tables)
        tables.address = ctypes.addressof(tables)
        return tables


_LOOPS = native.module()
_event_sums = native.function("trie_event_sums", [_P, _P, _P, _I, _I, _I, _I, _I, _I, _P, _P],
                              _I)
_small_first_order = native.function("small_first_order", [_P, _I, _I, _P, _P, _P], _I)
_decode = native.function("small_decode", [_P, _I, _I, _P], _I)
_shift_states = native.function("shift_states", [_P, _I, _I, _P, _P, _P, _P])


def event_sums(words, offsets, bos, eos, min_n, max_n, tags, tables):
    """Sum of M_fw and of M_f* over the present n-gram features of every event, those of
    every tag: ``(numerator, denominator)``, float64, an event a row.

    ``words`` are the sentences' word ranks back to back (``offsets``, int64, bound
    each); a sentence of n words has n + 1 events, the last predicting ``eos``.  The
    contexts of an event are the entries found for the previous event's target (the
    forward trie's state, as in KenLM).  A context that is an entry but not a feature
    (no links: M* = 0) adds nothing.  The tries of a model's tags are stored one after
    the other: order j of tag t is ``t * (max_n + 1) + j``.  Eight sentences are scored
    side by side, so that the memory reads of one overlap the others'; the sums of an
    event do not depend on that.
    """
    words = np.ascontiguousarray(words, np.int64)
    offsets = np.ascontiguousarray(offsets, np.int64)
    n_sentences = len(offsets) - 1
    numerator = np.empty(len(words) + n_sentences, np.float64)
    denominator = np.empty_like(numerator)
    if n_sentences > 0:
        native.checked(_event_sums(tables.reference, native.address(words),
                                   native.address(offsets), n_sentences, int(bos), int(eos),
                                   int(min_n), int(max_n), int(tags),
                                   native.address(numerator), native.address(denominator)),
                       "trie scoring")
    return numerator, denominator


def advance(context, words, target, rank, min_n, max_n, tags, tables):
    """One event after each of many states: the sums of :func:`event_sums` for it, and
    the states after the target.

    Parameters
    ----------
    context : int64 (n, tags, max_n + 2), the entries of each state's contexts: column
        k the entry of order k (the context of k words), -1 where absent; column 0 the
        empty context (0)
    words : int32 (n, width), the states' words (right-aligned, -1 before)
    target, rank : int32 and int64 (n,), the word each state is to predict, and its rank
    min_n, max_n, tags, tables : as :func:`event_sums`

    Returns
    -------
    prob : float64 (n,), the sum of M_fw over the sum of M_f* (added in the order of
        :func:`event_sums`)
    ngram : int64 (n,), the longest entry found: the n-gram of the target and its
        context of ngram - 1 words (0: not even the word)
    following : int64 (n, tags, max_n + 2), the entries of the contexts after the
        target (column max_n + 1, a whole n-gram, is no context: -1)
    words, length : the new states, holding the words of their longest context found
    """
    context = np.ascontiguousarray(context, np.int64)
    words = np.ascontiguousarray(words, np.int32)
    target = np.ascontiguousarray(target, np.int32)
    rank = np.ascontiguousarray(rank, np.int64)
    n, width = words.shape
    prob, ngram, length = np.empty(n), np.empty(n, np.int64), np.empty(n, np.int64)
    following = np.empty((n, tags, max_n + 2), np.int64)
    new_words = np.empty((n, width), np.int32)
    if context.shape != (n, tags, max_n + 2) or target.shape != (n,) or rank.shape != (n,):
        raise ValueError("advance: the contexts, targets and ranks of n states")
    native.checked(_LOOPS.trie_advance(tables.address, context, words, target, rank, prob,
                                       ngram, following, new_words, length, width, n, min_n,
                                       max_n, tags), "trie scoring")
    return prob, ngram, following, new_words, length


def small_first_order(tags, max_n, tables):
    """Each tag's empty-context entries by word rank, decoded: ``(entry index or -1 (tags,
    radix) int32, value (tags, radix), M* (tags,), False if a decoded word is outside the
    vocabulary (a damaged stream))``, what a lookup in the small layout finds, so that an
    event's first lookup reads no block.  ``tables``: :meth:`Tables.of_small` without them."""
    entry = np.empty((tags, tables.radix), np.int32)
    value = np.empty((tags, tables.radix), np.float64)
    m_star = np.zeros(tags, np.float64)
    intact = _small_first_order(ctypes.byref(tables), tags, max_n, native.address(entry),
                                native.address(value), native.address(m_star))
    return entry, value, m_star, bool(intact)


def decode(stream, pos, table):
    """``(symbol, bits read)`` of the canonical Huffman code ``table`` (a
    :class:`snm_core.scoring.layouts.huffman.DecodeTable`) at bit ``pos`` of ``stream``
    (uint64, ending with two zero words): the small layout's decoding of one field."""
    held = {"bits": np.ascontiguousarray(stream, np.uint64),
            "limit": np.ascontiguousarray(table.limit, np.uint64),
            **{name: np.ascontiguousarray(getattr(table, name), np.int64)
               for name in ("first", "base", "symbols")}}
    tables = Tables(small=1, **{name: native.address(array) for name, array in held.items()})
    n = ctypes.c_int64()
    symbol = _decode(ctypes.byref(tables), int(pos), 0, ctypes.byref(n))
    return symbol, n.value


def shift_states(words, target, keep):
    """The states after ``target``: each row of ``words`` (right-aligned, -1 before) shifted
    left with ``target`` last, holding ``min(keep, width)`` words and -1 before them, so
    that equal states have equal rows; returns ``(words int32 (n, width), length int64
    (n,))``."""
    words = np.ascontiguousarray(words, np.int32)
    target = np.ascontiguousarray(target, np.int32)
    keep = np.ascontiguousarray(keep, np.int64)
    n, width = words.shape
    new_words, length = np.empty((n, width), np.int32), np.empty(n, np.int64)
    _shift_states(native.address(words), n, width, native.address(target),
                  native.address(keep), native.address(new_words), native.address(length))
    return new_words, length
