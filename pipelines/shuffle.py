"""How per-bucket array partials travel from the workers that make them to the one that merges them.

``beam``: the arrays are the shuffled elements, as DESIGN.md describes.  On the
local runners every shuffled byte is held in the runner's memory until the
merge reads it; for the kernel 5-gram count that is ~400 MB of partials and
~2 GB of peak RSS.

``files`` (default): each partial is written to a scratch file next to the
output, and only its path is shuffled.  Peak memory is then a worker's flush
buffer plus one bucket, whatever the corpus size, the way KenLM's lmplz sorts
on disk; any Beam filesystem works (local, gs://), so it runs on Dataflow and
Flink too.  Files are only read, never deleted, by the merge (a retried merge
must find them); the whole scratch directory is removed once the stage's
manifest is written.

A part on disk is its arrays' raw bytes, one after another; the payload (a
small tuple, shuffled) says where the part starts and each array's dtype,
shape and offset.  Not ``.npz``: a zip archive checksums every byte twice
(CRC-32 on writing and on reading), and ``np.savez`` needs each array whole,
so the slices of a bucket were first concatenated and the archive built in
memory; here each slice is written straight to the file.
:meth:`ArrayShuffle.send_many` writes the parts for many buckets into one file
(a worker's flush, or a bucket's continuation names: with 64 buckets the
latter had been 4,096 files), and :meth:`ArrayShuffle.receive_group` reads
one group of columns of many parts straight into their concatenation, so a
merge holds each column once and the other group not at all.
"""

import math
import uuid

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import common

MODES = ("files", "beam")
SCRATCH = "_scratch"


class ArrayShuffle:
    """``send(part) -> payload`` where parts are made, ``receive(payload) -> part`` in the merge.

    A part is a dict of dicts of columns, e.g. ``{"links": {...}, "features": {...}}``;
    a column is a numpy array or a list of arrays to concatenate (slices of
    the same dtype and row shape).  ``receive`` gives plain arrays.
    """

    def __init__(self, mode, out):
        if mode not in MODES:
            raise ValueError(f"shuffle mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.scratch = common.join(out, SCRATCH)

    def send(self, part):
        """One part -> its payload."""
        return self.send_many({0: part})[0]

    def send_many(self, parts):
        """``{key: part}`` -> ``{key: payload}``, all parts in one scratch file."""
        if self.mode == "beam":
            return {key: _concatenated(part) for key, part in parts.items()}
        path = common.join(self.scratch, f"{uuid.uuid4().hex}.arrays")
        payloads, offset = {}, 0
        # Written in place, not renamed: nothing names the file until this returns.
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for key, part in parts.items():
                entries, length = _write_part(f, part)
                payloads[key] = (path, offset, entries)
                offset += length
        return payloads

    def receive(self, payload):
        """A payload -> its part (arrays are views of one buffer)."""
        if self.mode == "beam":
            return payload
        path, start, entries = payload
        length = max((e[4] + _nbytes(e) for e in entries), default=0)
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.seek(start)
            data = f.read(length)
        part = {}
        for group, name, dtype, shape, offset in entries:
            array = np.frombuffer(data, dtype, math.prod(shape), offset)
            part.setdefault(group, {})[name] = array.reshape(shape)
        return part

    def receive_group(self, payloads, group):
        """The ``group`` columns of many parts, each concatenated in payload order.

        Returns ``{name: array}`` (``{}`` without payloads).  Each column is
        allocated once and every part's bytes read into its place.
        """
        if self.mode == "beam":
            parts = [p[group] for p in payloads]
            return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]} \
                if parts else {}
        layouts = [(path, start, [e for e in entries if e[0] == group])
                   for path, start, entries in payloads]
        if not layouts:
            return {}
        rows = {}
        for _, _, entries in layouts:
            for _, name, _, shape, _ in entries:
                rows[name] = rows.get(name, 0) + shape[0]
        columns = {name: np.empty((rows[name], *shape[1:]), np.dtype(dtype))
                   for _, name, dtype, shape, _ in layouts[0][2]}
        filled = dict.fromkeys(columns, 0)
        for path, start, entries in layouts:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                for _, name, _, shape, offset in entries:
                    target = columns[name][filled[name]:filled[name] + shape[0]]
                    filled[name] += shape[0]
                    if target.size:
                        f.seek(start + offset)
                        _read_into(f, memoryview(target).cast("B"))
        return columns

    def cleanup(self):
        common.remove_tree(self.scratch)


def _columns(part):
    """``(group, name, [pieces])`` of a part whose columns are arrays or lists of arrays."""
    return [(group, name, column if isinstance(column, list) else [column])
            for group, arrays in part.items() for name, column in arrays.items()]


def _concatenated(part):
    result = {}
    for group, name, pieces in _columns(part):
        result.setdefault(group, {})[name] = np.concatenate(pieces)
    return result


def _nbytes(entry):
    _, _, dtype, shape, _ = entry
    return math.prod(shape) * np.dtype(dtype).itemsize


def _write_part(f, part):
    """Write one part's pieces; return its entries (group, name, dtype, shape, offset in
    the part) and the bytes written."""
    entries, offset = [], 0
    for group, name, pieces in _columns(part):
        dtype = pieces[0].dtype
        shape = (sum(len(p) for p in pieces), *pieces[0].shape[1:])
        entries.append((group, name, dtype.str, shape, offset))
        for piece in pieces:
            f.write(np.ascontiguousarray(piece).data)
        offset += _nbytes(entries[-1])
    return tuple(entries), offset


def _read_into(f, view):
    """Fill ``view`` (bytes) from ``f``; a short read is an error (a truncated scratch file)."""
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            raise IOError(f"scratch file ended {len(view) - done} bytes early")
        done += got
