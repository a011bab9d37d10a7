"""Files that appear whole or not at all, the writers behind
:func:`snm_core.io.storage.atomic_output`: a local file under a temporary name renamed
when complete, a remote one held until it is large enough to stream and deleted if its
block fails.
"""

import atexit
import contextlib
import io
import os
import uuid

#: pyarrow's S3 part size (``kPartUploadSize`` in Arrow's s3fs.cc; not an option): an
#: upload of more than this is a multipart upload, of this much a single PutObject.
PART_BYTES = 10 << 20

#: The local temporary files this process is writing.  A stage that fails on one worker
#: thread ends the process while another may be in the middle of a file, which no
#: exception then reaches: :func:`remove_unfinished` removes what is left at exit.
_UNFINISHED = set()


def remove_unfinished():
    """Remove the temporary files this process's writers have not finished (at exit)."""
    for tmp in list(_UNFINISHED):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


atexit.register(remove_unfinished)


@contextlib.contextmanager
def local_atomic_output(path, open_local):
    """A local file written under a temporary name in its directory (``open_local`` opens
    it), renamed to ``path`` when the block completes and removed if it fails."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Not mkstemp, whose 0600 would keep the finished file from the user's group and
    # services on a shared mount: the user's umask decides, as for any file they write.
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    _UNFINISHED.add(tmp)
    try:
        with open_local(tmp) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        _UNFINISHED.discard(tmp)


class RemoteWriter(io.RawIOBase):
    """A remote file being written: its first :data:`PART_BYTES` held in memory, then
    a pyarrow output stream to its own name (see :func:`snm_core.io.storage.atomic_output`)."""

    def __init__(self, fs, inner):
        super().__init__()
        self._fs, self._inner = fs, inner
        self._held = io.BytesIO()
        self._stream = None
        self._size = 0

    def writable(self):
        return True

    def write(self, data):
        n = memoryview(data).nbytes
        if self._stream is None:
            if self._held.tell() + n <= PART_BYTES:
                self._held.write(data)
                self._size += n
                return n
            self._open()
        self._stream.write(data)
        self._size += n
        return n

    def tell(self):
        return self._size

    def _open(self):
        self._stream = self._fs.open_output_stream(self._inner, compression=None)
        self._stream.write(self._held.getbuffer())
        self._held = None

    def finish(self):
        """Send what is held and complete the upload: the object appears."""
        if self._stream is None:
            self._open()
        self._stream.close()

    def discard(self):
        """Leave no object: nothing was sent, or the completed partial one is deleted."""
        self._held = None
        if self._stream is None:
            return
        with contextlib.suppress(Exception):  # an upload that failed completes nothing
            self._stream.close()
        self._fs.delete_file(self._inner)


@contextlib.contextmanager
def remote_output(fs, inner):
    """A remote file written as :class:`RemoteWriter` writes it, at ``inner`` of the
    pyarrow file system ``fs``: the object appears when the block completes, and a block
    that fails leaves none."""
    writer = RemoteWriter(fs, inner)
    try:
        yield writer
        writer.finish()
    except BaseException:
        with contextlib.suppress(OSError):
            writer.discard()
        raise
    finally:
        writer.close()
