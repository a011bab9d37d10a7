"""Compiled loops (numba) of the trie layouts: scoring, lookups, bit packing, Huffman decoding.

:func:`event_sums` (one loop, compiled for each layout's tables) walks
sentences through an n-gram trie (:mod:`snm_core.scoring.layouts.ngram_trie`) with the layout's
lookup: :func:`trie_child` (the trie layout's plain records) or
:func:`small_child` (the small layout's coded blocks).  A bit stream of the
small layout is a uint64 array read most significant bit first: bit p is bit
``63 - p % 64`` of word ``p // 64``; it ends with two zero words, so a reader
may always look 64 bits ahead.
"""

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from snm_core.scoring.layouts.huffman import MAX_CODE_BITS
from snm_core.scoring.layouts.state_kernels import shift_states

#: The fields of an entry, each with a code per order: code id = 4 * (order - 1) + field.
FIELD_CONTEXT_STEP, FIELD_WORD_GAP, FIELD_WORD, FIELD_VALUE = range(4)
FIELDS = 4
#: Sentences scored side by side: their lookups are independent, so the memory reads
#: of one overlap those of the others.
LANES = 8
#: Length of the trie layout's ``tables`` tuple; the small layout's is longer.
TRIE_TABLES = 6
#: The small layout's stored arrays and settings lead its ``tables``; the empty
#: context's table decoded on load follows.
SMALL_STORED = 16


@intrinsic
def _prefetch(typingctx, array, index):
    """Ask the CPU to bring ``array[index]`` into cache (LLVM's prefetch: read, keep)."""
    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array_value = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, array_value,
                                           [args[1]], wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(function, [builder.bitcast(pointer, byte_pointer), ir.Constant(i32, 0),
                                ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(array, index), codegen


@numba.njit(nogil=True, cache=True)
def pack(fields, lengths, positions, n_words):
    """Write ``fields[i, f]`` (right-aligned, ``lengths[i, f]`` bits, up to 64) of every
    entry i from bit ``positions[i]`` on, field after field; returns the stream."""
    bits = np.zeros(n_words, dtype=np.uint64)
    for i in range(fields.shape[0]):
        pos = positions[i]
        for f in range(fields.shape[1]):
            n = lengths[i, f]
            if n:
                _put(bits, pos, fields[i, f], n)
                pos += n
    return bits


@numba.njit(nogil=True, cache=True)
def run_sums(values, starts, ends):
    """Sum of ``values[starts[i]:ends[i]]`` for every i, added in order as the scorer
    adds them (so a stored M* is bit for bit the one decoding would give)."""
    sums = np.zeros(len(starts), dtype=np.float64)
    for i in range(len(starts)):
        total = 0.0
        for j in range(starts[i], ends[i]):
            total += values[j]
        sums[i] = total
    return sums


@numba.njit(nogil=True, cache=True, inline="always")
def _put(bits, pos, value, n):
    word = pos >> 6
    free = 64 - (pos & 63)
    value = np.uint64(value)
    if n <= free:
        if n < 64:
            value &= (np.uint64(1) << np.uint64(n)) - np.uint64(1)
        bits[word] |= value << np.uint64(free - n)
    else:
        bits[word] |= value >> np.uint64(n - free)
        bits[word + 1] |= value << np.uint64(64 - (n - free))


@numba.njit(nogil=True, cache=True, inline="always")
def _peek(bits, pos):
    """The 64 bits from ``pos`` on."""
    word = pos >> 6
    offset = pos & 63
    if offset == 0:
        return bits[word]
    return (bits[word] << np.uint64(offset)) | (bits[word + 1] >> np.uint64(64 - offset))


@numba.njit(nogil=True, cache=True, inline="always")
def _decode(bits, pos, code, limit, first, base, symbols):
    """``(symbol, bits read)`` of the canonical Huffman code ``code`` at ``pos``."""
    window = _peek(bits, pos) >> np.uint64(32)
    length = 1
    while length < MAX_CODE_BITS and window >= limit[code, length]:
        length += 1
    index = base[code, length] + np.int64(window >> np.uint64(32 - length)) - first[code, length]
    return symbols[index], length


@numba.njit(nogil=True, cache=True, inline="always")
def _gamma(bits, pos):
    """``(x, bits read)`` of the Elias gamma code of x >= 1 at ``pos``: n zeros, then x
    in n + 1 bits."""
    zeros = 0  # at most 30 in a stream as written; the bound keeps damage in the stream
    while zeros < 30 and (_peek(bits, pos + zeros) >> np.uint64(63)) == 0:
        zeros += 1
    width = 2 * zeros + 1  # at most 61: escaped values are below 2**31
    return np.int64(_peek(bits, pos) >> np.uint64(64 - width)), width


@numba.njit(nogil=True, cache=True, inline="always")
def _escaped(bits, pos, code, limit, first, base, symbols, escape):
    """A symbol of ``code``; the escape symbol is followed by the gamma code of the
    value less ``escape`` plus one."""
    symbol, n = _decode(bits, pos, code, limit, first, base, symbols)
    if symbol < escape:
        return symbol, n
    extra, m = _gamma(bits, pos + n)
    return escape + extra - 1, n + m


@numba.njit(nogil=True, cache=True, inline="always")
def _entry(bits, pos, i, context, word, code_base, escape, limit, first, base, symbols,
           level_values):
    """Decode entry i of a block (its first entry's key is the block's); returns
    ``(next pos, context, word, value)``."""
    if i:
        step, n = _escaped(bits, pos, code_base + FIELD_CONTEXT_STEP, limit, first, base,
                           symbols, escape)
        pos += n
        if step == 0:
            gap, n = _escaped(bits, pos, code_base + FIELD_WORD_GAP, limit, first, base,
                              symbols, escape)
            word += gap
        else:
            context += step
            word, n = _decode(bits, pos, code_base + FIELD_WORD, limit, first, base, symbols)
        pos += n
    level, n = _decode(bits, pos, code_base + FIELD_VALUE, limit, first, base, symbols)
    return pos + n, context, word, level_values[level]


@numba.njit(nogil=True, cache=True, inline="always")
def _last_at_most(keys, lo, hi, query):
    """The last index i in [lo, hi) with keys[i] <= query, or lo - 1."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= query:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@numba.njit(nogil=True, cache=True, inline="always")
def trie_child(order, context, word, tables):
    """Entry ``(context, word)`` of ``order`` in the trie layout: ``(its index or -1, its
    value, M_context*)``; a binary search of the context's entries."""
    entries, order_entries, contexts, order_contexts, m_star_values, first_order = tables
    at = order_contexts[order] + context
    base = order_entries[order]
    lo, end = base + contexts[at].start, base + contexts[at + 1].start
    m_star = m_star_values[contexts[at].m_star]
    n = end - lo
    if n == 0:
        return -1, 0.0, m_star
    # Branch-free: the last position whose word is at most the one sought.
    while n > 1:
        half = n >> 1
        lo = lo + half if entries[lo + half].word <= word else lo
        n -= half
    if entries[lo].word == word:
        return lo - base, np.float64(entries[lo].value), m_star
    return -1, 0.0, m_star


@numba.njit(nogil=True, cache=True, inline="always")
def trie_first(order, tag, word, tables):
    """:func:`trie_child` of a tag's empty context (its entries are ``order``): by word,
    directly."""
    entries, order_entries, contexts, order_contexts, m_star_values, first_order = tables
    entry = np.int64(first_order[tag, word])
    m_star = m_star_values[contexts[order_contexts[order]].m_star]
    if entry < 0:
        return entry, 0.0, m_star
    return entry, np.float64(entries[order_entries[order] + entry].value), m_star


@numba.njit(nogil=True, cache=True, inline="always")
def trie_context_prefetch(order, context, tables):
    """First read of a trie lookup: the context's record."""
    entries, order_entries, contexts, order_contexts, m_star_values, first_order = tables
    _prefetch(contexts, order_contexts[order] + context)


@numba.njit(nogil=True, cache=True, inline="always")
def trie_entries_prefetch(order, context, tables):
    """Second read: the middle entry of the context's, which a binary search reads first
    (and, for the few entries most contexts have, the one it ends on)."""
    entries, order_entries, contexts, order_contexts, m_star_values, first_order = tables
    at = order_contexts[order] + context
    lo = order_entries[order] + contexts[at].start
    _prefetch(entries, lo + ((contexts[at + 1].start - contexts[at].start) >> 1))


@numba.njit(nogil=True, cache=True, inline="always")
def small_first(order, tag, word, tables):
    """:func:`small_child` of a tag's empty context (its entries are ``order``), from the
    tables :func:`small_first_order` decoded when the model was loaded."""
    first_entry, first_value, first_m_star = tables[SMALL_STORED:]
    return np.int64(first_entry[tag, word]), first_value[tag, word], first_m_star[tag]


@numba.njit(nogil=True, cache=True)
def small_first_order(tags, max_n, tables):
    """Each tag's empty-context entries by word rank, decoded: ``(entry index or -1 (tags,
    radix) int32, value (tags, radix), M* (tags,), False if a decoded word is outside the
    vocabulary (a damaged stream))``, what :func:`small_child` finds, so that an event's
    first lookup reads no block.  ``tables`` are the layout's stored ones."""
    (bits, block_keys, block_offsets, order_blocks, order_entries, span_context, span_sum,
     order_spans, radix, block_entries, escape, limit, first, base, symbols,
     level_values) = tables
    entry = np.full((tags, radix), -1, dtype=np.int32)
    value = np.zeros((tags, radix), dtype=np.float64)
    m_star = np.zeros(tags, dtype=np.float64)
    for tag in range(tags):
        order = tag * (max_n + 1) + 1
        m_star[tag] = small_child(order, 0, 0, tables)[2]
        code_base = FIELDS * (order - 1)
        for b in range(order_blocks[order], order_blocks[order + 1]):
            first_entry = (b - order_blocks[order]) * block_entries
            key = block_keys[b]
            c, w = key // radix, key % radix
            pos = block_offsets[b]
            for i in range(min(block_entries, order_entries[order] - first_entry)):
                pos, c, w, v = _entry(bits, pos, i, c, w, code_base, escape, limit, first,
                                      base, symbols, level_values)
                if w < 0 or w >= radix:
                    return entry, value, m_star, False
                entry[tag, w] = first_entry + i
                value[tag, w] = v
    return entry, value, m_star, True


@numba.njit(nogil=True, cache=True, inline="always")
def no_prefetch(order, context, tables):
    """The small layout's reads are a block's, decoded at once: nothing to ask for early."""
    pass


@numba.njit(nogil=True, cache=True, inline="always")
def small_child(order, context, word, tables):
    """Entry ``(context, word)`` of ``order`` in the small layout: ``(its index or -1,
    its value, M_context*)`` where M_context* sums the values of every entry of that
    context."""
    (bits, block_keys, block_offsets, order_blocks, order_entries, span_context, span_sum,
     order_spans, radix, block_entries, escape, limit, first, base, symbols,
     level_values) = tables[:SMALL_STORED]
    lo, hi = order_blocks[order], order_blocks[order + 1]
    s = _last_at_most(span_context, order_spans[order], order_spans[order + 1], context)
    spans = s >= order_spans[order] and span_context[s] == context
    m_star = span_sum[s] if spans else 0.0
    # A context within one block: the block of its last possible key holds all its entries.
    b = _last_at_most(block_keys, lo, hi, context * radix + (word if spans else radix - 1))
    if b < lo:
        return -1, 0.0, m_star
    first_entry = (b - lo) * block_entries
    n = min(block_entries, order_entries[order] - first_entry)
    key = block_keys[b]
    c, w = key // radix, key % radix
    pos = block_offsets[b]
    found, value = -1, 0.0
    code_base = FIELDS * (order - 1)
    for i in range(n):
        pos, c, w, v = _entry(bits, pos, i, c, w, code_base, escape, limit, first, base,
                              symbols, level_values)
        if c > context or (spans and c == context and w > word):
            break
        if c == context:
            if not spans:
                m_star += v
            if w == word:
                found, value = first_entry + i, v
    return found, value, m_star


def _lookup(order, context, word, tables):
    """The layout's lookup (:func:`trie_child` or :func:`small_child`), chosen by the
    tables when :func:`event_sums` is compiled for them."""
    raise NotImplementedError("compiled code only")


def _first(order, tag, word, tables):
    """The layout's lookup in a tag's empty context (:func:`trie_first`,
    :func:`small_first`)."""
    raise NotImplementedError("compiled code only")


def _prefetch_context(order, context, tables):
    """The layout's first read of a lookup, asked for ahead."""
    raise NotImplementedError("compiled code only")


def _prefetch_entries(order, context, tables):
    """The layout's second read of a lookup, asked for ahead."""
    raise NotImplementedError("compiled code only")


def _layout(tables, trie, small):
    """The Python function of ``trie`` for the trie layout's tables, else of ``small``,
    for an overload to inline: a static choice, so the loop inlines its lookups (a
    function passed as an argument is called, which is slower) and stays one
    module-level function.  (A loop built per layout in a closure would be compiled
    again in every process: numba keys a closure's cache by its variables, and a
    jitted function pickles with an id new in every process.)"""
    return (trie if len(tables.types) == TRIE_TABLES else small).py_func


@overload(_lookup, inline="always")
def _lookup_of(order, context, word, tables):
    return _layout(tables, trie_child, small_child)


@overload(_first, inline="always")
def _first_of(order, tag, word, tables):
    return _layout(tables, trie_first, small_first)


@overload(_prefetch_context, inline="always")
def _prefetch_context_of(order, context, tables):
    return _layout(tables, trie_context_prefetch, no_prefetch)


@overload(_prefetch_entries, inline="always")
def _prefetch_entries_of(order, context, tables):
    return _layout(tables, trie_entries_prefetch, no_prefetch)


@numba.njit(nogil=True, cache=True)
def event_sums(words, offsets, bos, eos, min_n, max_n, tags, tables):
    """Sum of M_fw and of M_f* over the present n-gram features of every event,
    those of every tag, in the layout of ``tables`` (the trie layout's or the small
    layout's: each has its own compiled loop).

    ``words`` are the sentences' word ranks back to back (``offsets`` bound
    each); a sentence of n words has n + 1 events, the last predicting
    ``eos``.  The contexts of an event are the entries found for the
    previous event's target (the forward trie's state, as in KenLM).  A
    context that is an entry but not a feature (no links: M* = 0) adds
    nothing.  The tries of a model's tags are stored one after the other:
    order j of tag t is ``t * (max_n + 1) + j``.

    ``LANES`` sentences are scored side by side, an event of each per step:
    the reads of every lane's lookups are requested first, then the lookups
    run.  The sums of an event do not depend on the lanes.
    """
    n_sentences = len(offsets) - 1
    numerator = np.zeros(len(words) + n_sentences, dtype=np.float64)
    denominator = np.zeros(len(words) + n_sentences, dtype=np.float64)
    orders = max_n + 1
    context = np.full((LANES, tags, orders + 1), -1, dtype=np.int64)
    following = np.empty(orders + 1, dtype=np.int64)
    position = np.full(LANES, -1, dtype=np.int64)  # token index of a lane's event; -1 idle
    sentence = np.zeros(LANES, dtype=np.int64)
    bos_entry = np.empty(tags, dtype=np.int64)
    for tag in range(tags):
        bos_entry[tag] = _first(tag * orders + 1, tag, bos, tables)[0]
    started = 0
    for lane in range(min(LANES, n_sentences)):
        sentence[lane] = started
        position[lane] = offsets[started]
        context[lane, :, 0], context[lane, :, 1] = 0, bos_entry
        started += 1
    busy = min(LANES, n_sentences)
    while busy:
        for step in range(2):  # every lane's context reads, then its entry reads
            for lane in range(LANES):
                if position[lane] < 0:
                    continue
                for tag in range(tags):
                    for k in range(1, orders):
                        c = context[lane, tag, k]
                        if c >= 0 and step == 0:
                            _prefetch_context(tag * orders + k + 1, c, tables)
                        elif c >= 0:
                            _prefetch_entries(tag * orders + k + 1, c, tables)
        for lane in range(LANES):
            t = position[lane]
            if t < 0:
                continue
            s = sentence[lane]
            target = words[t] if t < offsets[s + 1] else eos
            event = t + s
            for tag in range(tags):
                following[:] = -1
                following[0] = 0
                entry, value, m_star = _first(tag * orders + 1, tag, target, tables)
                following[1] = entry
                if min_n == 0:
                    numerator[event] += value
                    denominator[event] += m_star
                for k in range(1, orders):
                    if context[lane, tag, k] < 0:  # longer contexts may be there (pruned)
                        continue
                    entry, value, m_star = _lookup(tag * orders + k + 1,
                                                  context[lane, tag, k], target, tables)
                    following[k + 1] = entry
                    if k >= min_n:
                        numerator[event] += value
                        denominator[event] += m_star
                context[lane, tag, :] = following
            if t < offsets[s + 1]:
                position[lane] = t + 1
            elif started < n_sentences:
                sentence[lane] = started
                position[lane] = offsets[started]
                context[lane, :, :] = -1
                context[lane, :, 0], context[lane, :, 1] = 0, bos_entry
                started += 1
            else:
                position[lane] = -1
                busy -= 1
    return numerator, denominator


@numba.njit(nogil=True, cache=True, error_model="numpy")
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
    n = len(target)
    orders = max_n + 1
    prob = np.zeros(n, dtype=np.float64)
    following = np.full((n, tags, orders + 1), -1, dtype=np.int64)
    ngram = np.zeros(n, dtype=np.int64)
    keep = np.zeros(n, dtype=np.int64)
    for i in range(n):
        numerator = denominator = 0.0
        for tag in range(tags):
            following[i, tag, 0] = 0
            entry, value, m_star = _first(tag * orders + 1, tag, rank[i], tables)
            following[i, tag, 1] = entry
            if entry >= 0:
                ngram[i] = max(ngram[i], 1)
            if min_n == 0:
                numerator += value
                denominator += m_star
            for k in range(1, orders):
                if context[i, tag, k] < 0:
                    continue
                entry, value, m_star = _lookup(tag * orders + k + 1, context[i, tag, k],
                                               rank[i], tables)
                if entry >= 0:
                    ngram[i] = max(ngram[i], k + 1)
                    if k + 1 < orders:
                        following[i, tag, k + 1] = entry
                if k >= min_n:
                    numerator += value
                    denominator += m_star
        prob[i] = numerator / denominator
        for k in range(1, orders):
            for tag in range(tags):
                if following[i, tag, k] >= 0:
                    keep[i] = k
    new_words, length = shift_states(words, target, keep)
    return prob, ngram, following, new_words, length
