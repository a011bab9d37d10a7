"""Local files written around the page cache (``O_DIRECT``): a large output that
this process never reads back (an ARPA file).

Through the page cache every byte is copied into a page the kernel allocates for
it, which costs several times the copy itself, all of it on the writing thread.
Direct I/O hands the disk the process's own buffers (which its heap reuses), and
the writes are made on an I/O thread while the next bytes are made.

``O_DIRECT`` asks that offsets, lengths and buffers be aligned to the device's
block: a writer gathers its bytes in an aligned buffer and writes whole blocks,
padding the last and cutting the file back to its length.  A file system that
refuses ``O_DIRECT`` (``EINVAL`` when it is set) gets a buffered file.
"""

import collections
import concurrent.futures
import errno
import fcntl
import io
import os

import numpy as np

#: The alignment asked of offsets, lengths and buffers (a page: at least any
#: device's logical block).
BLOCK = 4096
#: The bytes a writer gathers before each write to the disk; it holds at most two
#: such buffers, one filling and one being written.
STAGING_BYTES = 1 << 20
#: The disk's writes are made on these threads, so that the threads that compute do
#: not wait for them (a direct write returns when the disk has the bytes).
IO_THREADS = 2
_io_pool = concurrent.futures.ThreadPoolExecutor(IO_THREADS, thread_name_prefix="snm-io")


def in_background(function, *args):
    """``function(*args)`` on an I/O thread: a future."""
    return _io_pool.submit(function, *args)


def aligned_empty(size):
    """An uninitialised uint8 array of ``size`` bytes starting on a :data:`BLOCK`."""
    raw = np.empty(size + BLOCK, np.uint8)
    start = -raw.ctypes.data % BLOCK
    return raw[start:start + size]


def set_direct(fd):
    """Turn on ``O_DIRECT`` for an open file; False where its file system refuses."""
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_DIRECT)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        return False
    return True


def _round_up(size):
    return -(-size // BLOCK) * BLOCK


def _write_at(fd, blocks, offset):
    written = 0
    while written < len(blocks):
        try:
            written += os.pwrite(fd, blocks[written:], offset + written)
        except OSError as error:
            # A write the limits cut short (a full disk, ulimit -f) is refused as
            # unaligned: made through the page cache, it fails with its own error.
            if error.errno != errno.EINVAL or not _clear_direct(fd):
                raise


def _clear_direct(fd):
    """Turn ``O_DIRECT`` off for an open file; False if it was off."""
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)
    return bool(flags & os.O_DIRECT)


class DirectWriter(io.RawIOBase):
    """A file written from its start, in whole blocks on an I/O thread (``fd`` open
    for writing with ``O_DIRECT``, empty; closed by :meth:`close`, which writes the
    last block, waits for the writes and cuts the file to the bytes written)."""

    def __init__(self, fd):
        self.fd, self.size, self.used, self.sent = fd, 0, 0, 0
        self.staging = aligned_empty(STAGING_BYTES)
        self.pending = collections.deque()

    def writable(self):
        return True

    def write(self, data):
        data = np.frombuffer(data, np.uint8)
        done = 0
        while done < len(data):
            take = min(len(data) - done, STAGING_BYTES - self.used)
            self.staging[self.used:self.used + take] = data[done:done + take]
            self.used += take
            done += take
            if self.used == STAGING_BYTES:
                self._write_blocks(STAGING_BYTES)
        self.size += len(data)
        return len(data)

    def _write_blocks(self, size):
        """Send the staging's first ``size`` bytes (whole blocks) to be written, and
        wait for the write before them."""
        self.pending.append(in_background(_write_at, self.fd, self.staging[:size], self.sent))
        self.sent += size
        self.staging, self.used = aligned_empty(STAGING_BYTES), 0
        if len(self.pending) > 1:
            self.pending.popleft().result()

    def close(self):
        if self.closed:
            return
        try:
            if self.used:
                end = _round_up(self.used)
                self.staging[self.used:end] = 0
                self._write_blocks(end)
            while self.pending:
                self.pending.popleft().result()
            if self.sent != self.size:
                os.ftruncate(self.fd, self.size)
        finally:
            concurrent.futures.wait(self.pending)  # no write may outlive its file
            os.close(self.fd)
            super().close()


def open_writer(path, direct=True):
    """``path`` created (it must not exist) and open for writing: with ``direct`` a
    :class:`DirectWriter`, else (or where ``O_DIRECT`` is refused) a buffered file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        return DirectWriter(fd) if direct and set_direct(fd) else os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
