"""Compiled loops (numba) of ``snm sample``: a history's feature keys, the draws, the text.

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
hashes[j - a - s, r])`` (``hashes[j, a]`` when r = 0); a tied type's windows, by increasing skip, drop a window whose remote
words an earlier valid one had (``_type_pairs``); each tag salts the base.

The random numbers are xoshiro256** (Blackman and Vigna), four uint64 words of
state per stream held by the caller, seeded from (seed, stream) by Weyl steps
through fmix64 (splitmix64's scheme): a stream gives the same words whatever
thread runs it and however its output is cut into calls.
"""

import llvmlite.ir as ir
import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from snm_core.text.compiled import _combine_one, _mix64_one
from snm_core.text.hashing import SEQUENCE_SEED
from snm_core.text.vocab import BOS_ID, EOS_ID

#: uint64 words of a feature record: key, first link, M_f* (float64 bits).
RECORD = 3
#: Sentences of a stream drawn side by side (:func:`sample_sentences`).
LANES = 8
#: Fields of the statistics a call of :func:`sample_sentences` returns.
STATS = ("words", "sentences", "empty_sentences", "truncated_sentences", "dead_ends")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


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
_U53 = 1.0 / (1 << 53)


# --- random numbers -----------------------------------------------------------------------------

@numba.njit(nogil=True, cache=True)
def seed_state(seed, stream):
    """xoshiro256** state (uint64 (4,)) of stream ``stream`` of ``seed``."""
    x = _combine_one(_combine_one(np.uint64(SEQUENCE_SEED), np.uint64(seed)), np.uint64(stream))
    state = np.empty(4, np.uint64)
    for i in range(4):
        x = x + _GOLDEN
        state[i] = _mix64_one(x)
    return state


@numba.njit(nogil=True, cache=True, inline="always")
def _rotl(x, k):
    return (x << np.uint64(k)) | (x >> np.uint64(64 - k))


@numba.njit(nogil=True, cache=True, inline="always")
def _next(state):
    """The next uint64 of xoshiro256** (state changed in place)."""
    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]
    result = _rotl(s1 * np.uint64(5), 7) * np.uint64(9)
    t = s1 << np.uint64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = _rotl(s3, 45)
    return result


@numba.njit(nogil=True, cache=True, inline="always")
def _uniform(state):
    """A float64 uniform on [0, 1), 53 random bits."""
    return np.float64(_next(state) >> np.uint64(11)) * _U53


@numba.njit(nogil=True, cache=True)
def uniforms(state, n):
    """``n`` uniforms of a stream (for tests of the generator)."""
    out = np.empty(n, np.float64)
    for i in range(n):
        out[i] = _uniform(state)
    return out


# --- a history's feature keys -------------------------------------------------------------------

@numba.njit(nogil=True, cache=True, inline="always")
def _position_hashes(history, j, hashes, max_run):
    """Row ``j % len(hashes)`` of ``hashes``: the n words before position j folded newest
    first, n <= min(j, max_run).  The rows are a ring longer than the widest window."""
    row = j % hashes.shape[0]
    hashes[row, 0] = SEQUENCE_SEED
    for n in range(1, min(j, max_run) + 1):
        hashes[row, n] = _combine_one(hashes[row, n - 1], np.uint64(history[j - n]))


@numba.njit(nogil=True, cache=True, inline="always")
def _event_keys(hashes, j, windows, salts, remote, valid, keys):
    """Keys of the features of the event whose target is at position j; returns how many.

    ``windows`` is int64 (n, 5): type index, r, s, a, and the first window of
    its type (a tied type's windows consecutive, by increasing s); ``hashes`` the ring
    of :func:`_position_hashes`, filled up to position j.
    """
    ring = hashes.shape[0]
    n = 0
    for g in range(windows.shape[0]):
        t, r, s, a, first = windows[g, 0], windows[g, 1], windows[g, 2], windows[g, 3], \
            windows[g, 4]
        valid[g] = j >= r + s + a
        if not valid[g]:
            continue
        base = hashes[j % ring, a]
        if r > 0:
            remote[g] = hashes[(j - a - s) % ring, r]
            seen = False
            for h in range(first, g):
                if valid[h] and remote[h] == remote[g]:
                    seen = True
                    break
            if seen:
                continue
            base = _combine_one(base, remote[g])
        for tag in range(salts.shape[0]):
            keys[n] = _mix64_one(base ^ salts[tag, t])
            n += 1
    return n


@numba.njit(nogil=True, cache=True)
def ring_size(windows):
    """Rows of the hash ring: one more than the widest window's r + s + a."""
    widest = 0
    for g in range(windows.shape[0]):
        widest = max(widest, windows[g, 1] + windows[g, 2] + windows[g, 3])
    return widest + 1


@numba.njit(nogil=True, cache=True)
def history_keys(history, windows, salts, max_run):
    """Feature keys of the event after ``history`` (int32 word ids, ``<S>`` first)."""
    j = len(history)
    hashes = np.empty((ring_size(windows), max_run + 1), np.uint64)
    for p in range(1, j + 1):
        _position_hashes(history, p, hashes, max_run)
    keys = np.empty(windows.shape[0] * salts.shape[0], np.uint64)
    remote = np.empty(windows.shape[0], np.uint64)
    valid = np.empty(windows.shape[0], np.bool_)
    n = _event_keys(hashes, j, windows, salts, remote, valid, keys)
    return keys[:n]


# --- rows ---------------------------------------------------------------------------------------

@numba.njit(nogil=True, cache=True)
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
    links = np.empty(2 * len(m), np.uint64)
    thresholds = links.view(np.float64)
    total = np.empty(len(diversity), np.float64)
    longest = diversity.max() if len(diversity) else 0
    scaled = np.empty(longest, np.float64)
    small = np.empty(longest, np.int64)
    large = np.empty(longest, np.int64)
    first = 0
    for row in range(len(diversity)):
        d = diversity[row]
        mass = 0.0
        for k in range(d):
            mass += m[first + k]
        total[row] = mass
        n_small = n_large = 0
        for k in range(d):
            scaled[k] = m[first + k] * d / mass if mass > 0 else 1.0
            own = np.uint64(words[first + k])
            links[2 * (first + k) + 1] = own | (own << np.uint64(32))
            thresholds[2 * (first + k)] = 1.0
            if scaled[k] < 1.0:
                small[n_small] = k
                n_small += 1
            else:
                large[n_large] = k
                n_large += 1
        while n_small and n_large:
            n_small -= 1
            s = small[n_small]
            g = large[n_large - 1]
            thresholds[2 * (first + s)] = scaled[s]
            links[2 * (first + s) + 1] = (np.uint64(words[first + s])
                                          | (np.uint64(words[first + g]) << np.uint64(32)))
            scaled[g] = (scaled[g] + scaled[s]) - 1.0
            if scaled[g] < 1.0:
                n_large -= 1
                small[n_small] = g
                n_small += 1
        # What is left has scaled mass 1 up to rounding: threshold 1, its own word.
        first += d
    return links, total


@numba.njit(nogil=True, cache=True, inline="always")
def _scan_record(records, position, end, key):
    """Record of ``key`` among ``position:end`` (its KeyIndex slot), -1 where absent."""
    for p in range(position, end):
        stored = records[RECORD * p]
        if stored >= key:
            return p if stored == key else -1
    return -1


@numba.njit(nogil=True, cache=True)
def sample_sentences(rng, history, position, hashes, stream_words, words_wanted, quota,
                     max_length, windows, salts, max_run, records, masses, index, shift, links,
                     thresholds, out):
    """Sentences of one stream, drawn until ``words_wanted`` more words are out or, once
    the stream has ``quota`` words, until its last sentences are finished.

    A stream is :data:`LANES` sentences drawn side by side, each lane with its own
    random numbers, so that the memory reads of one overlap those of the others:
    a step finds every lane's next word in phases (the keys and their index
    slots; the slots' first records; the records, the feature and the link; the
    word), asking the CPU to fetch what the next phase reads.  A lane starts a
    sentence while the stream has fewer than ``quota`` words, and a sentence goes
    to ``out`` when it ends.  Calls end after whole steps and the lanes' state is
    the caller's, so the text does not depend on how it is cut into calls.

    Parameters
    ----------
    rng : uint64 (LANES, 4), each lane's random state (:func:`seed_state`)
    history : int32 (LANES, max_length + 1), each lane's sentence so far, ``<S>`` first
    position : int64 (LANES,), each lane's next target position (0: idle)
    hashes : uint64 (LANES, ring_size(windows), max_run + 1), work space of the keys
    stream_words : int64 (1,), the stream's words so far
    words_wanted : int
    quota : int, the stream's words
    max_length : int, a sentence that reaches this many words ends there (counted)
    windows, salts, max_run : the configuration's windows (see :func:`_event_keys`),
        uint64 (tags, types) salts, longest run of words hashed
    records : uint64 (3 (n + 1),), per feature key, first link, M_f* bits, then a
        sentinel whose first link is the number of links; ``masses`` the same as float64
    index, shift : the KeyIndex over the records' keys
    links, thresholds : the rows' alias tables (:func:`alias_rows`), uint64 and float64
    out : int32, at least ``2 (words_wanted + LANES (max_length + 1))`` long: each
        sentence's words, then ``</S>``

    Returns
    -------
    used : int, the length of ``out`` used
    stats : int64 (len(STATS),)
    finished : bool, the stream has its quota and every lane is idle
    """
    stats = np.zeros(len(STATS), np.int64)
    n_windows = windows.shape[0]
    width = n_windows * salts.shape[0]
    keys = np.empty((LANES, width), np.uint64)
    n_keys = np.zeros(LANES, np.int64)
    first = np.empty((LANES, width), np.int64)
    last = np.empty((LANES, width), np.int64)
    rows = np.empty(width, np.int64)
    row_mass = np.empty(width, np.float64)
    remote = np.empty(n_windows, np.uint64)
    valid = np.empty(n_windows, np.bool_)
    link = np.empty(LANES, np.int64)
    fraction = np.empty(LANES, np.float64)
    used = 0
    while True:
        active = 0
        for lane in range(LANES):
            if position[lane] == 0 and stream_words[0] < quota:
                history[lane, 0] = BOS_ID
                position[lane] = 1
            if position[lane]:
                active += 1
        if active == 0:
            return used, stats, True
        for lane in range(LANES):  # the keys; their index slots fetched
            n_keys[lane] = 0
            j = position[lane]
            if j == 0:
                continue
            _position_hashes(history[lane], j, hashes[lane], max_run)
            n_keys[lane] = _event_keys(hashes[lane], j, windows, salts, remote, valid,
                                       keys[lane])
            for i in range(n_keys[lane]):
                _prefetch(index, np.int64(keys[lane, i] >> shift))
        for lane in range(LANES):  # the slots' first records fetched
            for i in range(n_keys[lane]):
                slot = np.int64(keys[lane, i] >> shift)
                first[lane, i] = index[slot]
                last[lane, i] = index[slot + 1]
                _prefetch(records, RECORD * first[lane, i])
        for lane in range(LANES):  # the feature and the link drawn; the link fetched
            link[lane] = -1
            if position[lane] == 0:
                continue
            found = 0
            total = 0.0
            for i in range(n_keys[lane]):
                p = _scan_record(records, first[lane, i], last[lane, i], keys[lane, i])
                if p >= 0 and masses[RECORD * p + 2] > 0:
                    rows[found] = p
                    row_mass[found] = masses[RECORD * p + 2]
                    total += row_mass[found]
                    found += 1
            if found == 0:  # no feature of the history in the model: P(. | h) undefined
                stats[4] += 1
                continue
            u = _uniform(rng[lane]) * total
            pick = found - 1
            for i in range(found - 1):
                u -= row_mass[i]
                if u < 0:
                    pick = i
                    break
            p = rows[pick]
            start = np.int64(records[RECORD * p + 1])
            size = np.int64(records[RECORD * p + RECORD + 1]) - start
            x = _uniform(rng[lane]) * size
            k = min(np.int64(x), size - 1)
            link[lane] = start + k
            fraction[lane] = x - k
            _prefetch(links, 2 * link[lane])
        for lane in range(LANES):  # the words
            j = position[lane]
            if j == 0:
                continue
            ended = link[lane] < 0
            if not ended:
                pair = links[2 * link[lane] + 1]
                if fraction[lane] >= thresholds[2 * link[lane]]:
                    pair >>= np.uint64(32)
                word = np.int32(pair & np.uint64(0xFFFFFFFF))
                if word == EOS_ID:
                    ended = True
                else:
                    history[lane, j] = word
                    j += 1
                    position[lane] = j
                    if j > max_length:
                        stats[3] += 1
                        ended = True
            if ended:
                position[lane] = 0
                if j == 1:
                    stats[2] += 1  # an empty sentence: no line (text readers skip them)
                    continue
                out[used:used + j - 1] = history[lane, 1:j]
                used += j
                out[used - 1] = EOS_ID
                stats[0] += j - 1
                stats[1] += 1
                stream_words[0] += j - 1
        if stats[0] >= words_wanted:
            return used, stats, False


# --- text ---------------------------------------------------------------------------------------

@numba.njit(nogil=True, cache=True)
def render(ids, offsets, data):
    """UTF-8 text of sentences ``ids`` (each ended by ``</S>``): words joined by spaces,
    a line per sentence; ``offsets``/``data`` the vocabulary's words (Arrow buffers)."""
    size = 0
    for i in range(len(ids)):
        w = ids[i]
        size += 1 if w == EOS_ID else offsets[w + 1] - offsets[w] + 1
    text = np.empty(size, np.uint8)
    at = 0
    for i in range(len(ids)):
        w = ids[i]
        if w == EOS_ID:
            if at and text[at - 1] == 32:
                at -= 1  # the space after the sentence's last word
            text[at] = 10
            at += 1
            continue
        for b in range(offsets[w], offsets[w + 1]):
            text[at] = data[b]
            at += 1
        text[at] = 32
        at += 1
    return text[:at]
