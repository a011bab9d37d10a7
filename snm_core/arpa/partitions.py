"""Tables cut into key-range partitions on scratch storage: the files of an external join.

A producer (a model bucket, or a partition of an earlier step) writes one Arrow IPC
file; its record batch ``i`` holds the rows of partition ``i % partitions`` (a
producer that writes in chunks repeats the cycle).  A consumer reads its partition's
batches from every producer's file.  Why Arrow IPC: a batch is its arrays' raw
bytes (no encoding to undo, memory-mapped locally), any batch is read without the
others, and pyarrow reads it from every file system :mod:`snm_core.io.storage` does.

Partitions are key ranges (:func:`snm_core.io.key_ranges.bucket_of`), so the
partitions of a table sorted within each, read in order, are one sorted table.
"""

import contextlib

import numpy as np
import pyarrow as pa

from snm_core.io import storage
from snm_core.arpa.arpa_loops import group_bounds, scatter_by_group
from snm_core.io.key_ranges import bucket_of


def partition_of(keys, partitions):
    """Partition (key range) of each uint64 key: uint16 array, shape (n,) (numpy sorts
    16-bit integers by radix, 64-bit ones by comparison)."""
    return bucket_of(np.asarray(keys, np.uint64), partitions).astype(np.uint16)


def by_group(columns, group, groups):
    """``(columns in group order, bounds)``: ``columns`` (dict of equal-length numpy
    arrays) reordered stably by ``group`` (int array, each row's group, < ``groups``),
    group g's rows at ``bounds[g]:bounds[g + 1]``.  The rows themselves, where
    :func:`snm_core.io.arrays.group_rows` gives the order to take them in (a gather
    a column, at random)."""
    bounds = group_bounds(group, groups)
    return {name: scatter_by_group(np.asarray(values), group, bounds)
            for name, values in columns.items()}, bounds


class PartitionedWriter:
    """One producer's file: :meth:`write` cuts columns by partition, a batch each.

    Parameters
    ----------
    path : str, local or remote; written under a temporary name, renamed when closed
        (a retried producer replaces its file whole)
    partitions : int
    pool : FilePool, optional: a local scratch's pool, whose files the file is written
        over (:mod:`snm_core.io.file_pool`)

    Use as a context manager; a producer that writes nothing still leaves a file
    of ``partitions`` empty batches when ``schema`` is given.
    """

    def __init__(self, path, partitions, schema=None, pool=None):
        self.path, self.partitions, self.schema, self.pool = path, partitions, schema, pool
        self._output = self._writer = None

    def __enter__(self):
        self._output = (self.pool.atomic_output(self.path) if self.pool
                        else storage.atomic_output(self.path))
        self._file = self._output.__enter__()
        return self

    def write(self, columns, partition):
        """Write ``columns`` (dict of equal-length numpy arrays) cut by ``partition``
        (int array, shape (n,), each row's partition, < 2 ** 16): one batch per
        partition, in partition order, rows in their input order."""
        self.write_sorted(*by_group(columns, np.asarray(partition, np.uint16), self.partitions))

    def write_sorted(self, columns, bounds):
        """Write ``columns`` whose rows are in partition order, partition p's
        ``bounds[p]:bounds[p + 1]``."""
        bounds = np.asarray(bounds).tolist()
        if self._writer is None:
            self.schema = pa.schema([(name, pa.from_numpy_dtype(values.dtype))
                                     for name, values in columns.items()])
            self._writer = pa.ipc.new_file(self._file, self.schema)
        for p in range(self.partitions):
            self._writer.write_batch(pa.RecordBatch.from_arrays(
                [pa.array(values[bounds[p]:bounds[p + 1]]) for values in columns.values()],
                schema=self.schema))

    def __exit__(self, kind, value, traceback):
        try:
            if kind is None:
                if self._writer is None:
                    if self.schema is None:
                        raise ValueError(f"{self.path}: nothing written and no schema given")
                    self._writer = pa.ipc.new_file(self._file, self.schema)
                    empty = pa.RecordBatch.from_pylist([], schema=self.schema)
                    for _ in range(self.partitions):
                        self._writer.write_batch(empty)
                self._writer.close()
        finally:
            self._output.__exit__(kind, value, traceback)
        return False


def read_partition(paths, partition, partitions, columns=None):
    """The rows of ``partition`` in every file of ``paths`` (in path order), as a dict
    of numpy arrays (``columns``, default all); ``{}`` when ``paths`` is empty."""
    with contextlib.ExitStack() as stack:
        schema, pieces = None, {}
        for path in paths:
            reader = pa.ipc.open_file(stack.enter_context(_open(path)))
            if schema is None:
                schema = reader.schema
                names = columns or schema.names
                pieces = {name: [] for name in names}
            for i in range(partition, reader.num_record_batches, partitions):
                batch = reader.get_batch(i)
                if batch.num_rows:
                    for name in names:
                        pieces[name].append(batch.column(name).to_numpy())
        # concatenated (copied) before the files are closed
        return {name: np.concatenate(arrays) if arrays
                else pa.array([], schema.field(name).type).to_numpy(zero_copy_only=False)
                for name, arrays in pieces.items()}


def _open(path):
    if storage.is_remote(path):
        fs, inner = storage.filesystem(path)
        return fs.open_input_file(inner)
    return pa.memory_map(path)
