"""The adjustment model's compiled loops (``_kernels.c``), called through ctypes.

What runs there: the meta-feature entries of rows, link classes and links;
A(f, w), M_fw and M_f*; a mini-batch (forward pass, events, gradient,
AdaGrad) in one call on POSIX threads; the apply stage's M_fw of a count
bucket; and the compact model's key index.  Python keeps the
data and the order of work; ctypes releases the GIL during a call.

Why C and not numba (which only the log-linear family uses): a process that imports
numba holds more memory than a whole fit may use, and starts noticeably later; this
library is a few dozen KiB.  setup.py builds it
as the extension ``snm_core.fit._kernels``.

Entries (see the C file's header and :mod:`snm_core.fit.metafeatures`, the
definition the tests hold these loops to): a row (feature) has up to 6
entries; a class's untargeted ones (up to 48, unlexicalized with diversity
and continuation) are stored once per fit as theta positions; a lexicalized
link's targeted ones (up to 21, 14 with one count bucket) are hashed as they
are used: stored, they would take 56 bytes a link.
"""

import ctypes

import numpy as np

from snm_core.io import native

#: Row entries at most (feature, type, two feature-count and two diversity buckets).
MAX_ROW_ENTRIES = 6
#: The phases of a batch (:meth:`Workspace.seconds`).
PHASES = ("forward", "events", "emit", "apply", "adagrad")
#: What ``initialise`` returns: a library built from other sources is refused.
VERSION = 3

_i64, _f64 = ctypes.c_int64, ctypes.c_double
_ptr = ctypes.c_void_p


class Spec(ctypes.Structure):
    """The meta-feature settings as the C loops read them."""

    _fields_ = [("feature_identity", ctypes.c_int32), ("target", ctypes.c_int32),
                ("link_count", ctypes.c_int32), ("diversity", ctypes.c_int32),
                ("continuation", ctypes.c_int32), ("padding", ctypes.c_int32),
                ("hash_size", ctypes.c_uint64)] + [
        ("ns_" + name, ctypes.c_uint64) for name in (
            "feature", "type", "feature_count", "diversity", "target", "link_count",
            "continuation")]

    @classmethod
    def of(cls, spec):
        """From a :class:`snm_core.fit.metafeatures.MetaFeatureSpec`."""
        from snm_core.fit.metafeatures import namespace
        names = ("feature", "type", "feature_count", "diversity", "target", "link_count",
                 "continuation")
        return cls(feature_identity=int(spec.variant != "unlexicalized"),
                   target=int(spec.uses_target), link_count=int(spec.uses_link_count),
                   diversity=int(spec.diversity), continuation=int(spec.continuation),
                   padding=0, hash_size=spec.hash_size,
                   **{"ns_" + n: int(namespace(n)) for n in names})


class Problem(ctypes.Structure):
    """Small M as the C loops read it; :func:`problem` fills it and keeps its arrays alive."""

    _fields_ = [("num_rows", _i64)] + [(name, _ptr) for name in (
        "row_key", "row_type", "row_count", "row_diversity", "row_class_ptr", "row_unit_ptr",
        "class_count", "class_continuation", "class_mult", "class_link_ptr", "link_word")] + [
        ("width", _i64), ("pos16", _ptr), ("pos32", _ptr), ("class_signature", _ptr),
        ("slot_index", _ptr),
        ("num_params", _i64), ("direct_params", _i64), ("round_units", _i64)]


class Batch(ctypes.Structure):
    """A mini-batch as :func:`batch_step` reads it; :func:`batch` fills it."""

    _fields_ = [("n_rows", _i64), ("rows", _ptr), ("offset", _ptr), ("n_events", _i64),
                ("event_pairs", _ptr), ("pair_local", _ptr), ("pair_unit", _ptr),
                ("stale", _ptr)]


def class_width(spec):
    """Untargeted entries of every class in the full (stored) enumeration of ``spec``."""
    n_row = int(spec.variant != "unlexicalized") + 1 + 2 + 2 * spec.diversity
    link = 2 * (1 + n_row) if spec.uses_link_count else 0
    continuation = 2 * (1 + n_row + link) if spec.continuation else 0
    return link + continuation


def targeted_width(spec):
    """Targeted entries of a link at most (lexicalized; 0 otherwise)."""
    n_row = 1 + 1 + 2 + 2 * spec.diversity
    return (1 + n_row) * (3 if spec.uses_link_count else 1) if spec.uses_target else 0


def _load():
    lib = native.load("snm_core.fit._kernels", "initialise", VERSION)
    signatures = {
        "mark_used_slots": ([_ptr, _ptr, _i64, _i64, _ptr], _i64),
        "class_signatures": ([_ptr, _ptr, _ptr, _i64, _i64, _ptr], _i64),
        "store_positions": ([_ptr, _ptr, _ptr, _ptr, _i64, _i64, _ptr, _ptr], _i64),
        "forward": ([_ptr, _ptr, _ptr, _ptr, _ptr, _i64, _i64, _ptr, _ptr], _i64),
        "unit_values": ([_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _i64, _ptr], _i64),
        "events_pass": ([_i64] + [_ptr] * 10, _f64),
        "workspace_new": ([], _ptr),
        "workspace_free": ([_ptr], None),
        "workspace_bytes": ([_ptr], _i64),
        "workspace_seconds": ([_ptr, _ptr], None),
        "batch_step": ([_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _f64, _i64, _ptr], _f64),
        "adjust_links": ([_ptr] * 10 + [_i64, _i64, _ptr, _ptr], _i64),
        "key_index_chunk": ([_ptr, _i64, _i64, _i64, _i64, _ptr], _i64),
        "link_entries": ([_ptr] * 5 + [_i64] + [_ptr] * 4 + [_i64] + [_ptr] * 4, _i64),
    }
    for name, (args, result) in signatures.items():
        function = getattr(lib, name)
        function.argtypes = args
        function.restype = result
    return lib


_LIB = None


def lib():
    """The loaded library (loaded on first use)."""
    global _LIB
    if _LIB is None:
        _LIB = _load()
    return _LIB


address = native.address


_PROBLEM_DTYPES = {
    "row_key": np.uint64, "row_type": np.uint64, "row_count": np.int64,
    "row_diversity": np.int64, "row_class_ptr": np.int64, "row_unit_ptr": np.int64,
    "class_count": np.int64, "class_continuation": np.int64, "class_mult": np.int32,
    "class_link_ptr": np.int64, "link_word": np.int32, "pos16": np.uint16, "pos32": np.int32,
    "class_signature": np.int32,
    "slot_index": np.uint64}


#: Threads a batch may use (``MAX_THREADS`` of the C file: per-thread arrays).
MAX_THREADS = 16
#: Theta at most this long takes its gradient in place (1 MiB of float64: it
#: stays in a core's cache); longer, through pairs sorted by position range.
DIRECT_PARAMS = 1 << 17
#: Units (classes or links) whose gradient pairs are sorted at once: enough that
#: a bucket's gradient gets several pairs a cache line (smaller rounds are slower).
ROUND_UNITS = 1 << 17


#: Slots a line of the slot index covers (8 words: a position and 7 of marks).
INDEX_SLOTS = 448


def slot_index(used):
    """The slot -> theta position index of the C loops (see Problem.slot_index).

    Parameters
    ----------
    used : bool (hash_size,), the slots in use

    Returns
    -------
    uint64 (8 * lines,)
    """
    lines = -(-len(used) // INDEX_SLOTS)
    marks = np.zeros(lines * INDEX_SLOTS, bool)
    marks[:len(used)] = used
    packed = np.packbits(marks.reshape(lines, 7, 64), axis=2, bitorder="little")
    index = np.empty((lines, 8), np.uint64)
    index[:, 1:] = packed.view(np.uint64).reshape(lines, 7)
    per_line = marks.reshape(lines, INDEX_SLOTS).sum(axis=1, dtype=np.int64)
    index[:, 0] = np.r_[0, np.cumsum(per_line)[:-1]]
    return index.ravel()


def problem(arrays, width=0, num_params=0):
    """A :class:`Problem` over ``arrays`` (a dict by field name); keeps them referenced."""
    struct = Problem(num_rows=len(arrays["row_key"]), width=width, num_params=num_params,
                     direct_params=DIRECT_PARAMS, round_units=ROUND_UNITS,
                     **{name: address(arrays.get(name), dtype)
                        for name, dtype in _PROBLEM_DTYPES.items()})
    struct._arrays = arrays
    return struct


def batch(rows, offset, event_pairs, pair_local, pair_unit, stale=None):
    """A :class:`Batch` over these arrays (int64; ``stale`` float64 or None)."""
    arrays = (rows, offset, event_pairs, pair_local, pair_unit)
    struct = Batch(n_rows=len(rows), n_events=len(event_pairs) - 1, stale=address(stale),
                   **{name: address(array, np.int64) for name, array in zip(
                       ("rows", "offset", "event_pairs", "pair_local", "pair_unit"), arrays)})
    struct._arrays = arrays + (stale,)
    return struct


class Workspace:
    """Buffers the C loops keep between batches (freed with the object)."""

    def __init__(self):
        self.handle = lib().workspace_new()
        if not self.handle:
            raise MemoryError("could not allocate the fit's workspace")

    @property
    def nbytes(self):
        return lib().workspace_bytes(self.handle)

    def seconds(self):
        """Seconds spent so far in each phase of the batches, by name."""
        out = np.zeros(8)
        lib().workspace_seconds(self.handle, address(out))
        return dict(zip(PHASES, out.tolist()))

    def __del__(self):
        if getattr(self, "handle", None):
            lib().workspace_free(self.handle)
            self.handle = None


def link_entries(spec, key, type_fingerprint, count, diversity, link_ptr, word, link_count,
                 continuation):
    """Entries of rows and links as the C loops enumerate them (for tests and inspection).

    Returns ``(row_slot (n_rows, 6), row_weight, slot (n_links, width), weight)``:
    a link's untargeted then targeted entries; unused places have slot -1 and
    weight 0; the second bucket of a count that is an exact power of two is
    kept with weight 0.
    """
    width = class_width(spec) + targeted_width(spec)
    n_rows, n_links = len(key), len(link_count)
    row_slot = np.empty((n_rows, MAX_ROW_ENTRIES), np.int64)
    row_weight = np.empty((n_rows, MAX_ROW_ENTRIES))
    slot = np.empty((n_links, width), np.int64)
    weight = np.empty((n_links, width))
    arrays = [np.ascontiguousarray(a, t) if a is not None else None for a, t in (
        (key, np.uint64), (type_fingerprint, np.uint64), (count, np.int64),
        (diversity, np.int64), (link_ptr, np.int64), (word, np.int32), (link_count, np.int64),
        (continuation, np.int64))]
    status = lib().link_entries(ctypes.byref(Spec.of(spec)), *map(address, arrays[:4]), n_rows,
                                *map(address, arrays[4:]), width, address(row_slot),
                                address(row_weight), address(slot), address(weight))
    if status:
        raise RuntimeError("link_entries: more entries than the spec's width")
    return row_slot, row_weight, slot, weight


def adjust_links(spec, key, type_fingerprint, count, diversity, link_ptr, word, link_count,
                 continuation, theta):
    """M_fw of every link and M_f* of every row of a count bucket (the apply stage).

    Parameters
    ----------
    spec : MetaFeatureSpec
    key, type_fingerprint : uint64 (n_rows,); count, diversity : int64 (n_rows,)
    link_ptr : int64 (n_rows + 1,), the links of row r are ``[link_ptr[r], link_ptr[r+1])``
    word : int32 (n_links,); link_count, continuation : int64 (n_links,)
    theta : float32 (hash_size,)

    Returns
    -------
    m : float32 (n_links,); m_star : float64 (n_rows,)
    """
    arrays = [np.ascontiguousarray(a, t) for a, t in (
        (key, np.uint64), (type_fingerprint, np.uint64), (count, np.int64),
        (diversity, np.int64), (link_ptr, np.int64), (word, np.int32), (link_count, np.int64),
        (continuation, np.int64), (theta, np.float32))]
    if len(arrays[-1]) != spec.hash_size:
        raise ValueError(f"theta has {len(arrays[-1])} weights, the spec {spec.hash_size}")
    m = np.empty(len(arrays[5]), np.float32)
    m_star = np.empty(len(arrays[0]))
    if lib().adjust_links(ctypes.byref(Spec.of(spec)), *map(address, arrays), 0,
                          len(arrays[0]), address(m), address(m_star)):
        raise MemoryError("adjust_links: no memory for its table of exp(A)")
    return m, m_star


def key_index_chunk(keys, bits, base, next_slot):
    """The key index entries of a chunk of sorted keys (see KeyIndex).

    ``keys`` follow ``base`` keys already indexed, whose slots below
    ``next_slot`` are filled.  Returns ``(starts int64, next slot)``: the first
    position of each slot from ``next_slot`` to the last key's.
    """
    keys = np.ascontiguousarray(keys, np.uint64)
    last = int(keys[-1] >> np.uint64(64 - bits)) if bits and len(keys) else next_slot - 1
    start = np.empty(max(last - next_slot + 1, 0), np.int64)
    following = lib().key_index_chunk(address(keys), len(keys), bits, base, next_slot,
                                      address(start))
    return start, following
