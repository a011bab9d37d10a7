"""``.npy`` files of a layout: written in order, and loaded with their dtype and shape checked."""

import io
import os

import numpy as np

from snm_core.io import tables
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests


class NpyWriter:
    """A ``.npy`` file of ``n`` elements written in order, then renamed into place.

    Plain writes, not a memory map: the pages written are the page cache's,
    not this process's resident memory.  ``n=None``: as many as are appended, the
    header rewritten when closed (numpy pads a header for any length, so its size does
    not change); the file is byte for byte ``np.save``'s either way.  With ``n`` given,
    the file's manifest checksum is taken as it is written (:attr:`checksum`, once
    closed), so the manifest need not read the file back.
    """

    def __init__(self, path, dtype, n=None):
        self.path, self.dtype, self.n, self.count = path, np.dtype(dtype), n, 0
        self.file = open(path + ".tmp", "wb")
        self.digest = manifests.checksum_digest() if n is not None else None
        self.checksum = None
        self._header = self._header_for(n or 0)
        self._write(self._header)

    def _header_for(self, n):
        from numpy.lib import format as npy_format

        header = io.BytesIO()
        npy_format.write_array_header_1_0(header, {"descr": npy_format.dtype_to_descr(
            self.dtype), "fortran_order": False, "shape": (n,)})
        return header.getvalue()

    def _write(self, data):
        self.file.write(data)
        if self.digest is not None:
            self.digest.update(data)

    def append(self, array):
        array = np.ascontiguousarray(array, self.dtype)
        self._write(memoryview(array).cast("B"))
        self.count += len(array)

    def close(self):
        """Rename the file into place; returns the bytes of its elements."""
        if self.n is None:
            self.n = self.count
            header = self._header_for(self.n)
            if len(header) != len(self._header):
                raise RuntimeError(f"{self.path}: the header of {self.n} elements is longer")
            self.file.seek(0)
            self.file.write(header)
        self.file.close()
        if self.count != self.n:
            raise RuntimeError(f"{self.path}: wrote {self.count} of {self.n} elements")
        os.replace(self.path + ".tmp", self.path)
        if self.digest is not None:
            self.checksum = self.digest.hexdigest()
        return self.n * self.dtype.itemsize


def known_checksums(writers):
    """The checksums the closed ``writers`` took as they wrote, as a manifest's ``known``
    (:func:`snm_core.stages.manifests.write_manifest`)."""
    return manifests.taken_checksums({os.path.basename(w.path): w.checksum for w in writers
                                      if w is not None and w.checksum is not None})


def compact_command(model_dir, layout):
    """The command that builds a model's scoring arrays (``compact/``) in ``layout``: what
    a model without usable arrays says to run, since loading never writes into a model."""
    return f"snm compact --model {model_dir} --layout {layout}"


def rebuild_remedy(compact_dir, layout):
    """What to do about a damaged scoring array of a model's ``compact/`` in ``layout``."""
    model = os.path.dirname(os.path.normpath(compact_dir))
    return f"build the arrays again: {compact_command(model, layout)}"


def load_checked(compact_dir, names, expected, agree=None, mmap=True, remedy=None):
    """``{name: array}`` of a local ``compact/`` directory's ``.npy`` files, each checked
    against ``expected[name] = (dtype or tuple of dtypes, shape or None for any 1-d)``,
    and all by ``agree(arrays)`` if given (their lengths): a damaged one is an
    :class:`SnmInputError` naming it and saying what to do (``remedy``; default: delete the
    directory, a cache, to have it built again).  Memory-mapped arrays keep the map but not
    np.memmap's per-index overhead."""
    arrays = {}
    remedy = remedy or f"delete {compact_dir} to have it built again"
    for name in names:
        path = os.path.join(compact_dir, name + ".npy")
        try:
            array = np.asarray(np.load(path, mmap_mode="r" if mmap else None))
        except (OSError, ValueError, EOFError) as e:
            raise SnmInputError(f"{path}: cannot load ({tables.one_line(e)}); {remedy}") from None
        dtypes, shape = expected[name]
        dtypes = dtypes if isinstance(dtypes, tuple) else (dtypes,)
        shape = (shape,) if isinstance(shape, int) else shape
        if array.dtype not in [np.dtype(d) for d in dtypes] or (
                array.shape != shape if shape is not None else array.ndim != 1):
            raise SnmInputError(f"{path}: {array.dtype} of shape {array.shape}, expected "
                                f"{' or '.join(str(np.dtype(d)) for d in dtypes)} of shape "
                                f"{shape or '(n,)'}; {remedy}")
        arrays[name] = array
    if agree is not None and not agree(arrays):
        raise SnmInputError(f"{compact_dir}: its arrays do not agree in length; {remedy}")
    return arrays
