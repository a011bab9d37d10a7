"""An external sort: records spilled to scratch in sorted runs, read back a key range at a time.

A record is a key of ``width`` uint64 words (the most significant first, compared
word by word) and payload columns.  :meth:`SortedRuns.add` buffers records and
spills each ``run_records`` of them, sorted (radix sorts, one a word), to a run
file; a run keeps every ``spacing``-th key of its own in memory.  Those samples
cut the key space into ranges (:meth:`SortedRuns.partitions`) that hold at most
``partition_records`` records whatever the keys (a run has at most ``spacing``
records between two of its samples), and a range is read from every run (its
slice found from the samples and at most ``spacing`` keys of the file), merged
and sorted in memory.  Keys are distinct in every use here (equal keys would be
kept, in no defined order).

Memory: the run being filled, or one partition, and the samples (``width`` words per
``spacing`` records).
"""

import math
import os
import shutil

import numpy as np

from snm_core.io.radix import argsort_keys


def argsort_rows(keys, scratch=None):
    """The permutation that sorts ``keys`` (n, width) uint64 rows lexicographically: a
    stable radix sort per word, the least significant first."""
    n, width = keys.shape
    if n == 0:
        return np.zeros(0, np.intp)
    order = argsort_keys(keys[:, width - 1], scratch).astype(np.intp)
    for column in range(width - 2, -1, -1):
        if keys[0, column] == keys[-1, column] and np.all(keys[:, column] == keys[0, column]):
            continue  # one value: the word changes no order
        order = order[argsort_keys(keys[order, column], scratch)]
    return order


def count_below(rows, key):
    """How many of the sorted ``rows`` (m, width) are lexicographically below ``key``."""
    below = np.zeros(len(rows), bool)
    equal = np.ones(len(rows), bool)
    for column in range(rows.shape[1]):
        below |= equal & (rows[:, column] < key[column])
        equal &= rows[:, column] == key[column]
    return int(np.count_nonzero(below))


class SortedRuns:
    """Records sorted on scratch storage; see the module docstring.

    Parameters
    ----------
    directory : str, local scratch directory (created; :meth:`remove` deletes it)
    width : int, uint64 words a key
    payload : dict, ``{name: dtype}`` of the columns beside the key
    run_records : int, records a run (the last may have fewer)
    partition_records : int, records a partition at most
    expected_records : int, how many records will be added (sets the samples' spacing)
    """

    def __init__(self, directory, width, payload, run_records, partition_records,
                 expected_records):
        self.directory, self.width = directory, width
        self.payload = {name: np.dtype(dtype) for name, dtype in payload.items()}
        self.run_records = max(1, int(run_records))
        self.partition_records = max(1, int(partition_records))
        runs = max(1, math.ceil(expected_records / self.run_records))
        # A partition holds at most spacing * (its samples + runs) records.
        self.spacing = max(1, min(self.run_records, self.partition_records) // (4 * runs))
        self.sizes, self.samples = [], []  # per run: records, (keys of every spacing-th)
        self._pending, self._pending_records = [], 0
        self._scratch = {}
        os.makedirs(directory, exist_ok=True)

    @property
    def runs(self):
        return len(self.sizes)

    def starts(self):
        """Where each run's records start in the order they were added; int64 (runs + 1,)."""
        return np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)

    def path(self, run, name):
        return os.path.join(self.directory, f"{run}.{name}")

    def add(self, keys, columns):
        """Add records: ``keys`` (n, width) uint64, ``columns`` ``{name: (n,)}``."""
        keys = np.ascontiguousarray(keys, np.uint64).reshape(-1, self.width)
        while len(keys):
            take = min(len(keys), self.run_records - self._pending_records)
            self._pending.append((keys[:take], {name: np.asarray(columns[name])[:take]
                                                for name in self.payload}))
            self._pending_records += take
            keys = keys[take:]
            columns = {name: np.asarray(columns[name])[take:] for name in self.payload}
            if self._pending_records == self.run_records:
                self._spill()

    def finish(self):
        """Spill what is left; call once, after the last :meth:`add`."""
        if self._pending_records:
            self._spill()
        self._scratch = {}

    def _spill(self):
        keys = np.concatenate([k for k, _ in self._pending])
        columns = {name: np.concatenate([c[name] for _, c in self._pending]).astype(dtype)
                   for name, dtype in self.payload.items()}
        self._pending, self._pending_records = [], 0
        order = argsort_rows(keys, self._scratch)
        run = self.runs
        keys = keys[order]
        keys.tofile(self.path(run, "keys"))
        for name, values in columns.items():
            values[order].tofile(self.path(run, name))
        self.sizes.append(len(keys))
        self.samples.append(keys[::self.spacing].copy())

    def _below(self, run, key):
        """Records of ``run`` below ``key``, from its samples and at most ``spacing``
        keys of its file."""
        samples = self.samples[run]
        j = count_below(samples, key)
        if j == 0 or self.spacing == 1:
            return j
        first = (j - 1) * self.spacing + 1
        n = min(self.spacing - 1, self.sizes[run] - first)
        return first + count_below(self._read(run, "keys", first, n), key)

    def _read(self, run, name, first, n):
        dtype = np.dtype(np.uint64) if name == "keys" else self.payload[name]
        per = self.width if name == "keys" else 1
        values = np.fromfile(self.path(run, name), dtype=dtype, count=n * per,
                             offset=first * per * dtype.itemsize)
        return values.reshape(-1, self.width) if name == "keys" else values

    def read_run(self, run, name):
        """A run's column ``name`` (or ``"keys"``), whole, in its sorted order."""
        return self._read(run, name, 0, self.sizes[run])

    def _bounds(self):
        """The first key of every partition after the first: samples, cut so that a
        partition holds at most ``partition_records`` records."""
        if not self.runs:
            return []
        samples = np.concatenate(self.samples)
        samples = samples[argsort_rows(samples)]
        # (more runs than a quarter of a partition's records, a budget far too small for
        # the model, get partitions of twice the runs' samples, over the budget)
        most = max(self.runs, self.partition_records // self.spacing - self.runs)
        return [samples[i] for i in range(most, len(samples), most)]

    def partitions(self):
        """The records in key order, a partition at a time: dicts with ``keys`` (n, width),
        the payload columns, and ``slices`` ``[(run, first, end)]`` and ``order``: the
        partition is the runs' slices concatenated, then taken in ``order``."""
        bounds = self._bounds()
        first = [0] * self.runs
        for bound in bounds + [None]:
            end = list(self.sizes) if bound is None else [self._below(r, bound)
                                                          for r in range(self.runs)]
            slices = [(r, first[r], end[r]) for r in range(self.runs) if end[r] > first[r]]
            pieces = {name: [self._read(r, name, lo, hi - lo) for r, lo, hi in slices]
                      for name in ("keys", *self.payload)}
            keys = (np.concatenate(pieces.pop("keys")) if slices
                    else np.zeros((0, self.width), np.uint64))
            order = argsort_rows(keys, self._scratch)
            part = {"keys": keys[order], "slices": slices, "order": order}
            del keys
            for name, dtype in self.payload.items():
                part[name] = (np.concatenate(pieces.pop(name)) if slices
                              else np.zeros(0, dtype))[order]
            first = end
            yield part
        self._scratch = {}

    def remove(self):
        shutil.rmtree(self.directory, ignore_errors=True)
