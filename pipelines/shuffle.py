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

A part on disk is a JSON header (its length first, 8 bytes little-endian)
that names each array's dtype, shape and offset, then the arrays' raw bytes.
Not ``.npz``: a zip archive checksums every byte twice (CRC-32 on writing and
on reading), and ``np.savez`` needs each array whole, so the slices of a bucket
were first concatenated and the archive built in memory; here each slice is
written straight to the file and read back as a view of one buffer.
:meth:`ArrayShuffle.send_many` writes the parts for many buckets into one file
and each payload names its byte range: a worker's flush or a bucket's
continuation names make one file, not one per bucket (with 64 buckets, the
extension names alone were 4,096 files).
"""

import json
import math
import uuid

import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from pipelines import common

MODES = ("files", "beam")
SCRATCH = "_scratch"
_HEADER_LENGTH = np.dtype("<u8")


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
                length = _write_part(f, part)
                payloads[key] = (path, offset, length)
                offset += length
        return payloads

    def receive(self, payload):
        if self.mode == "beam":
            return payload
        path, offset, length = payload
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.seek(offset)
            data = f.read(length)
        header_length = int(np.frombuffer(data, _HEADER_LENGTH, 1)[0])
        start = _HEADER_LENGTH.itemsize + header_length
        part = {}
        for entry in json.loads(data[_HEADER_LENGTH.itemsize:start]):
            dtype, shape = np.dtype(entry["dtype"]), entry["shape"]
            array = np.frombuffer(data, dtype, math.prod(shape), start + entry["offset"])
            part.setdefault(entry["group"], {})[entry["name"]] = array.reshape(shape)
        return part

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


def _write_part(f, part):
    """Write one part (header, then each piece's bytes); return the bytes written."""
    columns = _columns(part)
    entries, offset = [], 0
    for group, name, pieces in columns:
        dtype = pieces[0].dtype
        rows = sum(len(p) for p in pieces)
        entries.append({"group": group, "name": name, "dtype": dtype.str,
                        "shape": [rows, *pieces[0].shape[1:]], "offset": offset})
        offset += rows * math.prod(pieces[0].shape[1:]) * dtype.itemsize
    header = json.dumps(entries).encode()
    f.write(np.array([len(header)], _HEADER_LENGTH).tobytes())
    f.write(header)
    for _, _, pieces in columns:
        for piece in pieces:
            f.write(np.ascontiguousarray(piece).data)
    return _HEADER_LENGTH.itemsize + len(header) + offset
