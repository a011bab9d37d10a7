"""Local scratch files written over instead of made afresh, as a database recycles
its log segments.

A file's pages stay in the page cache once written.  Deleting the file frees them,
and the next file's pages are allocated again, which costs the kernel several times
what copying the bytes does.  An external join deletes each table once it is read
and writes the next, of about the same size: so a consumed table's files go to a
pool, and a new file takes the largest of them, is written over from its start and
cut to its length.  A file is claimed by renaming it, so threads and processes
sharing the scratch directory never take the same one.  What a step does not write
over is deleted when it ends (:meth:`FilePool.clear`), so that the pool adds at most
one step's consumed tables to the scratch's peak.
"""

import contextlib
import os
import uuid

from snm_core.io import storage

#: The pool's directory, within the scratch directory.
POOL_NAME = ".pool"


class FilePool:
    """The pool of a local scratch directory (``directory``: nothing else writes in
    its :data:`POOL_NAME`)."""

    def __init__(self, directory):
        self.directory = os.path.join(directory, POOL_NAME)

    def release(self, table):
        """Remove the directory ``table`` (local, no subdirectories; if it exists), its
        files kept in the pool."""
        if not os.path.isdir(table):
            return
        os.makedirs(self.directory, exist_ok=True)
        for entry in os.scandir(table):
            os.replace(entry.path, os.path.join(self.directory, uuid.uuid4().hex))
        os.rmdir(table)

    def clear(self):
        """Delete every pooled file."""
        for entry in (os.scandir(self.directory) if os.path.isdir(self.directory) else []):
            with contextlib.suppress(FileNotFoundError):  # claimed meanwhile
                os.unlink(entry.path)

    def _claim(self, path):
        """Move the largest pooled file to ``path``; False when the pool is empty."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return False
        sizes = []
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):  # claimed meanwhile
                sizes.append((entry.stat().st_size, entry.path))
        for _, pooled in sorted(sizes, reverse=True):
            try:
                os.rename(pooled, path)
                return True
            except FileNotFoundError:
                continue
        return False

    def atomic_output(self, path):
        """:func:`snm_core.io.storage.atomic_output` for a local ``path``, written
        over a pooled file where there is one."""
        return storage.atomic_output(path, open_local=self._open_over)

    @contextlib.contextmanager
    def _open_over(self, tmp):
        if not self._claim(tmp):
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        with open(tmp, "r+b") as f:
            yield f
            f.truncate()
