"""Compiled loops (numba) of building the trie layouts by external sort
(:mod:`snm_core.scoring.layouts.trie_build`): n-gram sort keys, the trie streamed from
sorted n-grams, the per-context records streamed from each order's entries, and the
small layout's bit streams (:func:`pack`: read most significant bit first, bit p is
bit ``63 - p % 64`` of word ``p // 64``).

An n-gram's sort key is one unsigned integer of ``width`` uint64 words, the most
significant first: its tag in ``tag_bits`` bits, then one ``slot_bits`` field per
word, oldest first, holding the word's rank plus one (0: no word).  Keys compare
as (tag, ranks) in lexicographic order, a prefix before its extensions.
"""

import numba
import numpy as np

_ONE = np.uint64(1)


@numba.njit(nogil=True, cache=True, inline="always")
def _get(row, offset, bits):
    """The ``bits``-bit field (1..63) at ``offset`` bits from the top of the key ``row``."""
    word = offset >> 6
    end = (offset & 63) + bits
    mask = (_ONE << np.uint64(bits)) - _ONE
    if end <= 64:
        return np.int64((row[word] >> np.uint64(64 - end)) & mask)
    low = end - 64
    return np.int64(((row[word] << np.uint64(low)) | (row[word + 1] >> np.uint64(64 - low)))
                    & mask)


@numba.njit(nogil=True, cache=True, inline="always")
def _set(row, offset, bits, value):
    """Or ``value`` (below 2**bits) into the field at ``offset`` of the key ``row``."""
    word = offset >> 6
    end = (offset & 63) + bits
    value = np.uint64(value)
    if end <= 64:
        row[word] |= value << np.uint64(64 - end)
    else:
        low = end - 64
        row[word] |= value >> np.uint64(low)
        row[word + 1] |= value << np.uint64(64 - low)


@numba.njit(nogil=True, cache=True)
def gram_keys(offsets, flat, diversity, tag, target, rank, tag_bits, slot_bits, slots, width):
    """Sort keys (n_links, width) of the n-grams of links: feature i (its words
    ``flat[offsets[i]:offsets[i + 1]]``, its ``tag``) has ``diversity[i]`` links, in
    order, whose words are ``target``.  Returns ``(keys, the longest feature's words)``
    (a feature of ``slots`` words or more has no key: the caller refuses it)."""
    keys = np.zeros((len(target), width), np.uint64)
    link = 0
    longest = 0
    for i in range(len(diversity)):
        length = offsets[i + 1] - offsets[i]
        longest = max(longest, length)
        if length >= slots:
            continue
        for _ in range(diversity[i]):
            row = keys[link]
            if tag_bits:
                _set(row, 0, tag_bits, tag[i])
            for j in range(length):
                _set(row, tag_bits + j * slot_bits, slot_bits, rank[flat[offsets[i] + j]] + 1)
            _set(row, tag_bits + length * slot_bits, slot_bits, rank[target[link]] + 1)
            link += 1
    return keys, longest


@numba.njit(nogil=True, cache=True)
def key_tags(keys, tag_bits):
    """The tag of each key."""
    tags = np.zeros(len(keys), np.int64)
    if tag_bits:
        for i in range(len(keys)):
            tags[i] = _get(keys[i], 0, tag_bits)
    return tags


@numba.njit(nogil=True, cache=True)
def trie_stream(keys, m, tag_bits, slot_bits, radix, digit, ident, count, out_keys,
                out_values, out_count):
    """The trie entries that sorted n-grams (``keys`` of one tag, M ``m``) add, order by
    order: entry (c, w) of order j + 1 goes to ``out_keys[j]`` as ``c * radix + rank(w)``
    beside its value (M of the n-gram it is, else 0), ``out_count[j]`` of them.

    ``digit[j]``, ``ident[j]``: the field and entry index of order j + 1 of the last
    n-gram's path; ``count[j]``: entries of order j + 1 so far; all carried from call
    to call (zeros for a tag's first).  An n-gram's entries are those of its path below
    the longest prefix it shares with the previous n-gram: each new, as sorted keys put
    a prefix before its extensions.  Returns how many n-grams equal the one before
    (none in a model)."""
    slots = len(digit)
    out_count[:] = 0
    repeated = 0
    for i in range(len(keys)):
        row = keys[i]
        new = False
        length = 0
        for j in range(slots):
            d = _get(row, tag_bits + j * slot_bits, slot_bits)
            if d == 0:
                break
            length = j + 1
            if not new and d == digit[j]:
                continue
            new = True
            parent = ident[j - 1] if j else 0
            out_keys[j, out_count[j]] = parent * radix + d - 1
            out_values[j, out_count[j]] = 0.0
            out_count[j] += 1
            digit[j] = d
            ident[j] = count[j]
            count[j] += 1
        if new:
            out_values[length - 1, out_count[length - 1] - 1] = m[i]
        else:
            repeated += 1
        for j in range(length, slots):
            digit[j] = 0
    return repeated


@numba.njit(nogil=True, cache=True)
def context_records(context, values, i, base, c, last, open_start, open_sum, out_start,
                    out_sum):
    """Each context's record from its order's entries, streamed: where its entries start
    (a context without entries: where the next context's do) and the float64 sum of
    their values, added in order.

    ``context``, ``values``: a chunk of the order's entries (sorted), the first of them
    entry ``base``; from entry ``i`` on.  ``c``: the next context to write, below
    ``last``; ``open_start`` (-1: none yet), ``open_sum``: its entries so far.  Writes
    at most ``len(out_start)`` records; returns ``(i, c, open_start, open_sum,
    records written)``: context c stays open at the chunk's end (more of its entries
    may follow)."""
    k = 0
    n = len(context)
    while k < len(out_start) and c < last:
        if i < n and context[i] == c:
            if open_start < 0:
                open_start = base + i
            open_sum += np.float64(values[i])
            i += 1
            continue
        if i == n:
            break
        out_start[k] = open_start if open_start >= 0 else base + i
        out_sum[k] = open_sum
        k += 1
        c += 1
        open_start = -1
        open_sum = 0.0
    return i, c, open_start, open_sum, k


@numba.njit(nogil=True, cache=True)
def spanning_runs(context, values, base, block, run_context, run_start, run_sum):
    """The contexts whose entries span blocks of ``block`` entries, streamed: ``context``
    a chunk of an order's entries (sorted) from entry ``base`` on, ``values`` their
    (rounded) values; the run open before the chunk (``run_context`` -1: none).
    Returns ``(spanning contexts, their float64 sums in order, the open run's context,
    start, sum)``."""
    n = len(context)
    spans = np.empty(n, np.int64)
    sums = np.empty(n, np.float64)
    k = 0
    for i in range(n):
        if context[i] != run_context:
            if run_context >= 0 and run_start // block != (base + i - 1) // block:
                spans[k] = run_context
                sums[k] = run_sum
                k += 1
            run_context, run_start, run_sum = context[i], base + i, 0.0
        run_sum += values[i]
    return spans[:k], sums[:k], run_context, run_start, run_sum


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
