"""The entry tables of the hashed layouts: a sorted key's index (slots of the key's top
bits, two levels), the entries (the key bits below the slot's and the value: 8 bytes, or
3 in the packed layout with the value's code in a codebook fitted to the table), the
overflow of keys whose stored bits coincide, their sizes, and their writers.
:mod:`snm_core.scoring.layouts.hashed` lays the model's tables out with them.
"""

import math
import os

import numpy as np

from snm_core.fit import kernels
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.scoring.layouts.npy import NpyWriter

#: Slots a block of an entry table's index: a slot's first entry is its block's first
#: (int64) plus the slot's uint16 offset in the block (a block holds ~380 entries).
SLOT_BLOCK_BITS = 8
#: An entry of a compact table: the 32 key bits below the slot bits, and the value.
ENTRY = np.dtype([("remainder", "<u4"), ("value", "<f4")])
#: The overflow table: whole keys (ascending) whose entries share all stored bits.
OVERFLOW = np.dtype([("key", "<u8"), ("row", "<i8")])
#: M_fw and c(w|f) of the link entries whose key several links share: look in
#: ``link_collisions``.
SHARED = np.float32(-1.0)
PACKED_ENTRY = np.dtype([("remainder", "<u2"), ("value", "u1")])
#: A packed table's codebook: code 0 is 0, code 255 :data:`SHARED`, codes 1 to 254 the
#: centres of the values' log2, fitted by :data:`CODEBOOK_ROUNDS` rounds of Lloyd's
#: algorithm on at most :data:`CODEBOOK_SAMPLE` of them.
CODEBOOK_SIZE = 256
CODEBOOK_ROUNDS = 40
CODEBOOK_SAMPLE = 1 << 20


def fit_codebook(values):
    """A packed table's codebook (float32, :data:`CODEBOOK_SIZE`) for ``values`` (a
    sample of its values, each as often as scoring reads it:
    :func:`snm_core.scoring.layouts.hashed_build._usage_sample`)."""
    values = np.asarray(values, np.float64)
    logs = np.log2(values[values > 0])
    if len(logs) > CODEBOOK_SAMPLE:
        logs = logs[::-(-len(logs) // CODEBOOK_SAMPLE)]
    levels = CODEBOOK_SIZE - 2
    distinct = np.unique(logs)
    if len(distinct) <= levels:
        centres = distinct
    else:
        # Started where squared error is least for a smooth density p (centres spread
        # as p^(1/3)), then Lloyd's rounds.
        counts, edges = np.histogram(logs, bins=16 * levels)
        spread = np.cumsum(np.cbrt(counts))
        centres = np.interp((np.arange(levels) + 0.5) / levels * spread[-1], spread,
                            (edges[1:] + edges[:-1]) / 2)
        for _ in range(CODEBOOK_ROUNDS):
            nearest = np.searchsorted((centres[1:] + centres[:-1]) / 2, logs)
            sums = np.bincount(nearest, logs, levels)
            counts = np.bincount(nearest, minlength=levels)
            centres = np.where(counts > 0, sums / np.maximum(counts, 1), centres)
            # The extremes kept exact: a few values far out are not read as the mean of
            # their cell.
            centres[0], centres[-1] = distinct[0], distinct[-1]
        centres = np.unique(centres)
    codebook = np.ones(CODEBOOK_SIZE, np.float32)  # unused codes: the last centre, or 1
    codebook[0] = 0.0
    codebook[1:1 + len(centres)] = np.exp2(centres)
    if len(centres):
        codebook[1 + len(centres):-1] = codebook[len(centres)]
    codebook[-1] = SHARED
    return codebook


def value_codes(values, codebook):
    """Each value's code (uint8) in a packed table's ``codebook`` (:func:`fit_codebook`):
    the nearest centre in log2; 0 for 0, the last for :data:`SHARED`."""
    values = np.asarray(values, np.float64)
    with np.errstate(divide="ignore"):
        logs = np.log2(np.where(values > 0, values, 1.0))
    centres = np.log2(codebook[1:-1].astype(np.float64))
    codes = (1 + np.searchsorted((centres[1:] + centres[:-1]) / 2, logs)).astype(np.uint8)
    codes[values <= 0] = 0
    codes[values == SHARED] = CODEBOOK_SIZE - 1
    return codes


# --- compact storage ----------------------------------------------------------------------

class KeyIndex:
    """Lookup in a sorted array of uniformly spread uint64 keys.

    ``start[b]`` is the first position whose key has top bits ``b``; with one to
    two keys per slot, finding a key reads ``start`` twice and compares a key
    or two: about two cache misses, where a binary search takes ~23 dependent
    ones.  The index costs 2-4 bytes a key.

    Parameters
    ----------
    keys : uint64 array, sorted, distinct
    start : int array (2**bits + 1,), optional (built when absent)

    Examples
    --------
    >>> idx = KeyIndex(np.array([3, 2**63, 2**64 - 1], dtype=np.uint64))
    >>> idx.find(np.array([2**63, 5], dtype=np.uint64)).tolist()
    [1, -1]
    """

    def __init__(self, keys, start=None):
        self.keys = keys
        if start is None:
            writer = KeyIndexWriter(len(keys))
            writer.add(keys)
            start = writer.finish()
        self.start = start
        self.shift = np.uint64(64 - int(round(math.log2(len(start) - 1))))

    def find(self, queries):
        """Position of each query key, -1 where absent."""
        from snm_core.scoring.layouts import hashed_kernels  # loaded by scoring only
        return hashed_kernels.find(self.keys, self.start, self.shift,
                            np.ascontiguousarray(queries, dtype=np.uint64))


class KeyIndexWriter:
    """The ``start`` array of a :class:`KeyIndex`, built from its sorted keys a chunk at a time.

    Parameters
    ----------
    n : int, the number of keys in all
    out : NpyWriter or SlotIndexWriter, optional: the entries are given there as
        they are filled, instead of kept (``finish`` then returns None)
    bits : int, optional: slot bits (default :func:`index_bits`)
    dtype : optional: the starts' type (default int32 where the keys' number fits)
    """

    def __init__(self, n, out=None, bits=None, dtype=None):
        self.n, self.out = n, out
        self.bits = index_bits(n) if bits is None else bits
        self.dtype = dtype or (np.int32 if n < 2 ** 31 else np.int64)
        self.done = self.next_slot = 0
        self.parts = []

    def add(self, keys):
        start, self.next_slot = kernels.key_index_chunk(keys, self.bits, self.done,
                                                        self.next_slot)
        self._emit(start)
        self.done += len(keys)

    def finish(self):
        self._emit(np.full((1 << self.bits) + 1 - self.next_slot, self.n, np.int64))
        if self.out is None:
            return np.concatenate(self.parts)

    def _emit(self, start):
        start = start.astype(self.dtype, copy=False)
        if self.out is None:
            self.parts.append(start)
        else:
            self.out.append(start)


def index_bits(n):
    """Top-bit slots of a KeyIndex over n keys: about two keys a slot."""
    return max(1, int(math.ceil(math.log2(max(n, 1)))) - 1)


def table_bits(n, packed=False):
    """Top-bit slots of an :class:`EntryTable` over n keys: one to two keys a slot (two
    to four make lookups slower for less memory), at most 32, so that the 32 stored bits
    follow the slot's; in a packed table, made for its size, two to four."""
    return max(1, min(32, index_bits(n)) - (1 if packed else 0))


#: Bytes of a ``.npy`` file besides its elements (numpy pads every header to 128).
NPY_HEADER_BYTES = 128


def index_lengths(n, packed=False):
    """``(offsets, blocks)``: the lengths of the slot offsets and block starts of an
    :class:`EntryTable` of n keys."""
    slots = 1 << table_bits(n, packed)
    return slots + 1, (slots >> SLOT_BLOCK_BITS) + 1


def table_bytes(n, packed=False):
    """The bytes of an :class:`EntryTable` of n keys as written (its overflow table, of a
    few hundred keys at most, aside): entries, slot offsets and block starts."""
    offsets, blocks = index_lengths(n, packed)
    codebook = CODEBOOK_SIZE * 4 + NPY_HEADER_BYTES if packed else 0
    return (n * (PACKED_ENTRY if packed else ENTRY).itemsize + offsets * 2 + blocks * 8
            + 4 * NPY_HEADER_BYTES + codebook)


class EntryTable:
    """Lookup of 64-bit keys in a compact table (see the module docstring).

    The keys are hashes (bits spread uniformly): a query that differs from a
    present key only in the bits below the stored ones is taken for it.

    Parameters
    ----------
    entries : ENTRY array (n,), sorted by key
    offsets : uint16 array (2**bits + 1,), each slot's first entry less its block's
    blocks : int64 array ((2**bits >> SLOT_BLOCK_BITS) + 1,), each block's first entry
    overflow : OVERFLOW array, the whole keys of entries sharing all stored bits

    Examples
    --------
    >>> table = EntryTable.build(np.array([2**40, 2**63, 2**64 - 1], dtype=np.uint64),
    ...                          np.array([0.5, 1.5, 2.5], dtype=np.float32))
    >>> table.find(np.array([2**63, 2**50], dtype=np.uint64)).tolist()
    [1, -1]
    """

    def __init__(self, entries, offsets, blocks, overflow, codebook=None):
        self.entries, self.offsets, self.blocks, self.overflow = entries, offsets, blocks, overflow
        self.shift = np.uint64(64 - int(round(math.log2(len(offsets) - 1))))
        self.packed = entries.dtype == PACKED_ENTRY
        # A contiguous view for the compiled loops: entry p is words[2p] (its remainder)
        # and words[2p + 1] (its value's bits); packed, bytes 3p to 3p + 2.
        self.words = entries.view(np.uint8 if self.packed else np.uint32)
        self.codebook = np.asarray(codebook, np.float32) if self.packed else None
        self.overflow_keys = np.ascontiguousarray(overflow["key"])
        self.overflow_rows = np.ascontiguousarray(overflow["row"])

    @classmethod
    def build(cls, keys, values, packed=False):
        """A table in memory from sorted distinct keys and their values."""
        writer = EntryTableWriter(len(keys), packed=packed,
                                  codebook=fit_codebook(values) if packed else None)
        writer.add(keys, values)
        return cls(*writer.finish())

    def value_of(self, rows):
        """The values (float32) of entries ``rows``."""
        values = self.entries["value"][rows]
        return self.codebook[values] if self.packed else values

    @property
    def parts(self):
        """The arrays :func:`snm_core.scoring.layouts.hashed_kernels.find_entries` takes, in its order."""
        return (self.words, self.offsets, self.blocks, self.shift, self.overflow_keys,
                self.overflow_rows, self.codebook)

    def find(self, queries):
        """Row of each query key, -1 where absent."""
        from snm_core.scoring.layouts import hashed_kernels  # loaded by scoring only
        return hashed_kernels.find_entries(*self.parts, np.ascontiguousarray(queries, np.uint64))


class SlotIndexWriter:
    """The two-level slot index of an :class:`EntryTable` from its slot starts in order
    (the ``out`` of a :class:`KeyIndexWriter`): uint16 offsets, written as they come,
    and the int64 start of each block of ``2**SLOT_BLOCK_BITS`` slots."""

    def __init__(self, offsets_out):
        self.out = offsets_out  # NpyWriter, or None: kept
        self.kept, self.blocks = [], []
        self.pending = np.zeros(0, np.int64)

    def append(self, start):
        start = np.asarray(start, np.int64)
        size = 1 << SLOT_BLOCK_BITS
        if len(self.pending):  # the block begun by the chunk before, completed first
            head = np.concatenate([self.pending, start[:size - len(self.pending)]])
            start = start[len(head) - len(self.pending):]
            if len(head) < size:
                self.pending = head
                return
            self._blocks(head)
        whole = len(start) >> SLOT_BLOCK_BITS << SLOT_BLOCK_BITS
        if whole:
            self._blocks(start[:whole])
        self.pending = start[whole:].copy()

    def _blocks(self, start):
        size = 1 << SLOT_BLOCK_BITS
        block = start.reshape(-1, size) if len(start) % size == 0 else start[None, :]
        # The starts do not decrease: a block's largest offset is its last.
        if len(start) and (block[:, -1] - block[:, 0]).max() > np.iinfo(np.uint16).max:
            raise SnmInputError("a block of the compact index holds more than 65,535 keys: "
                                "the keys are not hashes; please report this")
        self.blocks.append(block[:, 0].copy())  # a view would keep every slot's start
        offsets = np.subtract(block, block[:, :1], dtype=np.uint16, casting="unsafe").ravel()
        if self.out is None:
            self.kept.append(offsets)
        else:
            self.out.append(offsets)

    def finish(self):
        """``(offsets or None when written, blocks)``."""
        for i in range(0, len(self.pending), 1 << SLOT_BLOCK_BITS):  # the last, short block
            self._blocks(self.pending[i:i + (1 << SLOT_BLOCK_BITS)])
        blocks = np.concatenate(self.blocks + [np.zeros(0, np.int64)])
        if self.out is None:
            return np.concatenate(self.kept), blocks
        return None, blocks


class EntryTableWriter:
    """An :class:`EntryTable` built from sorted keys a chunk at a time, written to
    ``directory/{name}_entries.npy``, ``_index.npy``, ``_blocks.npy`` and
    ``_overflow.npy`` (or kept in memory without a directory); ``packed``: in
    :data:`PACKED_ENTRY` s (16 stored bits, value codes)."""

    def __init__(self, n, directory=None, name=None, packed=False, codebook=None):
        self.n, self.directory, self.name = n, directory, name
        self.bits = table_bits(n, packed)
        self.packed = packed
        self.codebook = codebook  # packed: the table's (fit_codebook)
        self.entry = PACKED_ENTRY if packed else ENTRY
        self.stored_mask = np.uint64(0xFFFF if packed else 0xFFFFFFFF)
        self.low = np.uint64(64 - self.bits - (16 if packed else 32))  # the stored bits' lowest
        self.entries = self._output("entries", self.entry, n)
        self.slots = SlotIndexWriter(self._output("index", np.uint16, (1 << self.bits) + 1))
        self.index = KeyIndexWriter(n, self.slots, bits=self.bits, dtype=np.int64)
        self.overflow = []
        self.kept = []  # the entries, without a directory
        self.done = 0
        self.last = None  # (stored bits, key, already in overflow) of the previous chunk's last

    def _output(self, part, dtype, n):
        if self.directory is None:
            return None
        return NpyWriter(os.path.join(self.directory, f"{self.name}_{part}.npy"), dtype, n)

    def add(self, keys, values):
        keys = np.ascontiguousarray(keys, np.uint64)
        stored = (keys >> self.low) & self.stored_mask
        entries = np.empty(len(keys), self.entry)
        entries["remainder"] = stored
        entries["value"] = value_codes(values, self.codebook) if self.packed else values
        if self.entries is None:
            self.kept.append(entries)
        else:
            self.entries.append(entries)
        self.index.add(keys)
        if len(keys):
            same = stored[1:] == stored[:-1]
            shared = np.zeros(len(keys), bool)
            shared[1:] |= same
            shared[:-1] |= same
            if self.last is not None and self.last[0] == stored[0]:
                shared[0] = True
                if not self.last[2]:
                    self.overflow.append((np.array([self.last[1]]), np.array([self.done - 1])))
            rows = np.flatnonzero(shared)
            self.overflow.append((keys[rows], rows + self.done))
            self.last = (stored[-1], keys[-1], bool(shared[-1]))
        self.done += len(keys)

    def writers(self):
        """The :class:`NpyWriter` s of the large arrays (none in memory)."""
        return [w for w in (self.entries, self.slots.out) if w is not None]

    def finish(self):
        """In memory: ``(entries, offsets, blocks, overflow)``; written: the bytes written."""
        self.index.finish()
        offsets, blocks = self.slots.finish()
        overflow = np.zeros(sum(len(k) for k, _ in self.overflow), OVERFLOW)
        if len(overflow):
            overflow["key"] = np.concatenate([k for k, _ in self.overflow])
            overflow["row"] = np.concatenate([r for _, r in self.overflow])
        if self.directory is None:
            entries = np.concatenate(self.kept + [np.zeros(0, self.entry)])
            return entries, offsets, blocks, overflow, self.codebook
        written = [("overflow", overflow), ("blocks", blocks)]
        if self.packed:
            written.append(("codebook", self.codebook))
        for part, array in written:
            storage.write_npy(array, os.path.join(self.directory, f"{self.name}_{part}.npy"))
        return self.entries.close() + self.slots.out.close() + sum(a.nbytes for _, a in written)
