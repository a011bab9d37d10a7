"""The one text reader: every stage reads sentences through :func:`line_batches`.

Files are plain, ``.gz``, ``.bz2`` or ``.zst`` (by extension), local or in
object storage (:mod:`snm_core.storage`).  One rule for every stage (count,
join, eval, score, ``snm features --input``):

* a line is what lies between newlines; a final newline ends the last line,
  it does not start another;
* a line that is not valid UTF-8 becomes ``None``: skipped and counted by
  :func:`snm_core.text.tokenize` (``invalid_lines``), the first few logged
  with file and line number;
* empty and whitespace-only lines are skipped and counted by ``tokenize``;
* a damaged compressed file (truncated, or not compressed at all) is an
  error naming the file and the last line read.
"""

import bz2
import contextlib
import gzip
import logging
import zlib

import pyarrow as pa

from snm_core import storage
from snm_core.errors import SnmInputError

try:  # Intel ISA-L's gzip: inflates kernel's 5 MB .gz in 0.07 s against 0.19 s for zlib
    from isal.igzip import IGzipFile as _GzipFile
    from isal.isal_zlib import error as _isal_error
except ImportError:  # pragma: no cover - isal is a dependency; a platform without it
    _GzipFile, _isal_error = gzip.GzipFile, zlib.error

#: Text per batch handed to numpy: large enough to amortise per-batch overhead,
#: small enough that a 5-gram batch's temporaries stay near 60 MB a worker.
DEFAULT_BATCH_BYTES = 1 << 19
#: Invalid lines logged with their position before going quiet.
MAX_LOGGED_BAD_LINES = 5
#: Compression by file name ending.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
#: What reading a damaged compressed file raises.
DECOMPRESSION_ERRORS = (EOFError, OSError, zlib.error, _isal_error, pa.ArrowInvalid)

_log = logging.getLogger(__name__)


def compression_of(path):
    """``"gzip"``, ``"bz2"``, ``"zstd"`` or None, from the file name."""
    for ending, name in COMPRESSIONS.items():
        if path.endswith(ending):
            return name
    return None


@contextlib.contextmanager
def open_text(path):
    """``path`` open for reading as a binary stream of its decompressed bytes.

    ``.gz`` goes through ISA-L, which, like Python's ``gzip`` module, raises
    on a truncated file instead of ending the text early; ``.bz2`` through
    Python's ``bz2``; ``.zst`` through pyarrow's zstd stream.
    """
    try:
        raw = storage.open_input(path)
    except FileNotFoundError:
        raise SnmInputError(f"{path}: no such file") from None
    except OSError as e:
        raise SnmInputError(f"{path}: cannot read ({e})") from None
    try:
        compression = compression_of(path)
        if compression == "gzip":
            with _GzipFile(fileobj=raw, mode="rb") as f:
                yield f
        elif compression == "bz2":
            with bz2.BZ2File(raw, "rb") as f:
                yield f
        elif compression == "zstd":
            with pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd") as f:
                yield f
        else:
            yield raw
    finally:
        raw.close()


class InvalidLineLog:
    """Logs the first few invalid lines of a reader (with file and line number)."""

    def __init__(self, limit=MAX_LOGGED_BAD_LINES):
        self.limit = limit
        self.logged = 0

    def __call__(self, path, line_no, error):
        if self.logged < self.limit:
            self.logged += 1
            _log.warning("%s, line %d: not valid UTF-8 (%s at byte %d); line skipped",
                         path, line_no, error.reason, error.start)


def decode_lines(data, path, first_line, log=None):
    """Lines of ``data``; a line that is not valid UTF-8 becomes None (and is logged)."""
    if data.endswith(b"\n"):
        data = data[:-1]
    try:
        return data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        pass
    lines = []
    for i, line in enumerate(data.split(b"\n")):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError as e:
            if log is not None:
                log(path, first_line + i, e)
            lines.append(None)  # counted and skipped by tokenize(); keeps the numbering
    return lines


def line_batches(path, batch_bytes=DEFAULT_BATCH_BYTES, shard=0, shards=1, log=None):
    """Yield ``(first_line, lines)`` for batches of about ``batch_bytes`` of text.

    Only batches ``shard, shard + shards, ...`` are decoded and yielded (line
    numbers stay the file's, 1-based), so ``shards`` readers of one file
    share its lines without exchanging them.  ``lines`` holds None for a
    line that is not valid UTF-8.
    """
    line_no = 1
    batch = 0
    pending = b""
    with open_text(path) as f:
        while True:
            try:
                chunk = f.read(batch_bytes)
            except DECOMPRESSION_ERRORS as e:
                raise SnmInputError(
                    f"{path}: cannot decompress it after line {line_no - 1} "
                    f"({type(e).__name__}: {e}); is it a complete "
                    f"{compression_of(path)} file?") from None
            if chunk:
                pending += chunk
                cut = pending.rfind(b"\n")
                if cut < 0:
                    continue  # a line longer than a batch: keep reading
                data, pending = pending[:cut + 1], pending[cut + 1:]
            else:
                data, pending = pending, b""
                if not data:
                    break
            if batch % shards == shard:
                lines = decode_lines(data, path, line_no, log)
                yield line_no, lines
                line_no += len(lines)
            else:  # another reader's batch: only its lines are counted
                line_no += data.count(b"\n") + (not data.endswith(b"\n"))
            batch += 1
            if not chunk:
                break


def read_lines(path, log=None):
    """All lines of a text file (None for a line that is not valid UTF-8)."""
    log = log if log is not None else InvalidLineLog()
    return [line for _, lines in line_batches(path, log=log) for line in lines]
