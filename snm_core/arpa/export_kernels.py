"""The ARPA text's loops, compiled (numba, no GIL): each link's words, and the lines
with their numbers.

A string of at most 16 bytes is copied as one fixed 16-byte block (one unaligned move,
no loop over its bytes) and the position then advanced by its true length; the output
has :data:`SLACK` bytes past the lines for the last block's overhang.
"""

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from snm_core.arpa.float_text import put_float32

TAB, SPACE, NEWLINE = 9, 32, 10
#: Bytes a string is copied by at once, and the output's room past its lines.
SLACK = 16
#: A word's cell: its bytes (when fewer than CELL), its length in the last byte.
CELL = 16
LONG = 255


@numba.njit(nogil=True, cache=True)
def gram_words(words, of, lengths, word, order):
    """Word j of each link's n-gram, int32 (order, links): its context's words
    (``words[of]``, oldest first, padded), then at j = its context's length its own
    ``word``; past that, any word (no n-gram of that length reads it)."""
    grams = np.empty((order, len(of)), np.int32)
    last = words.shape[1] - 1
    for i in range(len(of)):
        for j in range(order):
            grams[j, i] = word[i] if j == lengths[i] else words[of[i], min(j, last)]
    return grams


@intrinsic
def _move_block(typingctx, out, pos, source, start):
    """``out[pos:pos + SLACK] = source[start:start + SLACK]`` as one memcpy of a
    constant size (both uint8 arrays, no bounds checked)."""
    def codegen(context, builder, signature, args):
        out_array = context.make_array(signature.args[0])(context, builder, args[0])
        source_array = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(out_array.data, [args[1]]),
                           builder.gep(source_array.data, [args[3]]),
                           context.get_constant(types.intp, SLACK), 1)
        return context.get_dummy_value()
    return types.void(out, types.intp, source, types.intp), codegen


@numba.njit(nogil=True, cache=True, inline="always")
def _put(out, pos, source, start, end):
    """Copy ``source[start:end]`` to ``out[pos:]``; returns the position after it."""
    if end - start <= SLACK and start + SLACK <= len(source):
        _move_block(out, pos, source, start)
    else:
        for b in range(end - start):
            out[pos + b] = source[start + b]
    return pos + end - start


@numba.njit(nogil=True, cache=True)
def word_cells(vocab, vocab_start):
    """Each word's :data:`CELL` bytes (uint8 (V * CELL,)): a word of fewer bytes in
    its cell, its length last; a longer one marked :data:`LONG`.  A line then reads
    one cache line a word, not its offsets and its bytes apart."""
    words = len(vocab_start) - 1
    cells = np.zeros(words * CELL, np.uint8)
    for w in range(words):
        length = vocab_start[w + 1] - vocab_start[w]
        if length < CELL:
            for b in range(length):
                cells[w * CELL + b] = vocab[vocab_start[w] + b]
            cells[w * CELL + CELL - 1] = length
        else:
            cells[w * CELL + CELL - 1] = LONG
    return cells


@numba.njit(nogil=True, cache=True)
def gather_words(columns, rows):
    """Line i's words, row ``rows[i]`` of ``columns`` (a tuple of n int32 arrays, word
    j of every row), as int32 (k, n).

    The reads are at random and independent of each other, so the processor has many
    of them in flight; the lines are then made from memory read in order."""
    n = len(columns)
    words = np.empty((len(rows), n), np.int32)
    for i in range(len(rows)):
        r = rows[i]
        for j in range(n):
            words[i, j] = columns[j][r]
    return words


@numba.njit(nogil=True, cache=True)
def words_bytes(words, vocab_start):
    """The bytes of the words of the lines (int (k, n)), without separators."""
    total = 0
    for i in range(words.shape[0]):
        for j in range(words.shape[1]):
            w = words[i, j]
            total += vocab_start[w + 1] - vocab_start[w]
    return total


@numba.njit(nogil=True, cache=True)
def assemble_lines(words, cells, vocab, vocab_start, prob_bits, backoff_bits, out):
    """Write line i = ``prob TAB words TAB backoff NEWLINE`` (no back-off column when
    ``backoff_bits`` is empty) into ``out`` (uint8, room for the lines with
    :data:`~snm_core.arpa.float_text.MAX_CHARS` a number, plus :data:`SLACK`); returns
    the bytes of the lines.

    The words of line i are ``words[i]`` (int (k, n), oldest first), joined by SPACE;
    ``cells``: the words' :func:`word_cells`, ``vocab``/``vocab_start``: their UTF-8
    bytes and offsets (word w is ``vocab[vocab_start[w]:vocab_start[w + 1]]``).
    ``prob_bits``, ``backoff_bits``: line i's float32 numbers as their bits, written
    in their shortest form (:func:`~snm_core.arpa.float_text.put_float32`)."""
    pos = 0
    n = words.shape[1]
    with_backoff = len(backoff_bits) > 0
    for i in range(words.shape[0]):
        pos = put_float32(out, pos, prob_bits[i])
        out[pos] = TAB
        pos += 1
        for j in range(n):
            w = words[i, j]
            length = cells[w * CELL + CELL - 1]
            if length != LONG:
                _move_block(out, pos, cells, w * CELL)
                pos += length
            else:
                pos = _put(out, pos, vocab, vocab_start[w], vocab_start[w + 1])
            out[pos] = SPACE if j < n - 1 else (TAB if with_backoff else NEWLINE)
            pos += 1
        if with_backoff:
            pos = put_float32(out, pos, backoff_bits[i])
            out[pos] = NEWLINE
            pos += 1
    return pos
