"""A count-min sketch of feature keys: which features cannot reach their threshold.

With ``--min_feature_count`` the count reads the text twice.  The first pass counts the
keys of the thresholded types' feature occurrences in a sketch (:class:`FeatureSketch`,
one per worker, the workers' sketches summed); the second drops an occurrence whose
key's estimate is below its type's threshold before it is summed, sent or written to
scratch.  An estimate is never below the true count (two saturating counters a key, the
smaller read; counters are only ever added to), so only features that the exact filter
after the merge (:func:`snm_core.count.thresholds.keep_counted`) would remove anyway are
dropped early: the count's files are the same bytes whatever the sketch's size, and a
feature that the sketch overestimates is counted and removed as before.

Each occurrence touches two cells of one 64-byte line (``sketch.c``): one cache miss.
Cells are 2, 4 or 8 bits, the fewest that hold the largest threshold.
"""

import numpy as np

from snm_core.io import native, storage

_add = native.function("sketch_add", [native.ptr, native.i64, native.i32, native.ptr,
                                      native.i64])
_keep = native.function("sketch_keep", [native.ptr, native.i64, native.i32, native.ptr,
                                        native.i64, native.i32, native.ptr], native.i64)
_merge = native.function("sketch_merge", [native.ptr, native.ptr, native.i64, native.i32])

#: Cells the sketch has for each feature occurrence the plan expects (an upper bound:
#: the words times the configuration's occurrences an event), at least.  Text repeats
#: its frequent features, whose occurrences share cells, so most features seen once
#: still read as seen once (tests/count/test_sketch.py bounds the share).  Four cells
#: dropped a few more occurrences early but made the count slower: each worker's sketch
#: is zeroed, written and merged, and random reads of it miss the caches more often
#: (benchmarks/README.md, "Count thresholds").
CELLS_PER_OCCURRENCE = 1
MIN_LOG2_CELLS = 16
MAX_LOG2_CELLS = 40
#: Bytes of a sketch merged at once.
MERGE_CHUNK_BYTES = 64 << 20


def cell_bits(max_threshold):
    """The fewest bits (2, 4 or 8) whose saturated counter still tells ``max_threshold``."""
    for bits in (2, 4, 8):
        if max_threshold <= (1 << bits) - 1:
            return bits
    raise ValueError(f"a threshold of {max_threshold} is above 255")


def plan_cells(occurrences, bits, memory_bytes):
    """log2 of the cells of a sketch for about ``occurrences`` feature occurrences within
    ``memory_bytes`` (what a worker may give it), at least :data:`MIN_LOG2_CELLS`."""
    wanted = max(1, occurrences * CELLS_PER_OCCURRENCE)
    log2 = max(MIN_LOG2_CELLS, int(wanted - 1).bit_length())
    while log2 > MIN_LOG2_CELLS and sketch_bytes(log2, bits) > memory_bytes:
        log2 -= 1
    return min(log2, MAX_LOG2_CELLS)


def sketch_bytes(log2_cells, bits):
    """Bytes of a sketch of ``2**log2_cells`` cells of ``bits`` bits."""
    return max(1, (1 << int(log2_cells)) * int(bits) // 8)


class FeatureSketch:
    """Saturating counters of ``bits`` bits, ``2**log2_cells`` of them, packed in bytes
    (``cells``: a given uint8 array, such as a memory map of a merged sketch)."""

    def __init__(self, log2_cells, bits, cells=None):
        if bits not in (2, 4, 8) or not 1 <= log2_cells <= MAX_LOG2_CELLS:
            raise ValueError("bits must be 2, 4 or 8, and log2_cells from 1 to "
                             f"{MAX_LOG2_CELLS}")
        self.log2_cells, self.bits = int(log2_cells), int(bits)
        self.nbytes = sketch_bytes(self.log2_cells, self.bits)
        self.cells = np.zeros(self.nbytes, np.uint8) if cells is None else cells
        if len(self.cells) != self.nbytes:
            raise ValueError(f"a sketch of {self.nbytes} bytes was expected, "
                             f"{len(self.cells)} found")

    def add(self, keys):
        """Count each of the uint64 ``keys`` (an occurrence each) once."""
        keys = np.ascontiguousarray(keys, np.uint64)
        _add(self.cells.ctypes.data, self.log2_cells, self.bits, native.address(keys),
             len(keys))

    def reaches(self, keys, minimum):
        """Bool mask: the ``keys`` whose estimate is at least ``minimum`` (every key whose
        true count is, and some others)."""
        keys = np.ascontiguousarray(keys, np.uint64)
        keep = np.empty(len(keys), np.uint8)
        _keep(self.cells.ctypes.data, self.log2_cells, self.bits, native.address(keys),
              len(keys), int(minimum), native.address(keep))
        return keep.view(bool)

    def save(self, path):
        """Write the cells to ``path`` (local or remote)."""
        with storage.atomic_output(path) as f:
            f.write(memoryview(self.cells))

    @classmethod
    def load(cls, path, log2_cells, bits):
        """The sketch in ``path`` as a read-only memory map (local) or in memory (remote)."""
        if storage.is_remote(path):
            cells = np.frombuffer(storage.read_bytes(path), np.uint8)
        else:
            cells = np.memmap(path, np.uint8, mode="r")
        return cls(log2_cells, bits, cells)


def merge_files(parts, path, log2_cells, bits, chunk_bytes=MERGE_CHUNK_BYTES):
    """Sum the sketches saved in the files ``parts`` into ``path``, a chunk of bytes at
    a time (two chunks held at once, whatever the sketch's size)."""
    nbytes = sketch_bytes(log2_cells, bits)
    inputs = [storage.open_input(part, seekable=True) for part in parts]
    try:
        with storage.atomic_output(path) as out:
            for start in range(0, nbytes, chunk_bytes):
                count = min(chunk_bytes, nbytes - start)
                total = np.zeros(count, np.uint8)
                for part, f in zip(parts, inputs):
                    f.seek(start)
                    other = np.frombuffer(f.read(count), np.uint8)
                    if len(other) != count:
                        raise ValueError(f"{part}: a sketch part of the wrong size")
                    _merge(total.ctypes.data, other.ctypes.data, count, int(bits))
                out.write(memoryview(total))
    finally:
        for f in inputs:
            f.close()

