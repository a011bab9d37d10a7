"""Compiled loops (numba) of the hashed layout's scoring.

Scoring looks up every (event, feature) pair in the model, a key-index probe
for the feature, then one for the link to the target word.  In numpy that
would be a dozen whole-array passes per batch under the GIL; :func:`event_sums`
makes a few tight passes per block of pairs, whose cache misses overlap, with
the GIL released.  Only scoring imports this module (numba costs memory a
process).

The tests hold these to independent computations: brute-force perplexity from
the counts, probabilities that sum to one, KenLM on the exported ARPA, and
positions in a small sorted array.
"""

import numba
import numpy as np

from snm_core.model.layouts.state_kernels import shift_states
from snm_core.text.compiled import _combine_one, _mix64_one
from snm_core.text.hashing import SEQUENCE_SEED

# --- key lookup ---------------------------------------------------------------------------------

@numba.njit(nogil=True, cache=True, inline="always")
def _link_key(feature_key, word):
    """:func:`snm_core.text.hashing.link_key` of one pair."""
    return _combine_one(feature_key, np.uint64(word))


@numba.njit(nogil=True, cache=True, inline="always")
def _find_one(keys, start, shift, query):
    """Position of ``query`` in ``keys`` (a :class:`KeyIndex`), -1 where absent."""
    slot = np.int64(query >> shift)
    for position in range(start[slot], start[slot + 1]):
        key = keys[position]
        if key >= query:
            return position if key == query else -1
    return -1


#: Pairs looked up per pass: enough loads in flight, temporaries in the L1/L2 cache.
BLOCK = 1024


@numba.njit(nogil=True, cache=True)
def _positions(keys, start, shift, queries, n, position, found):
    """``found[j]`` = position of ``queries[j]`` in the index, or -1, for j < n.

    In passes, so that the cache misses of many queries are in flight at once
    (a loop doing one query at a time waits for each miss in turn): the slot
    bounds, then each slot's first key, then the matching, where the few
    queries past their slot's first key scan on.
    """
    end = np.empty(n, np.int64)
    first = np.empty(n, np.uint64)
    for j in range(n):
        slot = np.int64(queries[j] >> shift)
        position[j] = start[slot]
        end[j] = start[slot + 1]
    last = len(keys) - 1
    if last < 0:
        found[:n] = -1
        return
    for j in range(n):
        first[j] = keys[min(position[j], last)]
    for j in range(n):
        found[j] = -1
        if position[j] < end[j] and first[j] <= queries[j]:
            if first[j] == queries[j]:
                found[j] = position[j]
            else:
                found[j] = _find_one(keys, start, shift, queries[j])


@numba.njit(nogil=True, cache=True)
def find(keys, start, shift, queries):
    """:meth:`snm_core.model.layouts.hashed.KeyIndex.find` for an array of queries."""
    result = np.empty(len(queries), np.int64)
    position = np.empty(BLOCK, np.int64)
    for lo in range(0, len(queries), BLOCK):
        hi = min(lo + BLOCK, len(queries))
        _positions(keys, start, shift, queries[lo:hi], hi - lo, position, result[lo:hi])
    return result


_STORED_BITS = np.uint64(32)
_BLOCK_BITS = 8  # snm_core.model.layouts.hashed.SLOT_BLOCK_BITS (model imports this module, not back)
_LOW32 = np.uint64(0xFFFFFFFF)


#: _entry_positions' mark of a match that the overflow table must settle.
TWIN = -2


@numba.njit(nogil=True, cache=True)
def _overflow_row(overflow_keys, overflow_rows, query):
    """Row of ``query`` in the overflow table (whole keys), or -1."""
    i = np.searchsorted(overflow_keys, query)
    if i < len(overflow_keys) and overflow_keys[i] == query:
        return overflow_rows[i]
    return -1


@numba.njit(nogil=True, cache=True)
def _entry_positions(words, offsets, blocks, shift, overflow_keys, overflow_rows, queries, n,
                     position, found):
    """``found[j]`` = row of ``queries[j]`` in an :class:`snm_core.model.layouts.hashed.EntryTable`, or -1,
    for j < n.  ``words`` is the table's entries as uint32 (2n,): entry p's remainder is
    ``words[2p]`` (a contiguous array: numba indexes a strided field view slower).

    In passes, like :func:`_positions`: the slot bounds, then each slot's first
    remainder (branch-free, so that the cache misses of many queries are in flight
    at once), then the matching, where the queries past their slot's first entry
    scan on.
    """
    end = np.empty(n, np.int64)
    first = np.empty(n, np.uint32)
    wanted = np.empty(n, np.uint32)
    low = shift - _STORED_BITS
    for j in range(n):
        slot = np.int64(queries[j] >> shift)
        position[j] = blocks[slot >> _BLOCK_BITS] + offsets[slot]
        end[j] = blocks[(slot + 1) >> _BLOCK_BITS] + offsets[slot + 1]
        wanted[j] = np.uint32((queries[j] >> low) & _LOW32)
    last = len(words) // 2 - 1
    if last < 0:
        found[:n] = -1
        return
    for j in range(n):
        first[j] = words[2 * min(position[j], last)]
    twins = 0
    for j in range(n):
        found[j] = -1
        if position[j] >= end[j] or first[j] > wanted[j]:
            continue
        for p in range(position[j], end[j]):
            stored = words[2 * p]
            if stored >= wanted[j]:
                if stored == wanted[j]:
                    twin = p + 1 < end[j] and words[2 * p + 2] == stored
                    found[j] = TWIN if twin else p
                    twins += twin
                break
    # A match whose next entry has the same stored bits (rare): settled by whole keys.
    if twins:
        for j in range(n):
            if found[j] == TWIN:
                found[j] = _overflow_row(overflow_keys, overflow_rows, queries[j])


@numba.njit(nogil=True, cache=True)
def _collision_row(keys, features, words, query, feature, word):
    """Row of the link (``feature``, ``word``), whose link key ``query`` several links
    share, in the collision table (sorted by key, feature, word), or -1."""
    i = np.searchsorted(keys, query)
    while i < len(keys) and keys[i] == query:
        if features[i] == feature and words[i] == word:
            return i
        i += 1
    return -1


@numba.njit(nogil=True, cache=True)
def link_values(feature_keys, words, link_words, link_offsets, link_blocks, link_shift,
                link_overflow_keys, link_overflow_rows, link_m, link_c, link_mask,
                collision_keys, collision_features, collision_words, collision_m,
                collision_c):
    """M_fw and c(w|f) (float64, 0 where absent) of the links (``feature_keys[i]``,
    ``words[i]``), a shared key settled in the collision table as :func:`event_sums`
    does."""
    n = len(feature_keys)
    queries = np.empty(n, np.uint64)
    for i in range(n):
        queries[i] = _link_key(feature_keys[i], words[i]) & link_mask
    rows = find_entries(link_words, link_offsets, link_blocks, link_shift, link_overflow_keys,
                        link_overflow_rows, queries)
    m = np.zeros(n)
    c = np.zeros(n)
    for i in range(n):
        if rows[i] < 0:
            continue
        m[i] = link_m[2 * rows[i] + 1]
        c[i] = link_c[rows[i]]
        if m[i] < 0:
            r = _collision_row(collision_keys, collision_features, collision_words,
                               queries[i], feature_keys[i], words[i])
            m[i] = collision_m[r] if r >= 0 else 0.0
            c[i] = collision_c[r] if r >= 0 else 0.0
    return m, c


@numba.njit(nogil=True, cache=True)
def find_entries(words, offsets, blocks, shift, overflow_keys, overflow_rows, queries):
    """:meth:`snm_core.model.layouts.hashed.EntryTable.find` for an array of queries."""
    result = np.empty(len(queries), np.int64)
    position = np.empty(BLOCK, np.int64)
    for lo in range(0, len(queries), BLOCK):
        hi = min(lo + BLOCK, len(queries))
        _entry_positions(words, offsets, blocks, shift, overflow_keys, overflow_rows,
                         queries[lo:hi], hi - lo, position, result[lo:hi])
    return result


@numba.njit(nogil=True, cache=True)
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
    m_star_sum = np.zeros(n_events)
    link_m_sum = np.zeros(n_events)
    link_c_sum = np.zeros(n_events)
    n_features = np.zeros(n_events, np.int64)
    n_types = len(prerequisite)
    row_found = np.zeros((n_types, n_events), np.bool_)
    link_found = np.zeros((n_types, n_events), np.bool_)
    pair = np.empty(BLOCK, np.int64)
    query = np.empty(BLOCK, np.uint64)
    position = np.empty(BLOCK, np.int64)
    row = np.empty(BLOCK, np.int64)
    linked = np.empty(BLOCK, np.int64)
    link = np.empty(BLOCK, np.int64)
    value = np.empty(BLOCK)
    value_c = np.empty(BLOCK)
    for t in range(n_types):
        before = prerequisite[t]
        for lo in range(type_bounds[t], type_bounds[t + 1], BLOCK):
            n = 0
            for i in range(lo, min(lo + BLOCK, type_bounds[t + 1])):
                if before < 0 or row_found[before, pair_event[i]]:
                    pair[n] = i
                    query[n] = pair_key[i]
                    n += 1
            _entry_positions(feature_words, feature_offsets, feature_blocks, feature_shift,
                             feature_overflow_keys, feature_overflow_rows, query, n, position,
                             row)
            # Branch-free gathers first (their cache misses overlap), sums after.
            for j in range(n):
                value[j] = m_star[2 * max(row[j], 0) + 1]
            k = 0
            for j in range(n):
                if row[j] < 0:
                    continue
                i = pair[j]
                event = pair_event[i]
                m_star_sum[event] += value[j]
                n_features[event] += 1
                row_found[t, event] = True
                if before < 0 or link_found[before, event]:
                    linked[k] = i
                    query[k] = _link_key(pair_key[i], target[event]) & link_mask
                    k += 1
            _entry_positions(link_words, link_offsets, link_blocks, link_shift,
                             link_overflow_keys, link_overflow_rows, query, k, position, link)
            for j in range(k):
                value[j] = link_m[2 * max(link[j], 0) + 1]
                value_c[j] = link_c[max(link[j], 0)]
            for j in range(k):
                if link[j] >= 0:
                    event = pair_event[linked[j]]
                    if value[j] < 0:  # a shared key (rare): settled by (feature, word)
                        r = _collision_row(collision_keys, collision_features,
                                           collision_words, query[j], pair_key[linked[j]],
                                           target[event])
                        if r < 0:
                            continue
                        value[j] = collision_m[r]
                        value_c[j] = collision_c[r]
                    link_m_sum[event] += value[j]
                    link_c_sum[event] += value_c[j]
                    link_found[t, event] = True
    return m_star_sum, link_m_sum, link_c_sum, n_features, link_found


# --- the features of states (left-to-right scoring) ---------------------------------------------

@numba.njit(nogil=True, cache=True)
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
    n, width = words.shape
    n_windows = len(windows)
    tags, types = salts.shape
    base = np.zeros((n_windows, n), np.uint64)
    remote = np.zeros((n_windows, n), np.uint64)
    valid = np.zeros((n_windows, n), np.bool_)
    fresh = np.zeros((n_windows, n), np.bool_)
    for t in range(types):
        for g in range(type_windows[t], type_windows[t + 1]):
            r, s, a = windows[g, 0], windows[g, 1], windows[g, 2]
            for i in range(n):
                if length[i] < r + s + a:
                    continue
                valid[g, i] = True
                h = SEQUENCE_SEED
                for k in range(a):  # newest first, as the extractor folds a run
                    h = _combine_one(h, np.uint64(words[i, width - 1 - k]))
                if r:
                    far = SEQUENCE_SEED
                    for k in range(r):
                        far = _combine_one(far, np.uint64(words[i, width - 1 - a - s - k]))
                    remote[g, i] = far
                    h = _combine_one(h, far)
                fresh[g, i] = True
                for before in range(type_windows[t], g):
                    if valid[before, i] and remote[before, i] == remote[g, i]:
                        fresh[g, i] = False
                base[g, i] = h
    total = 0
    for g in range(n_windows):
        for i in range(n):
            total += fresh[g, i]
    key = np.empty(tags * total, np.uint64)
    event = np.empty(tags * total, np.int64)
    type_bounds = np.zeros(tags * types + 1, np.int64)
    p = 0
    for tag in range(tags):
        for t in range(types):
            for g in range(type_windows[t], type_windows[t + 1]):
                for i in range(n):
                    if fresh[g, i]:
                        key[p] = _mix64_one(base[g, i] ^ salts[tag, t])
                        event[p] = i
                        p += 1
            type_bounds[tag * types + t + 1] = p
    return key, event, type_bounds


@numba.njit(nogil=True, cache=True, error_model="numpy")
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
    key, event, type_bounds = state_pairs(words, length, windows, type_windows, salts)
    n = len(target)
    m_star_sum, link_m_sum, _, _, link_found = event_sums(
        key, event, type_bounds, prerequisite, target, n, feature_words, feature_offsets,
        feature_blocks, feature_shift, feature_overflow_keys, feature_overflow_rows, m_star,
        link_words, link_offsets, link_blocks, link_shift, link_overflow_keys,
        link_overflow_rows, link_m, link_c, link_mask, collision_keys, collision_features,
        collision_words, collision_m, collision_c)
    matched = np.zeros(n, np.int64)
    for t in range(link_found.shape[0]):
        for i in range(n):
            if link_found[t, i]:
                matched[i] = max(matched[i], link_length[t])
    new_words, new_length = shift_states(words, target, matched if minimal else length + 1)
    return link_m_sum / m_star_sum, matched, new_words, new_length
