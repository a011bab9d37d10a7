r"""The one text reader: every stage reads sentences through :func:`line_batches`.

Files are plain, ``.gz``, ``.bz2`` or ``.zst`` (by extension), local or in
object storage (:mod:`snm_core.io.storage`).  One rule for every stage (count,
join, eval, score, ``snm features --input``):

* a line is what lies between newlines (``\n`` only: ``\r``, U+0085,
  U+2028 and U+2029 inside a line are whitespace, not line ends); a final
  newline ends the last line, it does not start another;
* a ``\r\n`` line end is a newline: its ``\r`` is dropped, so that no
  stage (nor ``snm score``'s echo of the line) sees it;
* a UTF-8 byte order mark at the start of a file is dropped;
* a line that is not valid text in the encoding (UTF-8 unless ``--encoding``
  says otherwise), or that holds a NUL byte (binary data, a UTF-16 file, the
  zero-filled tail of a file a crash cut short), becomes ``None``: skipped and
  counted by :func:`snm_core.text.tokenize` (``invalid_lines``) while such lines
  are at most :data:`MAX_INVALID_SHARE` of the text's lines, or all of them with
  ``--skip_invalid``; beyond that the text is refused, naming the file and the
  first such line (:func:`check_invalid_lines`, the one policy of every command);
* empty and whitespace-only lines are skipped and counted by ``tokenize``;
* a line longer than a batch is read whole (in time linear in its length);
* a damaged compressed file (truncated, or not compressed at all) is an
  error naming the file and the last line read;
* the path ``-`` is standard input (plain text).
"""

import bz2
import contextlib
import dataclasses
import gzip
import logging
import sys
import zlib

import pyarrow as pa

from snm_core.io import storage
from snm_core.io.errors import SnmInputError

try:  # Intel ISA-L's gzip: inflates several times as fast as zlib
    from isal.igzip import IGzipFile as _GzipFile
    from isal.isal_zlib import error as _isal_error
except ImportError:  # pragma: no cover - isal is a dependency; a platform without it
    _GzipFile, _isal_error = gzip.GzipFile, zlib.error

#: Text per batch handed to numpy: large enough to amortise per-batch overhead,
#: small enough that a batch's temporaries stay small beside a worker's memory.
DEFAULT_BATCH_BYTES = 1 << 19
#: Invalid lines logged with their position before going quiet.
MAX_LOGGED_BAD_LINES = 5
#: The share of a text's lines that may fail to decode and be skipped without
#: ``--skip_invalid``: a few damaged lines of a corpus are skipped (counted), a text in
#: another encoding (a third of its lines, say) is refused rather than half-read.
MAX_INVALID_SHARE = 0.001
#: The name of standard input wherever a text file is read.
STDIN = "-"
#: Compression by file name ending.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
#: The UTF-8 byte order mark: dropped at the start of a file.
BOM = b"\xef\xbb\xbf"
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
    Python's ``bz2``; ``.zst`` through pyarrow's zstd stream.  ``-`` is standard
    input (plain text), left open.
    """
    with _open_streams(path) as (_, text):
        yield text


@contextlib.contextmanager
def _open_streams(path):
    """``(stored, text)``: ``path`` open for reading as stored (None for standard input),
    and as a binary stream of its decompressed bytes (see :func:`open_text`)."""
    if path == STDIN:
        yield None, sys.stdin.buffer
        return
    try:
        raw = storage.open_input(path)
    except FileNotFoundError:
        raise SnmInputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SnmInputError(f"{path}: a directory, expected a file") from None
    except OSError as e:
        raise SnmInputError(f"{path}: cannot read ({e})") from None
    try:
        compression = compression_of(path)
        if compression == "gzip":
            with _GzipFile(fileobj=raw, mode="rb") as f:
                yield raw, f
        elif compression == "bz2":
            with bz2.BZ2File(raw, "rb") as f:
                yield raw, f
        elif compression == "zstd":
            with pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), "zstd") as f:
                yield raw, f
        else:
            yield raw, raw
    finally:
        raw.close()


class InvalidLineLog:
    """Logs the first few invalid lines of a reader (with file and line number)."""

    def __init__(self, limit=MAX_LOGGED_BAD_LINES):
        self.limit = limit
        self.logged = 0

    def __call__(self, path, line_no, problem):
        """``problem``: what is wrong with the line, e.g. ``"not valid UTF-8 (...)"``."""
        if self.logged < self.limit:
            self.logged += 1
            _log.warning("%s, line %d: %s; line skipped", path, line_no, problem)


class FirstInvalidLine:
    """A ``log`` of :func:`line_batches` that keeps the first line that did not decode:
    ``first`` is ``(path, line number, problem)``, or None."""

    def __init__(self):
        self.first = None

    def __call__(self, path, line_no, problem):
        if self.first is None:
            self.first = (path, line_no, problem)


def encoding_name(encoding):
    """How messages name ``encoding``: ``UTF-8`` for Python's ``utf-8``."""
    return "UTF-8" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding


def check_encoding(encoding):
    """Raise :class:`SnmInputError` unless ``encoding`` (``--encoding``) is a text encoding
    that writes ASCII as ASCII: lines are cut at the byte ``\\n`` before they are decoded
    (so UTF-16 cannot be read; UTF-8, latin-1, cp1252, ... can)."""
    try:
        ascii_kept = "\n\t a".encode(encoding).endswith(b"\n\t a")
    except LookupError:
        raise SnmInputError(f"--encoding {encoding}: no such text encoding") from None
    if not ascii_kept:
        raise SnmInputError(f"--encoding {encoding}: lines are cut at the byte \\n before "
                            "they are decoded, so the encoding must write ASCII as ASCII "
                            "(utf-8, latin-1, cp1252, ...); convert the text first, e.g. "
                            f"iconv -f {encoding} -t utf-8")


@dataclasses.dataclass(frozen=True)
class InvalidLines:
    """What a text held of lines that do not decode, for :func:`check_invalid_lines`.

    Attributes
    ----------
    invalid : int
        Lines that did not decode or hold a NUL byte.
    lines : int
        Every line read: sentences, empty and invalid lines.
    first : tuple or None
        ``(path, line number, problem)`` of the first invalid line (of the first file,
        in the order given, that has one).
    """

    invalid: int
    lines: int
    first: tuple = None


def check_invalid_lines(counted, encoding="utf-8", skip_invalid=False):
    """The one policy of every command for lines that do not decode (or hold a NUL byte).

    They are skipped and counted (``invalid_lines``) while they are at most
    :data:`MAX_INVALID_SHARE` of the lines, or all of them with ``skip_invalid``
    (``--skip_invalid``); one warning then names the first.  More than that share is
    most likely a text in another encoding, whose figures would be over what happens
    to decode: an error naming the file and the first such line.

    Parameters
    ----------
    counted : InvalidLines
    encoding : str
        The text's encoding (``--encoding``), named in the messages.
    skip_invalid : bool

    Raises
    ------
    SnmInputError
        ``PATH, line N: PROBLEM; ...``, when more than the share did not decode and
        ``skip_invalid`` is false.
    """
    if not counted.invalid:
        return
    path, line_no, problem = counted.first or ("the text", 0, "does not decode")
    what = (f"{counted.invalid:,} of {counted.lines:,} lines are not valid "
            f"{encoding_name(encoding)} or hold a NUL byte")
    if counted.invalid > MAX_INVALID_SHARE * counted.lines and not skip_invalid:
        raise SnmInputError(
            f"{path}, line {line_no}: {problem}; {what} "
            f"({counted.invalid / max(counted.lines, 1):.2%}, more than the "
            f"{MAX_INVALID_SHARE:.1%} skipped without --skip_invalid): give the text's "
            "--encoding (e.g. latin-1), or --skip_invalid to skip and count them all")
    _log.warning("%s, line %d: %s; %s: skipped, counted as invalid_lines", path, line_no,
                 problem, what)


def decode_lines(data, path, first_line, log=None, encoding="utf-8"):
    """Lines of ``data`` (whole lines); a line that is not valid text in ``encoding`` or that
    holds a NUL byte becomes None (and is logged)."""
    if b"\r" in data:  # a memchr (a two-byte search costs as much as the decoding)
        data = data.replace(b"\r\n", b"\n")
    if data.endswith(b"\n"):
        data = data[:-1]
    if b"\0" not in data:
        try:
            return data.decode(encoding).split("\n")
        except UnicodeDecodeError:
            pass
    lines = []
    for i, line in enumerate(data.split(b"\n")):
        try:
            text = line.decode(encoding)
            problem = None
        except UnicodeDecodeError as e:
            text, problem = None, (f"not valid {encoding_name(encoding)} ({e.reason} at "
                                   f"byte {e.start})")
        nul = line.find(b"\0")
        if text is not None and nul >= 0:
            text, problem = None, f"a NUL byte at byte {nul} (binary data or UTF-16 text?)"
        if problem is not None and log is not None:
            log(path, first_line + i, problem)
        lines.append(text)  # None: counted and skipped by tokenize(); keeps the numbering
    return lines


def line_batches(path, batch_bytes=DEFAULT_BATCH_BYTES, shard=0, shards=1, log=None,
                 encoding="utf-8", progress=None):
    """Yield ``(first_line, lines)`` for batches of about ``batch_bytes`` of text.

    Only batches ``shard, shard + shards, ...`` are decoded and yielded (line
    numbers stay the file's, 1-based), so ``shards`` readers of one file
    share its lines without exchanging them.  ``lines`` holds None for a
    line that is not valid UTF-8 or holds a NUL byte.

    A line longer than a batch makes one batch, however long: its pieces are
    kept apart until its newline arrives, then joined once.

    ``progress(n)``, when given, is called once each of this reader's batches is
    processed, with the bytes of the file as stored (compressed, for a compressed
    file) that the batch was read from: the calls of a file's ``shards`` readers
    add up to its size.
    """
    line_no = 1
    batch = 0
    pending = []  # what was read since the last newline (no newline in it)
    with _open_streams(path) as (stored, f):
        # Every reader reads the same stream the same way, so their positions agree.
        position = _position(stored) if progress is not None else None
        while True:
            try:
                chunk = f.read(batch_bytes)
            except DECOMPRESSION_ERRORS as e:
                raise SnmInputError(
                    f"{path}: cannot decompress it after line {line_no - 1} "
                    f"({type(e).__name__}: {e}); is it a complete "
                    f"{compression_of(path)} file?") from None
            read_to = stored.tell() if position is not None else None
            if chunk:
                cut = chunk.rfind(b"\n")
                if cut < 0:
                    pending.append(chunk)  # a line longer than a batch: keep reading
                    continue
                data = b"".join(pending + [chunk[:cut + 1]]) if pending else chunk[:cut + 1]
                pending = [chunk[cut + 1:]] if cut + 1 < len(chunk) else []
            else:
                data, pending = b"".join(pending), []
                if not data:
                    break
            if batch == 0 and data.startswith(BOM):
                data = data[len(BOM):]
            if batch % shards == shard:
                lines = decode_lines(data, path, line_no, log, encoding)
                yield line_no, lines
                line_no += len(lines)
                if position is not None:
                    progress(read_to - position)
            else:  # another reader's batch: only its lines are counted
                line_no += data.count(b"\n") + (not data.endswith(b"\n"))
            position = read_to
            batch += 1
            if not chunk:
                break
        if position is not None and batch % shards == shard and read_to > position:
            progress(read_to - position)  # the end of the file, read after the last batch


def _position(stored):
    """Where ``stored`` is (bytes from the start), or None for a stream that cannot tell."""
    try:
        return stored.tell() if stored is not None else None
    except (OSError, ValueError):
        return None


def read_lines(path, log=None, encoding="utf-8"):
    """All lines of a text file (None for a line that is not valid text in ``encoding``, by
    default UTF-8, or that holds a NUL)."""
    log = log if log is not None else InvalidLineLog()
    check_encoding(encoding)
    return [line for _, lines in line_batches(path, log=log, encoding=encoding)
            for line in lines]


def read_text(path, encoding="utf-8", skip_invalid=False):
    """All lines of a text file to score (``snm eval``, ``score``, ``train``'s held-out and
    test text read whole), :func:`check_invalid_lines` applied: None for each line that
    did not decode, skipped by the tokenizer."""
    check_encoding(encoding)
    first = FirstInvalidLine()
    lines = [line for _, batch in line_batches(path, log=first, encoding=encoding)
             for line in batch]
    if first.first is not None:
        check_invalid_lines(InvalidLines(lines.count(None), len(lines), first.first),
                            encoding, skip_invalid)
    return lines
