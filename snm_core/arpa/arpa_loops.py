"""The back-off form's and the ARPA text's loops, in C (``arpa_loops.c``; no GIL, no
numba): the scan's keys, joins by hash table, rows cut by group, each link's words,
and the lines with their numbers.

A partition's keys are hashes, so their low bits index an open-addressed table: it
finds keys and groups rows by key without sorting them.  Numbers are written in their
shortest float32 form, byte for byte what pyarrow's cast to string writes (the tests
hold them to pyarrow; ``benchmarks/float_text.py --exhaustive`` checks all 2^32).
"""

import numpy as np

from snm_core.io import native

_P, _I, _U = native.ptr, native.i64, native.u64

#: The longest text of a float32 (``-0.0000012345678``, ``-1.2345678e-38``).
MAX_CHARS = 16
#: Bytes a word is copied by at once, and a line buffer's room past its lines.
SLACK = 16
#: A word's cell: its bytes (when fewer than CELL), its length in the last byte.
CELL = 16

_ngram_keys = native.function("arpa_ngram_keys", [_P, _I, _P, _I, _P, _U, _P, _P, _P])
_link_keys = native.function("arpa_link_keys", [_P, _P, _P, _P, _P, _I, _P, _P])
_padded_words = native.function("arpa_padded_words", [_P, _I, _P, _I, _P, _P])
_group_rows = native.function("arpa_group_rows", [_P, _I, _P, _P], _I)
_find = native.function("arpa_find", [_P, _I, _P, _I, _P], _I)
_group_bounds = native.function("arpa_group_bounds", [_P, _I, _I, _I, _P])
_scatter = native.function("arpa_scatter_by_group", [_P, _I, _P, _I, _I, _P, _I, _P, _P])
_gram_words = native.function("arpa_gram_words", [_P, _I, _P, _P, _P, _I, _I, _P])
_gather_words = native.function("arpa_gather_words", [_P, _I, _P, _I, _P])
_word_cells = native.function("arpa_word_cells", [_P, _P, _I, _P])
_words_bytes = native.function("arpa_words_bytes", [_P, _I, _P], _I)
_float32_texts = native.function("arpa_float32_texts", [_P, _I, _P, _P], _I)
_assemble = native.function("arpa_assemble_lines", [_P, _I, _I, _P, _P, _P, _P, _P, _P], _I)

_a = native.address


def _int64(values):
    return np.ascontiguousarray(values, np.int64)


def _int32(values):
    return np.ascontiguousarray(values, np.int32)


def ngram_keys(words, lengths, salts, seed):
    """For n-gram contexts (``words`` int64 (m, width), oldest first, padded,
    ``lengths`` (m,)): ``(keys, suffix keys, own entries)``, uint64 (m,).

    The twin of ``FeatureExtractor.keys_for(n, words)`` for the untagged n-gram types
    (type id n, ``salts`` their :attr:`~snm_core.text.features.FeatureExtractor.type_salts`,
    ``seed`` ``hashing.SEQUENCE_SEED``): a context's key, its suffix's (without its oldest
    word; the empty context's is its own) and ``link_key`` of its prefix's key and last
    word (0 for the empty context), in one pass: the suffix's fold is the context's
    before its oldest word."""
    words, lengths = _int64(words), _int64(lengths)
    salts = np.ascontiguousarray(salts, np.uint64)
    if len(lengths) and lengths.max() >= len(salts):
        raise ValueError(f"a context of {lengths.max()} words, salts for {len(salts) - 1}")
    keys, suffix, own = (np.empty(len(lengths), np.uint64) for _ in range(3))
    _ngram_keys(_a(words), words.shape[1] if words.ndim == 2 else 0, _a(lengths),
                len(lengths), _a(salts), int(seed), _a(keys), _a(suffix), _a(own))
    return keys, suffix, own


def link_keys(keys, suffix, lengths, of, word):
    """For links (feature row ``of``, ``word``): ``(entry keys, suffix entry keys)``, the
    ``link_key`` of their context and of its suffix (an empty context's: its own)."""
    keys, suffix = np.ascontiguousarray(keys, np.uint64), np.ascontiguousarray(suffix, np.uint64)
    lengths, of, word = _int64(lengths), _int64(of), _int32(word)
    entry, entry_suffix = np.empty(len(of), np.uint64), np.empty(len(of), np.uint64)
    _link_keys(_a(keys), _a(suffix), _a(lengths), _a(of), _a(word), len(of), _a(entry),
               _a(entry_suffix))
    return entry, entry_suffix


def padded_words(offsets, values, width):
    """The word lists of a list column (``offsets``, ``values``) as rows of ``width``
    words padded with -1, and their lengths: ``(words int64 (m, width), lengths)`` (a
    longer list keeps its first ``width`` words; its length says so)."""
    offsets, values = _int64(offsets), _int32(values)
    m = len(offsets) - 1
    words, lengths = np.empty((m, width), np.int64), np.empty(m, np.int64)
    _padded_words(_a(offsets), m, _a(values), width, _a(words), _a(lengths))
    return words, lengths


def group_rows(keys):
    """``(group of each row, first row of each group)``, int64; groups numbered in the
    order of their first rows."""
    keys = np.ascontiguousarray(keys, np.uint64)
    group, first = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
    groups = _group_rows(_a(keys), len(keys), _a(group), _a(first))
    native.checked(groups, "group_rows")
    return group, first[:groups]


def find(keys, queries):
    """Position of each query in ``keys`` (distinct), -1 where absent: int64.

    A table of every key would miss the cache at every probe; with keys and queries cut
    by chunk first, each chunk's table stays in the cache."""
    keys = np.ascontiguousarray(keys, np.uint64)
    queries = np.ascontiguousarray(queries, np.uint64)
    found = np.empty(len(queries), np.int64)
    native.checked(_find(_a(keys), len(keys), _a(queries), len(queries), _a(found)), "find")
    return found


def _groups_of(group):
    """``(group, bytes an item)``: contiguous uint16 as given, anything else as int64."""
    group = np.asarray(group)
    if group.dtype == np.uint16:
        return np.ascontiguousarray(group), 2
    return np.ascontiguousarray(group, np.int64), 8


def group_bounds(group, groups):
    """``bounds`` (int64, groups + 1): group g's rows go to ``bounds[g]:bounds[g + 1]``."""
    group, group_bytes = _groups_of(group)
    if len(group) and (group.min() < 0 or group.max() >= groups):
        raise ValueError(f"a group outside 0..{groups - 1}")
    bounds = np.empty(groups + 1, np.int64)
    _group_bounds(_a(group), group_bytes, len(group), groups, _a(bounds))
    return bounds


def scatter_by_group(values, group, bounds):
    """``values`` reordered by ``group`` (stable: rows of a group keep their order);
    ``bounds``: :func:`group_bounds`."""
    values = np.ascontiguousarray(values)
    group, group_bytes = _groups_of(group)
    if len(values) != len(group):
        raise ValueError(f"{len(values)} values for {len(group)} rows")
    out = np.empty_like(values)
    groups = len(bounds) - 1
    cursor = np.empty(groups, np.int64)
    item = values.dtype.itemsize * int(np.prod(values.shape[1:], dtype=np.int64))
    _scatter(_a(values), item, _a(group), group_bytes, len(values), _a(_int64(bounds)),
             groups, _a(cursor), _a(out))
    return out


def gram_words(words, of, lengths, word, order):
    """Word j of each link's n-gram, int32 (order, links): its context's words
    (``words[of]``, oldest first, padded), then at j = its context's length its own
    ``word``; past that, any word (no n-gram of that length reads it)."""
    words, of, lengths, word = _int64(words), _int64(of), _int64(lengths), _int32(word)
    grams = np.empty((order, len(of)), np.int32)
    _gram_words(_a(words), words.shape[1], _a(of), _a(lengths), _a(word), len(of), order,
                _a(grams))
    return grams


def gather_words(columns, rows):
    """Line i's words, row ``rows[i]`` of ``columns`` (n int32 arrays, word j of every
    row), as int32 (k, n).  The reads are at random and independent of each other, so
    the processor has many of them in flight; the lines are then made from memory read
    in order."""
    columns = [_int32(c) for c in columns]
    rows = _int64(rows)
    if len(rows) and (rows.min() < 0 or rows.max() >= min(len(c) for c in columns)):
        raise IndexError("gather_words: a row outside the columns")
    pointers = np.array([c.ctypes.data for c in columns], np.uint64)
    words = np.empty((len(rows), len(columns)), np.int32)
    _gather_words(_a(pointers), len(columns), _a(rows), len(rows), _a(words))
    return words


def word_cells(vocab, vocab_start):
    """Each word's :data:`CELL` bytes (uint8 (V * CELL,)): a word of fewer bytes in its
    cell, its length last; a longer one marked 255.  A line then reads one cache line a
    word, not its offsets and its bytes apart."""
    vocab, vocab_start = np.ascontiguousarray(vocab, np.uint8), _int64(vocab_start)
    cells = np.empty((len(vocab_start) - 1) * CELL, np.uint8)
    _word_cells(_a(vocab), _a(vocab_start), len(vocab_start) - 1, _a(cells))
    return cells


def float32_texts(values):
    """The texts of float32 ``values`` as (offsets int64 (n + 1), uint8 bytes), as a
    pyarrow string array's buffers."""
    bits = np.ascontiguousarray(values, np.float32).view(np.uint32)
    offsets = np.empty(len(bits) + 1, np.int64)
    out = np.empty(len(bits) * MAX_CHARS, np.uint8)
    return offsets, out[:_float32_texts(_a(bits), len(bits), _a(offsets), _a(out))]


def format_lines(vocab_text, words, log_prob, backoff):
    """ARPA lines (``log10 p <TAB> words [<TAB> back-off]``, float32 in its shortest form)
    as one uint8 array; ``vocab_text`` the vocabulary's ``(offsets, bytes, cells)``
    (:func:`word_cells`), ``words`` int (k, n), oldest first.  A back-off of -0 stays
    ``-0``."""
    vocab_start, vocab, cells = vocab_text
    words = _int32(words)
    if words.size and (words.min() < 0 or words.max() >= len(vocab_start) - 1):
        raise IndexError("format_lines: a word outside the vocabulary")
    prob_bits = np.ascontiguousarray(log_prob, np.float32).view(np.uint32)
    backoff_bits = (None if backoff is None
                    else np.ascontiguousarray(backoff, np.float32).view(np.uint32))
    numbers = 1 if backoff is None else 2
    room = (_words_bytes(_a(words), words.size, _a(vocab_start))
            + len(words) * (words.shape[1] + numbers * (1 + MAX_CHARS)) + SLACK)
    out = np.empty(room, np.uint8)  # its pages past the lines are never touched
    return out[:_assemble(_a(words), len(words), words.shape[1], _a(cells), _a(vocab),
                          _a(vocab_start), _a(prob_bits), _a(backoff_bits), _a(out))]
