"""The loops of ``snm sample``, in C (``sample_loops.c``; no GIL, no numba): a history's
feature keys, the rows' alias tables, the draws, the text.

P(w | h) = sum_f M_fw / sum_f M_f* over the features f active in h is the
mixture of the rows' distributions M_fw / M_f* weighted by M_f*, so a word is
drawn in two steps: a feature with probability M_f* / sum M_f*, then a word of
its row with probability M_fw / M_f*.  The rows are the model's, in key order
(:mod:`snm_core.sample.rows`): a record ``(key, first link, M_f*)`` per
feature, found by a direct-address index on the keys' top bits, and each
row's alias table (a word in one read, whatever the row's length).

A history's keys are those :class:`snm_core.text.features.FeatureExtractor`
gives the event (the tests compare the two on random histories): per position
j of the sentence (``<S>`` at 0), ``hashes[j, n]`` is the hash of the n words
before j, newest first (``_sequence_hashes``; kept for the last positions a
window reaches); a window (r, s, a) has base hash ``combine(hashes[j, a],
hashes[j - a - s, r])`` (``hashes[j, a]`` when r = 0); a tied type's windows, by
increasing skip, drop a window whose remote words an earlier valid one had
(``_type_pairs``); each tag salts the base.

The random numbers are xoshiro256** (Blackman and Vigna), four uint64 words of
state per stream held by the caller, seeded from (seed, stream) by Weyl steps
through fmix64 (splitmix64's scheme): a stream gives the same words whatever
thread runs it and however its output is cut into calls.

``tests/sample/reference_sample.py`` holds the definitions in Python (the generator,
the alias tables, the lanes' draws, the text), which the tests hold these to
exactly: the same seed gives the same text.
"""

import ctypes

import numpy as np

from snm_core.io import native
from snm_core.text.hashing import SEQUENCE_SEED
from snm_core.text.vocab import BOS_ID, EOS_ID

#: uint64 words of a feature record: key, first link, M_f* (float64 bits).
RECORD = 3
#: Sentences of a stream drawn side by side (:func:`sample_sentences`).
LANES = 8
#: Fields of the statistics a call of :func:`sample_sentences` returns.
STATS = ("words", "sentences", "empty_sentences", "truncated_sentences", "dead_ends")

_P, _I, _U = native.ptr, native.i64, native.u64


class Windows(ctypes.Structure):
    """A configuration's windows as the C loops read them (:func:`of`); holds the arrays
    (``arrays``) so that they outlive it."""

    _fields_ = [("windows", _P), ("n_windows", _I), ("salts", _P), ("n_tags", _I),
                ("n_types", _I), ("max_run", _I), ("ring", _I), ("sequence_seed", _U)]

    @classmethod
    def of(cls, windows, salts, max_run):
        """``windows`` int64 (n, 5): per window its type index, r, s, a and the first
        window of its type (a tied type's windows consecutive, by increasing s);
        ``salts`` uint64 (tags, types); ``max_run`` the longest run of words hashed."""
        windows = np.ascontiguousarray(windows, np.int64).reshape(-1, 5)
        salts = np.ascontiguousarray(salts, np.uint64)
        if salts.ndim != 2 or (len(windows) and windows[:, 0].max() >= salts.shape[1]):
            raise ValueError("salts must be (tags, types), a column a window's type")
        if len(windows) and max(windows[:, 1].max(), windows[:, 3].max()) > max_run:
            raise ValueError("a window reaches past max_run")
        tables = cls(windows=native.address(windows), n_windows=len(windows),
                     salts=native.address(salts), n_tags=salts.shape[0],
                     n_types=salts.shape[1], max_run=int(max_run),
                     ring=ring_size(windows), sequence_seed=int(SEQUENCE_SEED))
        tables.arrays = (windows, salts)
        tables.reference = ctypes.byref(tables)
        return tables


class Rows(ctypes.Structure):
    """A model's rows (:class:`snm_core.sample.rows.ModelRows`) as the C loop reads them."""

    _fields_ = [("records", _P), ("index", _P), ("index_wide", _I), ("shift", _U),
                ("links", _P), ("bos", native.i32), ("eos", native.i32)]

    @classmethod
    def of(cls, records, index, shift, links):
        """``records`` uint64 (3 (n + 1),): per feature key, first link, M_f* bits, then a
        sentinel whose first link is the number of links; ``index``, ``shift``: the
        KeyIndex over the records' keys (int32 or int64 slots); ``links``: the rows' alias
        tables (:func:`alias_rows`)."""
        if index.dtype not in (np.int32, np.int64):
            raise TypeError(f"a KeyIndex of int32 or int64 slots, not {index.dtype}")
        if len(records) % RECORD or len(links) % 2:
            raise ValueError("records of 3 words and links of 2")
        rows = cls(records=native.address(records, np.uint64), index=native.address(index),
                   index_wide=int(index.dtype == np.int64), shift=int(shift),
                   links=native.address(links, np.uint64), bos=BOS_ID, eos=EOS_ID)
        rows.arrays = (records, index, links)
        rows.reference = ctypes.byref(rows)
        return rows


class StreamState(ctypes.Structure):
    """A stream's state (:class:`snm_core.sample.draw.Stream`'s arrays) as the C loop
    reads and changes it."""

    _fields_ = [("rng", _P), ("history", _P), ("position", _P), ("hashes", _P),
                ("words", _P), ("quota", _I), ("max_length", _I)]

    @classmethod
    def of(cls, rng, history, position, hashes, words, quota, max_length, windows):
        """``rng`` uint64 (LANES, 4), each lane's random state (:func:`seed_state`);
        ``history`` int32 (LANES, max_length + 1), each lane's sentence so far, ``<S>``
        first; ``position`` int64 (LANES,), each lane's next target position (0: idle);
        ``hashes`` uint64 (LANES, ring, max_run + 1), work space of the keys (``windows``:
        a :class:`Windows`); ``words`` int64 (1,), the stream's words so far; ``quota``
        the stream's words."""
        shapes = {"rng": (rng, np.uint64, (LANES, 4)),
                  "history": (history, np.int32, (LANES, max_length + 1)),
                  "position": (position, np.int64, (LANES,)),
                  "hashes": (hashes, np.uint64, (LANES, windows.ring, windows.max_run + 1)),
                  "words": (words, np.int64, (1,))}
        for name, (array, dtype, shape) in shapes.items():
            if array.shape != shape:
                raise ValueError(f"{name}: shape {array.shape}, expected {shape}")
        state = cls(**{name: native.address(array, dtype)
                       for name, (array, dtype, _) in shapes.items()},
                    quota=int(quota), max_length=int(max_length))
        state.arrays = (rng, history, position, hashes, words)
        state.reference = ctypes.byref(state)
        return state


_seed_state = native.function("sample_seed_state", [_U, _U, _U, _P])
_uniforms = native.function("sample_uniforms", [_P, _I, _P])
_history_keys = native.function("sample_history_keys", [_P, _P, _I, _P, _P, _P, _P], _I)
_alias_rows = native.function("sample_alias_rows", [_P, _P, _I, _P, _P, _P], _I)
_sample_sentences = native.function("sample_sentences", [_P, _P, _P, _I, _P, _P, _P], _I)
_render_bytes = native.function("sample_render_bytes", [_P, _I, _P, native.i32], _I)
_render = native.function("sample_render", [_P, _I, _P, _P, native.i32, _P], _I)


# --- random numbers -----------------------------------------------------------------------------

def seed_state(seed, stream):
    """xoshiro256** state (uint64 (4,)) of stream ``stream`` of ``seed`` (each in [0, 2^64))."""
    state = np.empty(4, np.uint64)
    _seed_state(int(seed), int(stream), int(SEQUENCE_SEED), native.address(state))
    return state


def uniforms(state, n):
    """``n`` uniforms of a stream (``state`` uint64 (4,), changed in place; for the tests
    of the generator)."""
    out = np.empty(n, np.float64)
    _uniforms(native.address(state, np.uint64), int(n), native.address(out))
    return out


# --- a history's feature keys -------------------------------------------------------------------

def ring_size(windows):
    """Rows of the hash ring: one more than the widest window's r + s + a."""
    windows = np.asarray(windows, np.int64).reshape(-1, 5)
    return int((windows[:, 1] + windows[:, 2] + windows[:, 3]).max(initial=0)) + 1


def history_keys(history, windows, salts, max_run):
    """Feature keys of the event after ``history`` (int32 word ids, ``<S>`` first), in
    the draws' order (window by window, each window's tags in turn)."""
    tables = Windows.of(windows, salts, max_run)
    history = np.ascontiguousarray(history, np.int32)
    hashes = np.empty((tables.ring, max_run + 1), np.uint64)
    remote = np.empty(max(tables.n_windows, 1), np.uint64)
    valid = np.empty(max(tables.n_windows, 1), np.uint8)
    keys = np.empty(max(tables.n_windows * tables.n_tags, 1), np.uint64)
    n = _history_keys(tables.reference, native.address(history), len(history),
                      native.address(hashes), native.address(remote), native.address(valid),
                      native.address(keys))
    return keys[:n]


# --- rows ---------------------------------------------------------------------------------------

def alias_rows(m, diversity, words):
    """Each row's alias table (Walker's method, Vose's construction) and its total mass.

    A draw from a row of d links takes x = u d for a uniform u, the row's link
    k = floor(x), and that link's own word if x - k < its threshold, else its
    alias word: P(w) = m_w / sum(m) up to float64 rounding, in one memory read.

    Parameters
    ----------
    m : float64 (links,), rows back to back
    diversity : int64 (rows,), each row's links
    words : int32 (links,)

    Returns
    -------
    links : uint64 (2 links,): per link the threshold's float64 bits, then its own
        word in the low 32 bits and its alias word in the high 32
    total : float64 (rows,)
    """
    m = np.ascontiguousarray(m, np.float64)
    diversity = np.ascontiguousarray(diversity, np.int64)
    words = np.ascontiguousarray(words, np.int32)
    if len(words) != len(m) or diversity.sum() != len(m) or np.any(diversity < 0):
        raise ValueError("the rows' lengths do not add up to their links")
    links = np.empty(2 * len(m), np.uint64)
    total = np.empty(len(diversity), np.float64)
    native.checked(_alias_rows(native.address(m), native.address(diversity), len(diversity),
                               native.address(words), native.address(links),
                               native.address(total)), "the alias tables")
    return links, total


# --- the draws ----------------------------------------------------------------------------------

def out_length(words_wanted, max_length):
    """The ids :func:`sample_sentences` may write: its ``out``'s length."""
    return 2 * (words_wanted + LANES * (max_length + 1))


def sample_sentences(windows, rows, stream, words_wanted, out):
    """Sentences of one stream, drawn until ``words_wanted`` more words are out or, once
    the stream has its quota, until its last sentences are finished.

    A stream is :data:`LANES` sentences drawn side by side, each lane with its own
    random numbers, so that the memory reads of one overlap those of the others:
    a step finds every lane's next word in phases (the keys and their index
    slots; the slots' first records; the records, the feature and the link; the
    word), asking the CPU to fetch what the next phase reads.  A lane starts a
    sentence while the stream has fewer than its quota of words, and a sentence goes
    to ``out`` when it ends.  Calls end after whole steps and the lanes' state is
    the caller's, so the text does not depend on how it is cut into calls.  A sentence
    that reaches ``max_length`` words ends there (counted); a history none of whose
    features is in the model ends its sentence (a dead end).

    Parameters
    ----------
    windows : :class:`Windows`
    rows : :class:`Rows`
    stream : :class:`StreamState`, changed in place
    words_wanted : int
    out : int32, at least :func:`out_length` long: each sentence's words, then ``</S>``

    Returns
    -------
    used : int, the length of ``out`` used
    stats : int64 (len(STATS),)
    finished : bool, the stream has its quota and every lane is idle
    """
    if len(out) < out_length(words_wanted, stream.max_length):
        raise ValueError("out is too short")
    if stream.arrays[3].shape[1:] != (windows.ring, windows.max_run + 1):
        raise ValueError("the stream's hashes are not of these windows")
    stats = np.zeros(len(STATS), np.int64)
    finished = np.zeros(1, np.int64)
    used = _sample_sentences(windows.reference, rows.reference, stream.reference,
                             int(words_wanted), native.address(out, np.int32),
                             native.address(stats), native.address(finished))
    native.checked(used, "sampling")
    return used, stats, bool(finished[0])


# --- text ---------------------------------------------------------------------------------------

def render(ids, offsets, data):
    """UTF-8 text (uint8) of sentences ``ids`` (each ended by ``</S>``): words joined by
    spaces, a line per sentence; ``offsets``/``data`` the vocabulary's words (Arrow
    buffers)."""
    ids = np.ascontiguousarray(ids, np.int32)
    offsets = np.ascontiguousarray(offsets, np.int64)
    data = np.ascontiguousarray(data, np.uint8)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(offsets) - 1):
        raise ValueError("a word outside the vocabulary")
    size = _render_bytes(native.address(ids), len(ids), native.address(offsets), EOS_ID)
    text = np.empty(size, np.uint8)
    at = _render(native.address(ids), len(ids), native.address(offsets),
                 native.address(data), EOS_ID, native.address(text))
    return text[:at]
