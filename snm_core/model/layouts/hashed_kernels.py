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

#: :data:`snm_core.model.layouts.hashed.SLOT_BLOCK_BITS` (hashed imports this module, not back).
SLOT_BLOCK_BITS = 8


class _Table(ctypes.Structure):
    """An :class:`snm_core.model.layouts.hashed.EntryTable` as the C loops read it."""

    _fields_ = [("words", native.ptr), ("n_entries", native.i64), ("offsets", native.ptr),
                ("blocks", native.ptr), ("block_bits", native.i64), ("shift", native.i64),
                ("overflow_keys", native.ptr), ("overflow_rows", native.ptr),
                ("n_overflow", native.i64)]

    @classmethod
    def of(cls, words, offsets, blocks, shift, overflow_keys, overflow_rows):
        """From a table's ``parts`` (the arrays must outlive the structure)."""
        return cls(native.address(words, np.uint32), len(words) // 2,
                   native.address(offsets, np.uint16), native.address(blocks, np.int64),
                   SLOT_BLOCK_BITS, int(shift), native.address(overflow_keys, np.uint64),
                   native.address(overflow_rows, np.int64), len(overflow_keys))


class _Links(ctypes.Structure):
    """The link values and the collision table (:data:`snm_core.model.layouts.hashed.
    COLLISION`) as the C loops read them."""

    _fields_ = [("link_m", native.ptr), ("link_c", native.ptr), ("mask", native.u64)] + [
        (name, native.ptr) for name in ("keys", "features", "words", "m", "c")] + [
        ("n", native.i64)]

    @classmethod
    def of(cls, link_m, link_c, mask, keys, features, words, m, c):
        return cls(native.address(link_m, np.float32), native.address(link_c, np.float32),
                   int(mask), native.address(keys, np.uint64),
                   native.address(features, np.uint64), native.address(words, np.int64),
                   native.address(m, np.float32), native.address(c, np.float32), len(keys))


_P = native.ptr
_find_keys = {width: native.function(f"find_keys{width}", [_P, native.i64, _P, native.i64, _P,
                                                          native.i64, _P])
              for width in (32, 64)}
_find_entries = native.function("find_entries", [_P, _P, native.i64, _P])
_link_values = native.function("link_values", [_P, _P, _P, _P, native.i64] + [_P] * 4)
_event_sums = native.function("event_sums", [_P] * 4 + [native.i64, _P, native.i64]
                              + [_P] * 10)
_state_windows = native.function("state_windows", [_P, native.i64, native.i64] + [_P] * 3
                                 + [native.i64, native.u64] + [_P] * 4, native.i64)
_state_pairs = native.function("state_pairs", [_P, _P, native.i64, _P, _P, native.i64,
                                               native.i64, _P, _P, _P])


def _contiguous(array, dtype):
    return np.ascontiguousarray(array, dtype)


def find(keys, start, shift, queries):
    """:meth:`snm_core.model.layouts.hashed.KeyIndex.find` for an array of queries."""
    queries = _contiguous(queries, np.uint64)
    result = np.empty(len(queries), np.int64)
    _find_keys[start.dtype.itemsize * 8](
        native.address(keys, np.uint64), len(keys),
        native.address(start, np.int32 if start.dtype.itemsize == 4 else np.int64), int(shift),
        native.address(queries), len(queries), native.address(result))
    return result


def find_entries(words, offsets, blocks, shift, overflow_keys, overflow_rows, queries):
    """:meth:`snm_core.model.layouts.hashed.EntryTable.find` for an array of queries."""
    table = _Table.of(words, offsets, blocks, shift, overflow_keys, overflow_rows)
    queries = _contiguous(queries, np.uint64)
    result = np.empty(len(queries), np.int64)
    _find_entries(ctypes.byref(table), native.address(queries), len(queries),
                  native.address(result))
    return result


def link_values(feature_keys, words, link_words, link_offsets, link_blocks, link_shift,
                link_overflow_keys, link_overflow_rows, link_m, link_c, link_mask,
                collision_keys, collision_features, collision_words, collision_m,
                collision_c):
    """M_fw and c(w|f) (float64, 0 where absent) of the links (``feature_keys[i]``,
    ``words[i]``), a shared key settled in the collision table as :func:`event_sums`
    does."""
    table = _Table.of(link_words, link_offsets, link_blocks, link_shift, link_overflow_keys,
                      link_overflow_rows)
    links = _Links.of(link_m, link_c, link_mask, collision_keys, collision_features,
                      collision_words, collision_m, collision_c)
    feature_keys, words = _contiguous(feature_keys, np.uint64), _contiguous(words, np.int64)
    n = len(feature_keys)
    queries, rows, m, c = (np.empty(n, t) for t in (np.uint64, np.int64, np.float64,
                                                     np.float64))
    _link_values(ctypes.byref(table), ctypes.byref(links), native.address(feature_keys),
                 native.address(words), n, *(native.address(a) for a in (queries, rows, m, c)))
    return m, c


def event_sums(pair_key, pair_event, type_bounds, prerequisite, target, n_events,
               feature_words, feature_offsets, feature_blocks, feature_shift,
               feature_overflow_keys, feature_overflow_rows, m_star,
               link_words, link_offsets, link_blocks, link_shift, link_overflow_keys,
               link_overflow_rows, link_m, link_c, link_mask, collision_keys,
               collision_features, collision_words, collision_m, collision_c):
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
    type_bounds : int64 (n_types + 1,), pairs of type id t are type_bounds[t]:type_bounds[t+1]
    prerequisite : int64 (n_types,), type id that must be found first, or -1
    target : int32 (n_events,), target word of each event
    feature_words .. feature_overflow_rows : the feature
        :class:`snm_core.model.layouts.hashed.EntryTable` (its ``parts``)
    m_star : float32 (2 n_features,), the feature entries as float32: M_f* of row r at 2r + 1
    link_words .. link_overflow_rows : the link table's ``parts``
    link_m : float32 (2 n_links,), the link entries as float32: M_fw of row r at 2r + 1
    link_c : float32 (n_links,), c(w|f)
    link_mask : uint64, the link key bits the table keeps (all but in tests)
    collision_keys .. collision_c : the collision table's columns
        (:data:`snm_core.model.layouts.hashed.COLLISION`): a found entry whose M is
        negative (``SHARED``) is a key several links share, settled there

    Returns
    -------
    m_star_sum, link_m_sum, link_c_sum : float64 (n_events,)
    n_features : int64 (n_events,), pairs whose feature the model holds
    link_found : bool (n_types, n_events), whether the event's link of each type was found
    """
    features = _Table.of(feature_words, feature_offsets, feature_blocks, feature_shift,
                         feature_overflow_keys, feature_overflow_rows)
    links_table = _Table.of(link_words, link_offsets, link_blocks, link_shift,
                            link_overflow_keys, link_overflow_rows)
    links = _Links.of(link_m, link_c, link_mask, collision_keys, collision_features,
                      collision_words, collision_m, collision_c)
    pair_key, pair_event = _contiguous(pair_key, np.uint64), _contiguous(pair_event, np.int64)
    type_bounds = _contiguous(type_bounds, np.int64)
    prerequisite, target = _contiguous(prerequisite, np.int64), _contiguous(target, np.int32)
    n_types = len(prerequisite)
    sums = [np.zeros(n_events) for _ in range(3)]
    n_features = np.zeros(n_events, np.int64)
    row_found, link_found = (np.zeros((n_types, n_events), np.bool_) for _ in range(2))
    _event_sums(native.address(pair_key), native.address(pair_event),
                native.address(type_bounds), native.address(prerequisite), n_types,
                native.address(target), n_events, ctypes.byref(features),
                native.address(m_star, np.float32), ctypes.byref(links_table),
                ctypes.byref(links), *(native.address(a) for a in sums),
                native.address(n_features), native.address(row_found),
                native.address(link_found))
    return (*sums, n_features, link_found)


# --- the features of states (left-to-right scoring) ---------------------------------------------

def state_pairs(words, length, windows, type_windows, salts):
    """The (event, feature) pairs of one event after each state, in the order in which
    :meth:`snm_core.text.features.FeatureExtractor.extract` gives an event's pairs (tag,
    type, window), so that :func:`event_sums` adds them up in the same order.

    Parameters
    ----------
    words : int32 (n, width), each state's words right-aligned (the newest last)
    length : int64 (n,), the words each state holds (``<S>`` included): a window
        (r, s, a) is extracted where r + s + a <= length, as the extractor's depth rule
    windows : int64 (g, 3), (r, s, a) of each generator of the configuration, by type,
        a tied type's windows by skip length
    type_windows : int64 (types + 1,), the windows of type t are
        ``type_windows[t]:type_windows[t + 1]``
    salts : uint64 (tags, types), the key salt of each (tag, type)

    Returns
    -------
    key : uint64 (n_pairs,)
    event : int64 (n_pairs,), the state of each pair
    type_bounds : int64 (tags * types + 1,), pairs of type id t (tag-major) are
        ``type_bounds[t]:type_bounds[t + 1]``

    A tied type's window whose remote words an earlier (shorter-skip) window of
    the same type already saw in this event gives no pair (a feature once an
    event), as in the extractor.
    """
    words, length = _contiguous(words, np.int32), _contiguous(length, np.int64)
    windows, type_windows = _contiguous(windows, np.int64), _contiguous(type_windows, np.int64)
    salts = _contiguous(salts, np.uint64)
    n, width = words.shape
    tags, types = salts.shape
    base, remote = np.zeros((len(windows), n), np.uint64), np.zeros((len(windows), n), np.uint64)
    valid, fresh = np.zeros((len(windows), n), np.bool_), np.zeros((len(windows), n), np.bool_)
    total = _state_windows(native.address(words), n, width, native.address(length),
                           native.address(windows), native.address(type_windows), types,
                           int(SEQUENCE_SEED), *(native.address(a) for a in (base, remote,
                                                                              valid, fresh)))
    key, event = np.empty(tags * total, np.uint64), np.empty(tags * total, np.int64)
    type_bounds = np.empty(tags * types + 1, np.int64)
    _state_pairs(native.address(base), native.address(fresh), n, native.address(type_windows),
                 native.address(salts), tags, types, native.address(key), native.address(event),
                 native.address(type_bounds))
    return key, event, type_bounds


def advance(words, length, target, windows, type_windows, salts, prerequisite, link_length,
            minimal, feature_words, feature_offsets, feature_blocks, feature_shift,
            feature_overflow_keys, feature_overflow_rows, m_star, link_words, link_offsets,
            link_blocks, link_shift, link_overflow_keys, link_overflow_rows, link_m, link_c,
            link_mask, collision_keys, collision_features, collision_words, collision_m,
            collision_c):
    """One event after each of many states (:meth:`snm_core.model.layouts.hashed.Model.
    _advance`): the states' pairs (:func:`state_pairs`) summed as :func:`event_sums`
    sums an event's, and the states after the target.

    ``link_length`` (int64 (types,)) is the n-gram length of each type id's links (0
    for skip-grams); with ``minimal`` a new state keeps the words of the longest
    n-gram whose link was found, else one word more than the state (at most the
    width).  Returns ``(P(target) float64 (n,), that n-gram length int64 (n,), words,
    length)`` of the new states.
    """
    from snm_core.model.layouts.state_kernels import shift_states  # numba: states only
    key, event, type_bounds = state_pairs(words, length, windows, type_windows, salts)
    n = len(target)
    m_star_sum, link_m_sum, _, _, link_found = event_sums(
        key, event, type_bounds, prerequisite, target, n, feature_words, feature_offsets,
        feature_blocks, feature_shift, feature_overflow_keys, feature_overflow_rows, m_star,
        link_words, link_offsets, link_blocks, link_shift, link_overflow_keys,
        link_overflow_rows, link_m, link_c, link_mask, collision_keys, collision_features,
        collision_words, collision_m, collision_c)
    matched = np.where(link_found, link_length[:, None], 0).max(axis=0, initial=0)
    new_words, new_length = shift_states(words, target, matched if minimal else length + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return link_m_sum / m_star_sum, matched, new_words, new_length
