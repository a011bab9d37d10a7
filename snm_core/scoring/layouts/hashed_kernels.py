"""The hashed layout's lookups and scoring, in C (``hashed_loops.c``; no GIL).

Scoring looks up every (event, feature) pair in the model, a key-index probe
for the feature, then one for the link to the target word.  In numpy that
would be a dozen whole-array passes per batch under the GIL; :func:`event_sums`
makes a few tight passes per block of pairs, whose cache misses overlap.

The tests hold these to independent computations: brute-force perplexity from
the counts, probabilities that sum to one, KenLM on the exported ARPA, and
positions in a small sorted array.
"""

import ctypes

import numpy as np

from snm_core.io import native
from snm_core.text.hashing import SEQUENCE_SEED

#: :data:`snm_core.scoring.layouts.hashed_tables.SLOT_BLOCK_BITS` (hashed_tables imports this module, not back).
SLOT_BLOCK_BITS = 8


class _Table(ctypes.Structure):
    """An :class:`snm_core.scoring.layouts.hashed_tables.EntryTable` as the C loops read it."""

    _fields_ = [("words", native.ptr), ("n_entries", native.i64), ("offsets", native.ptr),
                ("blocks", native.ptr), ("block_bits", native.i64), ("shift", native.i64),
                ("overflow_keys", native.ptr), ("overflow_rows", native.ptr),
                ("n_overflow", native.i64), ("codebook", native.ptr)]

    @classmethod
    def of(cls, words, offsets, blocks, shift, overflow_keys, overflow_rows, codebook=None):
        """From a table's ``parts`` (the arrays must outlive the structure): ``words``
        uint32 (8-byte entries), or the bytes of a packed table's 3-byte entries with the
        ``codebook`` of their value codes."""
        packed = codebook is not None
        return cls(native.address(words, np.uint8 if packed else np.uint32),
                   len(words) // (3 if packed else 2),
                   native.address(offsets, np.uint16), native.address(blocks, np.int64),
                   SLOT_BLOCK_BITS, int(shift), native.address(overflow_keys, np.uint64),
                   native.address(overflow_rows, np.int64), len(overflow_keys),
                   native.address(codebook, np.float32))


class _Links(ctypes.Structure):
    """The link values and the collision table (:data:`snm_core.scoring.layouts.hashed.
    COLLISION`) as the C loops read them."""

    _fields_ = [("link_c", native.ptr), ("mask", native.u64)] + [
        (name, native.ptr) for name in ("keys", "features", "words", "m", "c")] + [
        ("n", native.i64)]

    @classmethod
    def of(cls, link_c, mask, keys, features, words, m, c):
        return cls(native.address(link_c, np.float32),
                   int(mask), native.address(keys, np.uint64),
                   native.address(features, np.uint64), native.address(words, np.int64),
                   native.address(m, np.float32), native.address(c, np.float32), len(keys))


_P = native.ptr
_find_keys = {width: native.function(f"find_keys{width}", [_P, native.i64, _P, native.i64, _P,
                                                          native.i64, _P])
              for width in (32, 64)}
_find_entries = native.function("find_entries", [_P, _P, native.i64, _P])
_event_sums = native.function("scorer_event_sums", [_P] * 5 + [native.i64] + [_P] * 5,
                              native.i64)
_link_values = native.function("scorer_link_values", [_P] * 3 + [native.i64, _P, _P],
                               native.i64)
_LOOPS = native.module()
#: The loops of one state at a time, which a decoder's LM in C++ calls by address
#: (:meth:`Scorer.state_loops`).
STATE_LOOPS = ("scorer_state_features", "scorer_state_word", "scorer_next_state")


def find(keys, start, shift, queries):
    """:meth:`snm_core.scoring.layouts.hashed_tables.KeyIndex.find` for an array of queries."""
    queries = np.ascontiguousarray(queries, np.uint64)
    result = np.empty(len(queries), np.int64)
    _find_keys[start.dtype.itemsize * 8](
        native.address(keys, np.uint64), len(keys),
        native.address(start, np.int32 if start.dtype.itemsize == 4 else np.int64), int(shift),
        native.address(queries), len(queries), native.address(result))
    return result


def find_entries(words, offsets, blocks, shift, overflow_keys, overflow_rows, codebook,
                 queries):
    """:meth:`snm_core.scoring.layouts.hashed_tables.EntryTable.find` for an array of queries."""
    table = _Table.of(words, offsets, blocks, shift, overflow_keys, overflow_rows, codebook)
    queries = np.ascontiguousarray(queries, np.uint64)
    result = np.empty(len(queries), np.int64)
    _find_entries(ctypes.byref(table), native.address(queries), len(queries),
                  native.address(result))
    return result


class _Scorer(ctypes.Structure):
    _fields_ = [("features", _Table), ("links", _Table), ("values", _Links),
                ("prerequisite", _P), ("n_types", native.i64), ("windows", _P),
                ("type_windows", _P), ("types", native.i64), ("tags", native.i64),
                ("salts", _P), ("link_length", _P), ("minimal", native.i64),
                ("width", native.i64), ("seed", native.u64)]


class Scorer:
    """A hashed model's arrays as the C loops read them, set up once: scoring a batch
    then addresses only its own arrays (a decoder's call is a few microseconds).

    Parameters
    ----------
    features, links : :class:`snm_core.scoring.layouts.hashed_tables.EntryTable`
    link_c : float32 (n_links,), c(w|f), or None (a packed model: no unadjusted model)
    link_mask : uint64, the link key bits the table keeps (all but in tests)
    collisions : the collision table's columns (:data:`snm_core.scoring.layouts.hashed.
        COLLISION`), contiguous: a found entry whose M is negative (``SHARED``) is a key
        several links share, settled there
    prerequisite : int64 (n_types,), the type id that must be found first, or -1: an
        n-gram's suffix one word shorter, whose lookups failing skip the n-gram's
    windows : int64 (g, 3), (r, s, a) of each generator of the configuration, by type,
        a tied type's windows by skip length
    type_windows : int64 (types + 1,), the windows of type t are
        ``type_windows[t]:type_windows[t + 1]``
    salts : uint64 (tags, types), the key salt of each (tag, type)
    link_length : int64 (n_types,), the n-gram length of each type id's links (0 for
        skip-grams)
    minimal : bool, whether a state keeps only the words of its longest n-gram found
    width : int, the words a state holds at most
    """

    def __init__(self, features, links, link_c, link_mask, collisions, prerequisite, windows,
                 type_windows, salts, link_length, minimal, width):
        kept = [np.ascontiguousarray(a, t) for a, t in (
            (prerequisite, np.int64), (windows, np.int64), (type_windows, np.int64),
            (salts, np.uint64), (link_length, np.int64))]
        self._arrays = (features, links, link_c, collisions, kept)  # what the pointers read
        prerequisite, windows, type_windows, salts, link_length = kept
        self._scorer = _Scorer(
            _Table.of(*features.parts), _Table.of(*links.parts),
            _Links.of(link_c, link_mask, *collisions),
            native.address(prerequisite), len(prerequisite), native.address(windows),
            native.address(type_windows), salts.shape[1], salts.shape[0], native.address(salts),
            native.address(link_length), int(minimal), width, int(SEQUENCE_SEED))
        self._ref = ctypes.byref(self._scorer)
        self._address = ctypes.addressof(self._scorer)
        self._state_pairs = salts.shape[0] * int(type_windows[-1])  # tags x windows

    def state_loops(self):
        """``(address of this scorer's structure, addresses of STATE_LOOPS, room a
        state's features need)``: what a decoder's LM in C++ calls
        (``snm/decoding/flashlight_native.cpp``); valid while this scorer lives."""
        library = native.library()
        loops = tuple(ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                      for name in STATE_LOOPS)
        return ctypes.addressof(self._scorer), loops, self._state_pairs

    def event_sums(self, pair_key, pair_event, type_bounds, target, n_events):
        """Per-event sums over the pairs whose feature (and link) the model holds.

        Pairs come grouped by type id.  A pair whose type has a prerequisite type
        (an n-gram's suffix one word shorter) is looked up only where the event's
        prerequisite feature was found, and its link only where that feature's link
        was: every occurrence of an n-gram is one of its suffix, so the lookups
        skipped would fail.  Sums run over the pairs in their order.

        Parameters
        ----------
        pair_key : uint64 (n_pairs,), feature key of each pair
        pair_event : int64 (n_pairs,), event of each pair
        type_bounds : int64 (n_types + 1,), pairs of type id t are
            ``type_bounds[t]:type_bounds[t + 1]``
        target : int32 (n_events,), target word of each event

        Returns
        -------
        m_star_sum, link_m_sum, link_c_sum : float64 (n_events,)
        n_features : int64 (n_events,), pairs whose feature the model holds
        """
        arrays = [np.ascontiguousarray(a, t) for a, t in (
            (pair_key, np.uint64), (pair_event, np.int64), (type_bounds, np.int64),
            (target, np.int32))]
        out = [np.zeros(n_events) for _ in range(3)] + [np.zeros(n_events, np.int64)]
        status = _event_sums(self._ref, *(native.address(a) for a in arrays), n_events,
                             *(native.address(a) for a in out), None)
        native.checked(status, "hashed scoring")
        return out

    def link_values(self, feature_keys, words):
        """M_fw and c(w|f) (float64, 0 where absent) of the links (``feature_keys[i]``,
        ``words[i]``), a shared key settled in the collision table as
        :meth:`event_sums` does."""
        feature_keys = np.ascontiguousarray(feature_keys, np.uint64)
        words = np.ascontiguousarray(words, np.int64)
        m, c = np.empty(len(words)), np.empty(len(words))
        status = _link_values(self._ref, native.address(feature_keys), native.address(words),
                              len(words), native.address(m), native.address(c))
        native.checked(status, "hashed scoring")
        return m, c

    def advance(self, words, length, target):
        """One event after each of many states: its pairs (the features of the
        configuration's windows a state's words hold, in the extractor's order) summed
        as :meth:`event_sums` sums an event's, and the states after the target.

        ``words``: int32 (n, width), each state's words right-aligned (the newest
        last), -1 before them; ``length``: int64 (n,), the words each holds (``<S>``
        included).  Returns ``(P(target) float64 (n,), the n-gram length of the
        longest link found int64 (n,), words, length)`` of the new states: with
        ``minimal`` a new state keeps the words of that n-gram, else one word more
        than the state (at most the width).
        """
        words = np.ascontiguousarray(words, np.int32)
        length = np.ascontiguousarray(length, np.int64)
        target = np.ascontiguousarray(target, np.int32)
        n, width = words.shape
        out = np.empty(n * (24 + 4 * width), np.uint8)  # the C function's layout
        if length.shape != (n,) or target.shape != (n,):
            raise ValueError("advance: the lengths and targets of n states")
        status = _LOOPS.scorer_advance(self._address, words, length, target, out, n)
        native.checked(status, "hashed scoring")
        prob, matched, new_length = out[:24 * n].view(np.float64).reshape(3, n)
        return (prob, matched.view(np.int64), out[24 * n:].view(np.int32).reshape(n, width),
                new_length.view(np.int64))
