"""How per-bucket array partials travel from the workers that make them to the one that merges them.

``beam``: the arrays are the shuffled elements, as DESIGN.md describes.  On the
local runners every shuffled byte is held in the runner's memory until the
merge reads it, so the peak grows with the corpus.

``files`` (default): each partial is written to a scratch file next to the
output, and only its path is shuffled.  Peak memory is then a worker's flush
buffer plus one bucket, whatever the corpus size, the way KenLM's lmplz sorts
on disk; any Beam filesystem works (local, gs://), so it runs on Dataflow and
Flink too.  On a runner that may retry a bundle, files are only read by the merge (a
retried merge must find them), and the whole scratch directory is removed once
the stage's manifest is written.  On the local runners, which retry no bundle,
with a local scratch (``release``), each worker appends a bucket's parts to a
file of that bucket's (``send_cut(..., by_bucket=True)``), and the stage that
reads a bucket deletes its files (:meth:`ArrayShuffle.release`): the scratch
shrinks as buckets are merged instead of lasting, whole, beside the output.

A part on disk is its arrays' raw bytes, or with ``compress`` each column of each
bucket one compressed block (:mod:`snm_core.io.scratch_codec`, about half the
bytes: a count whose scratch would not fit the free disk in one pass); the payload
(a small tuple, shuffled) names the file and each array's dtype, shape, offset and
stored bytes (None: raw) in it.  Not
``.npz``: a zip archive checksums every byte twice (CRC-32 on writing and on
reading), and ``np.savez`` needs each array whole, so the archive was built
in memory.  :meth:`ArrayShuffle.send_cut` writes the parts for many buckets
into one file (a worker's flush, or a bucket's continuation names: not one
file per pair of buckets), column by column: a column's rows for every
bucket, bucket after bucket (within a bucket, part after part), are one write
(not one per slice), and
:meth:`ArrayShuffle.receive_group` reads one group of columns of many parts
straight into their concatenation, so a merge holds each column once and the
other group not at all.
"""

import contextlib
import hashlib
import math
import os
import tempfile
import uuid

import numpy as np

from snm_core.io import scratch_codec, storage
from snm_core.io.errors import resource_errors

MODES = ("files", "beam")
SCRATCH = "_scratch"


def scratch_directory(out, scratch=None, local_workers=False):
    """Where a stage writing ``out`` keeps its parts: ``out/_scratch``, or with
    ``scratch`` (``--scratch``, a path every worker reads) a subdirectory of it
    named after ``out``, so that two stages never share one.  An ``out`` in object
    storage with workers on this machine (``local_workers``: a local runner) keeps
    them in the temporary directory (``TMPDIR``): every bucket reads its rows of
    every part, which in an object store is a request for each column of each part,
    and so grows with the buckets times the parts."""
    if not scratch and local_workers and storage.is_remote(out):
        scratch = tempfile.gettempdir()
    if not scratch:
        return storage.join(out, SCRATCH)
    digest = hashlib.sha256(out.encode()).hexdigest()[:16]
    return storage.join(scratch, f"{storage.basename(out.rstrip('/'))}-{digest}")


class ArrayShuffle:
    """``send(part) -> payload`` where parts are made, ``receive(payload) -> part`` in the merge.

    A part is a dict of groups of columns (numpy arrays with equal rows), e.g.
    ``{"links": {...}, "features": {...}}``; :meth:`send_cut` sends the
    buckets' rows of many parts at once.
    """

    def __init__(self, mode, scratch, release=False, compress=False):
        """``scratch``: the directory of the ``files`` mode's parts (every worker must
        read it: :func:`scratch_directory`); ``release``: parts in files by bucket, deleted
        once read (only where no bundle is retried, and the scratch is local);
        ``compress``: the files hold compressed blocks."""
        if mode not in MODES:
            raise ValueError(f"shuffle mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.scratch = scratch
        self.compress = compress and mode == "files"
        self.release_files = release and mode == "files" and not storage.is_remote(scratch)
        self._owner = None  # this copy's name in its by-bucket files (one writer a file)

    def send(self, part):
        """One part -> its payload."""
        return self.send_cut({group: [(columns, [0, _rows(columns)])]
                              for group, columns in part.items()}, buckets=[0])[0]

    def send_cut(self, groups, buckets=None, by_bucket=False):
        """Many parts cut into buckets -> ``{bucket: payload}``, all in one scratch file.

        Parameters
        ----------
        groups : dict ``{group: [(columns, bounds), ...]}``
            ``columns`` is a dict of arrays with equal rows; its rows of bucket
            ``b`` are ``bounds[b]:bounds[b + 1]`` (``bounds``: int, shape
            (num_buckets + 1,), the same num_buckets for all), e.g. from
            :func:`snm_core.count.counting.cut_by_bucket`.  A column must have one
            dtype and row shape in every part of its group.
        buckets : list of int, optional
            The buckets to send, empty or not (default: those with rows).
        by_bucket : bool
            With ``release``: append each bucket's rows to this copy's file of that
            bucket (deleted by the bucket's reader) instead of one file for all.

        Returns
        -------
        dict ``{bucket: payload}``; :meth:`receive` gives a bucket its rows of
        every part, in part order.

        Bounds become Python ints and each column's slices are taken in one
        pass, with no dict per part and bucket: that bookkeeping is GIL-held
        Python.
        """
        cuts = {group: [(columns, np.asarray(bounds).tolist()) for columns, bounds in parts]
                for group, parts in groups.items()}
        rows = {group: np.sum([np.diff(bounds) for _, bounds in parts], axis=0)
                for group, parts in cuts.items()}
        if buckets is None:
            buckets = np.flatnonzero(np.sum(list(rows.values()), axis=0)).tolist()
        if self.mode == "beam":
            return {b: {group: {name: np.concatenate(
                        [columns[name][bounds[b]:bounds[b + 1]] for columns, bounds in parts])
                        for name in parts[0][0]} for group, parts in cuts.items()}
                    for b in buckets}
        if by_bucket and self.release_files:
            return self._send_by_bucket(cuts, rows, buckets)
        path = storage.join(self.scratch, f"{uuid.uuid4().hex}.arrays")
        entries = {b: [] for b in buckets}
        offset = 0
        # Written in place, not renamed: nothing names the file until this returns.
        with storage.open_output(path) as f:
            for group, parts in cuts.items():
                for name in parts[0][0]:
                    arrays = [columns[name] for columns, _ in parts]
                    dtype, row_shape = arrays[0].dtype, arrays[0].shape[1:]
                    if any(a.dtype != dtype or a.shape[1:] != row_shape for a in arrays):
                        raise ValueError(f"{group}.{name}: every part of a column must have "
                                         f"one dtype and row shape, got {dtype} "
                                         f"{row_shape} and others")
                    if self.compress:  # a block a bucket, each read on its own
                        for b, count in zip(buckets, rows[group][buckets].tolist()):
                            written, stored = self._write_column(
                                f, [array[bounds[b]:bounds[b + 1]]
                                    for array, (_, bounds) in zip(arrays, parts)])
                            entries[b].append((group, name, dtype.str, (count, *row_shape),
                                               offset, stored))
                            offset += written
                        continue
                    pieces = [array[bounds[b]:bounds[b + 1]] for b in buckets
                              for array, (_, bounds) in zip(arrays, parts)
                              if bounds[b] < bounds[b + 1]]
                    if pieces:
                        f.write(np.concatenate(pieces).data if len(pieces) > 1
                                else np.ascontiguousarray(pieces[0]).data)
                    row_bytes = dtype.itemsize * math.prod(row_shape)
                    for b, count in zip(buckets, rows[group][buckets].tolist()):
                        entries[b].append((group, name, dtype.str, (count, *row_shape), offset,
                                           None))
                        offset += count * row_bytes
        return {b: (path, tuple(bucket_entries)) for b, bucket_entries in entries.items()}

    def _send_by_bucket(self, cuts, rows, buckets):
        """:meth:`send_cut` into this copy's file of each bucket, appended to."""
        if self._owner is None:
            self._owner = uuid.uuid4().hex
            os.makedirs(self.scratch, exist_ok=True)
        payloads = {}
        for b in buckets:
            path = os.path.join(self.scratch, f"{self._owner}-{b:05d}.arrays")
            entries = []
            with resource_errors(path), open(path, "ab") as f:
                offset = f.tell()
                for group, parts in cuts.items():
                    for name in parts[0][0]:
                        pieces = [columns[name][bounds[b]:bounds[b + 1]]
                                  for columns, bounds in parts]
                        dtype, row_shape = pieces[0].dtype, pieces[0].shape[1:]
                        if any(p.dtype != dtype or p.shape[1:] != row_shape for p in pieces):
                            raise ValueError(f"{group}.{name}: every part of a column must "
                                             f"have one dtype and row shape, got {dtype} "
                                             f"{row_shape} and others")
                        written, stored = self._write_column(f, pieces)
                        entries.append((group, name, dtype.str,
                                        (int(rows[group][b]), *row_shape), offset, stored))
                        offset += written
            payloads[b] = (path, tuple(entries))
        return payloads

    def _write_column(self, f, pieces):
        """One bucket's pieces of a column (one dtype and row shape), in order, written
        to ``f``: ``(bytes written, stored)``, ``stored`` the compressed block's bytes, or
        None for raw bytes."""
        column = np.concatenate(pieces) if len(pieces) > 1 else np.ascontiguousarray(pieces[0])
        if self.compress:
            block = scratch_codec.encode(column)
            f.write(block)
            return len(block), len(block)
        if column.nbytes:
            f.write(column.data)
        return column.nbytes, None

    def release(self, payloads):
        """Delete the files of ``payloads`` once their reader has read them (with ``release``:
        a by-bucket file holds one bucket's parts, a :meth:`send` file one part)."""
        if self.release_files:
            for path in {path for path, _ in payloads}:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

    def receive(self, payload):
        """A payload -> its part."""
        if self.mode == "beam":
            return payload
        groups = dict.fromkeys(entry[0] for entry in payload[1])
        return {group: self.receive_group([payload], group) for group in groups}

    def stored_bytes(self, payload):
        """The bytes a payload's part takes where it is kept (its file's, compressed or
        raw; with ``beam``, its arrays')."""
        if self.mode == "beam":
            return sum(a.nbytes for columns in payload.values() for a in columns.values())
        return sum(stored if stored is not None else np.dtype(dtype).itemsize * math.prod(shape)
                   for _, _, dtype, shape, _, stored in payload[1])

    def rows(self, payload, group):
        """Rows of the ``group`` columns of a payload's part."""
        if self.mode == "beam":
            return _rows(payload[group])
        return next((shape[0] for g, _, _, shape, _, _ in payload[1] if g == group), 0)

    def receive_group(self, payloads, group, names=None):
        """The ``group`` columns of many parts (``names``: only those), each concatenated
        in payload order.

        Returns ``{name: array}`` (``{}`` without payloads).  Each column is
        allocated once and every part's bytes read into its place.
        """
        if self.mode == "beam":
            parts = [p[group] for p in payloads]
            return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]
                    if names is None or name in names} if parts else {}
        layouts = [(path, [e for e in entries
                           if e[0] == group and (names is None or e[1] in names)])
                   for path, entries in payloads]
        if not layouts:
            return {}
        rows = {}
        for _, entries in layouts:
            for _, name, _, shape, _, _ in entries:
                rows[name] = rows.get(name, 0) + shape[0]
        columns = {name: np.empty((rows[name], *shape[1:]), np.dtype(dtype))
                   for _, name, dtype, shape, _, _ in layouts[0][1]}
        filled = dict.fromkeys(columns, 0)
        for path, entries in layouts:
            if not any(shape[0] for _, _, _, shape, _, _ in entries):
                continue  # nothing to read: the file is not opened
            with _open(path) as f:
                for _, name, dtype, shape, offset, stored in entries:
                    if np.dtype(dtype) != columns[name].dtype:  # bytes would be misread
                        raise ValueError(f"{group}.{name}: parts of dtypes "
                                         f"{columns[name].dtype} and {np.dtype(dtype)}")
                    target = columns[name][filled[name]:filled[name] + shape[0]]
                    filled[name] += shape[0]
                    if not target.size:
                        continue
                    f.seek(offset)
                    if stored is None:
                        _read_into(f, memoryview(target).cast("B"))
                    else:
                        block = bytearray(stored)
                        _read_into(f, memoryview(block))
                        try:
                            scratch_codec.decode_into(block, target)
                        except OSError as error:
                            raise IOError(f"{path}: a compressed scratch block at byte "
                                          f"{offset} is damaged ({error})") from None
        return columns

    def cleanup(self):
        storage.remove_tree(self.scratch)


def _rows(columns):
    """Rows of a dict of arrays (all have the same)."""
    return len(next(iter(columns.values()))) if columns else 0


def _open(path):
    """A scratch file for reading (a local one straight with ``open``: a merge opens
    thousands)."""
    return storage.open_input(path, seekable=True)


def _read_into(f, view):
    """Fill ``view`` (bytes) from ``f``; a short read is an error (a truncated scratch file)."""
    done = 0
    while done < len(view):
        got = f.readinto(view[done:])
        if not got:
            raise IOError(f"scratch file ended {len(view) - done} bytes early")
        done += got
