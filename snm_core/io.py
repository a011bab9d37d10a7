"""Local file helpers shared by the single-worker stages: atomic writes and JSON.

Every file is first written under a temporary name in the same directory and
then renamed, so a reader never sees half a file and a killed stage leaves no
partial output under a real name.
"""

import contextlib
import json
import os
import tempfile

import pyarrow.parquet as pq

#: Parquet compression for every table we write (zstd: ~3x smaller than
#: uncompressed on count tables, and fast to decode).
PARQUET_COMPRESSION = "zstd"


@contextlib.contextmanager
def atomic_file(path, mode="wb"):
    """A local file open for writing whose content appears at ``path`` only when
    the block completes (temporary name in the same directory, then ``os.replace``)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _atomic(path, mode, write):
    with atomic_file(path, mode) as f:
        write(f)


def atomic_write_text(path, text):
    _atomic(path, "w", lambda f: f.write(text))


def atomic_write_bytes(path, data):
    _atomic(path, "wb", lambda f: f.write(data))


def atomic_write_json(path, obj):
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_parquet(path, table, **kwargs):
    """Write a ``pyarrow.Table`` as one Parquet file (zstd), atomically."""
    kwargs.setdefault("compression", PARQUET_COMPRESSION)
    _atomic(path, "wb", lambda f: pq.write_table(table, f, **kwargs))


def atomic_write_npy(path, array):
    """``np.save`` to ``path``, atomically, without a copy of the array in memory."""
    import numpy as np

    with atomic_file(path) as f:
        np.save(f, array)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)
