"""Files of every stage, local or in object storage: one module on ``pyarrow.fs``.

A path is a local path or a URL: ``s3://bucket/key``, ``gs://bucket/key``,
``hdfs://host/path`` (anything ``pyarrow.fs.FileSystem.from_uri`` opens).  S3
is configured the standard way, from the environment as boto3 reads it:
``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``) for a server other than
AWS, ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``.

Why ``pyarrow.fs``: pyarrow is already a dependency (every table is Parquet),
it speaks local, S3, GCS and HDFS with one interface, and it needs no Beam,
so the single-worker stages (fit, eval, score, export) use the same code as
the Beam stages' DoFns.

Every write is atomic, so a reader never sees half a file and a killed stage
leaves no partial output under a real name.  Locally the content goes to a
temporary name in the same directory (a dot file, which no stage lists) and
is renamed when complete.  In an object store it streams to its own name:
the store shows an object only when its upload completes, so there is no
temporary object and no copy (S3's CopyObject, which a move is, stops at
5 GB and moves every byte twice).  See :func:`atomic_output` for a write
that fails.  Writers take the data first and the path second, as
``pyarrow.parquet.write_table`` and ``json.dump`` do.

Requests cost time and money in an object store, so each helper makes as few
as pyarrow allows: small files go up in one PutObject and are read whole in
one GET (after the HEAD that pyarrow makes to open any file), larger reads
go in large ranges, and directories are not created (an object store has
none; pyarrow would write a marker object for each).
"""

import contextlib
import fnmatch
import glob as globlib
import io
import json
import os
import posixpath
import shutil
import threading
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from snm_core.io import direct as direct_io
from snm_core.io.atomic_files import local_atomic_output, remote_output
from snm_core.io.errors import SnmInputError, resource_errors

#: Parquet compression for the columns that are compressed at all (zstd: much
#: smaller than uncompressed on strings and floats, fast to decode).
PARQUET_COMPRESSION = "zstd"

#: Remote reads go in ranges of this many bytes (one GET each) however small the
#: reader's own reads are; a file up to this size is read in one GET.
READ_BYTES = 8 << 20
#: Object stores: paths are keys, directories exist only as prefixes of keys.
OBJECT_STORES = ("s3", "gs", "gcs")

_LOCAL = pafs.LocalFileSystem()
_REMOTE = {}  # (scheme, authority) -> pyarrow FileSystem
_REMOTE_LOCK = threading.Lock()


def is_remote(path):
    """True for a URL (``s3://...``), False for a local path."""
    path = os.fspath(path)
    return "://" in path and not path.startswith("file://")


def absolute(path):
    """A local path made absolute; a URL unchanged.

    Workers of a cluster runner do not share the launching process's working
    directory, so no relative path may reach a DoFn.
    """
    path = os.fspath(path)
    if path.startswith("file://"):
        path = path[len("file://"):]
    return path if is_remote(path) else os.path.abspath(path)


def filesystem(path):
    """``(pyarrow FileSystem, path inside it)`` for a local path or a URL."""
    if not is_remote(path):
        return _LOCAL, absolute(path)
    scheme, rest = path.split("://", 1)
    authority = rest.split("/", 1)[0]
    with _REMOTE_LOCK:
        fs = _REMOTE.get((scheme, authority))
        if fs is None:
            if scheme == "s3":
                endpoint = (os.environ.get("AWS_ENDPOINT_URL_S3")
                            or os.environ.get("AWS_ENDPOINT_URL"))
                kwargs = {"endpoint_override": endpoint} if endpoint else {}
                region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
                if region:
                    kwargs["region"] = region
                try:
                    # The upload starts with the first part, so a file under PART_BYTES is
                    # one PutObject, not CreateMultipartUpload, UploadPart and
                    # CompleteMultipartUpload (a bucket's errors then come on close).
                    fs = pafs.S3FileSystem(allow_delayed_open=True, **kwargs)
                except TypeError:  # pyarrow before 21: every upload is multipart
                    fs = pafs.S3FileSystem(**kwargs)
            else:
                fs = pafs.FileSystem.from_uri(f"{scheme}://{authority}")[0]
            _REMOTE[(scheme, authority)] = fs
    if scheme in OBJECT_STORES:  # paths inside are "bucket/key"
        return fs, rest.rstrip("/")
    return fs, "/" + (rest.split("/", 1)[1] if "/" in rest else "")  # hdfs://host:port/path


def join(directory, *names):
    if is_remote(directory):
        return posixpath.join(directory, *names)
    return os.path.join(directory, *names)


def basename(path):
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def _info(path):
    fs, inner = filesystem(path)
    return fs.get_file_info(inner)


def exists(path):
    if not is_remote(path):
        return os.path.exists(path)
    return _info(path).type != pafs.FileType.NotFound


def isfile(path):
    if not is_remote(path):
        return os.path.isfile(path)
    return _info(path).type == pafs.FileType.File


def isdir(path):
    if not is_remote(path):
        return os.path.isdir(path)
    return _info(path).type == pafs.FileType.Directory


def file_stamp(path):
    """``[absolute path, size, modification time in whole seconds]``: what tells a
    re-run that an input changed."""
    if not is_remote(path):
        st = os.stat(path)
        return [absolute(path), st.st_size, int(st.st_mtime)]
    info = _info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(path)
    return [path, info.size, int(info.mtime.timestamp()) if info.mtime else 0]


def check_file(path, flag=""):
    """Raise :class:`SnmInputError` unless ``path`` is a file: a directory and a missing
    path each get their own line (``flag``, e.g. ``"--heldout "``, names where it came from)."""
    if isdir(path):
        raise SnmInputError(f"{flag}{path}: a directory, expected a file")
    if not isfile(path):
        raise SnmInputError(f"{flag}{path}: no such file")


def _object_store(path):
    return is_remote(path) and path.split("://", 1)[0] in OBJECT_STORES


def makedirs(directory):
    """Create ``directory`` and its parents; nothing in an object store (a file's key
    makes its directory; pyarrow would write an empty marker object per level)."""
    if not is_remote(directory):
        os.makedirs(directory, exist_ok=True)
        return
    if _object_store(directory):
        return
    fs, inner = filesystem(directory)
    fs.create_dir(inner, recursive=True)


def listdir(directory):
    """Names of the files directly in ``directory`` (sorted; [] if it does not exist)."""
    if not is_remote(directory):
        try:
            return sorted(e.name for e in os.scandir(directory) if e.is_file())
        except FileNotFoundError:
            return []
    fs, inner = filesystem(directory)
    infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.File)


def glob(pattern):
    """Sorted paths of the files matching ``pattern`` (``*``, ``?``, ``[...]``, ``**``)."""
    if not is_remote(pattern):
        return sorted(p for p in globlib.glob(absolute(pattern), recursive=True)
                      if os.path.isfile(p))
    if not any(c in pattern for c in "*?["):
        return [pattern] if isfile(pattern) else []
    scheme = pattern.split("://", 1)[0]
    fs, inner = filesystem(pattern)
    fixed = inner[:min(inner.find(c) for c in "*?[" if c in inner)]
    base = fixed.rsplit("/", 1)[0] if "/" in fixed else fixed
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    return sorted(f"{scheme}://{i.path}" for i in infos
                  if i.type == pafs.FileType.File and fnmatch.fnmatchcase(i.path, inner))


def open_input(path, seekable=False):
    """``path`` open for binary reading (the file's bytes as stored).

    A remote file is a stream that fetches :data:`READ_BYTES` a request, whatever the
    reader's own read sizes (a decompressor's are a few KiB); with ``seekable``, a
    random-access file whose every read is one ranged GET.
    """
    if not is_remote(path):
        return open(path, "rb")
    fs, inner = filesystem(path)
    if seekable:
        return fs.open_input_file(inner)
    return fs.open_input_stream(inner, compression=None, buffer_size=READ_BYTES)


@contextlib.contextmanager
def open_output(path):
    """``path`` open for binary writing in place (for scratch files that nothing
    names until they are complete; everything else goes through :func:`atomic_output`).
    A remote file is written as :func:`atomic_output` writes it."""
    with resource_errors(path):
        if not is_remote(path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "wb") as f:
                yield f
            return
        with remote_output(*filesystem(path)) as f:
            yield f


@contextlib.contextmanager
def atomic_output(path, direct=False, open_local=None):
    """A binary file open for writing whose content appears at ``path`` only when
    the block completes; a full disk is an :class:`SnmStageError` naming ``path``.
    ``direct``: a local file is written around the page cache
    (:mod:`snm_core.io.direct`, for a large output this process does not read back).
    ``open_local``: how a local file's temporary name is opened, a context manager of
    it yielding the file (a scratch's :class:`~snm_core.io.file_pool.FilePool`).

    Locally: a temporary name in the same directory, then a rename.  Remotely: one
    stream to ``path`` itself (an object store shows the object when the upload
    completes).  Its first :data:`~snm_core.io.atomic_files.PART_BYTES` are held here,
    so a block that fails before writing more sends nothing and leaves an earlier object
    at ``path`` as it was.  Beyond that the stream is a multipart upload, which pyarrow cannot abort
    (it completes the upload when the stream is closed, whatever happened): a block
    that fails then has its partial object deleted at once, and with it any earlier
    one.  A killed process never completes its upload, so it leaves no object (S3
    keeps the parts of an unfinished upload until a bucket lifecycle rule,
    ``AbortIncompleteMultipartUpload``, removes them).
    """
    if is_remote(path):
        output = remote_output(*filesystem(path))
    else:
        output = local_atomic_output(
            path, open_local or (lambda tmp: direct_io.open_writer(tmp, direct)))
    with resource_errors(path), output as f:
        yield f


def remove_temporaries(directory):
    """Remove the temporary files (``*.tmp``) under a local stage directory: what a writer
    killed outright (SIGKILL, a lost machine) left, before the stage runs again.  The
    run's lock keeps any other writer out of it."""
    if is_remote(directory) or not os.path.isdir(directory):
        return
    for root, _, names in os.walk(directory):
        for name in names:
            if name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(root, name))


def write_bytes(data, path):
    with atomic_output(path) as f:
        f.write(data)


def write_text(text, path):
    write_bytes(text.encode("utf-8"), path)


def write_json(obj, path):
    write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", path)


def read_bytes(path):
    """A file's bytes (remotely: one HEAD and one GET)."""
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    fs, inner = filesystem(path)
    with fs.open_input_file(inner) as f:
        return f.read()  # one ranged GET of the whole size (a stream reads 256 KiB a GET)


def read_text(path):
    return read_bytes(path).decode("utf-8")


def read_json(path):
    return json.loads(read_text(path))


def write_npy(array, path):
    """``np.save`` to ``path``, atomically, without a copy of the array in memory."""
    import numpy as np

    with atomic_output(path) as f:
        np.save(f, array)


def read_npy(path):
    """An ``.npy`` file read whole into memory."""
    import numpy as np

    if not is_remote(path):
        return np.load(path)
    return np.load(io.BytesIO(read_bytes(path)))


class _Digesting(io.RawIOBase):
    """A file being written whose bytes also go to a digest (``update``)."""

    def __init__(self, file, digest):
        super().__init__()
        self.file, self.digest = file, digest

    def writable(self):
        return True

    def write(self, data):
        self.digest.update(data)
        return self.file.write(data)


def write_parquet(table, path, digest=None):
    """Write a table as Parquet, atomically, straight to the file (no copy in memory);
    ``digest``: fed the file's bytes as they are written (its manifest checksum, taken
    where the file is made instead of read back).

    Encodings by column (chosen on count buckets; benchmarks/README.md, "Figures
    behind the code"):

    * ``feature``, the hashed keys a table is sorted by: deltas, uncompressed
      (nearly all distinct, so a dictionary would be built only to be dropped,
      and zstd finds little in the deltas);
    * other integers (word ids, counts, types, a feature's words): deltas,
      uncompressed.  Dictionary encoding + zstd, or zstd on the deltas, save a
      few bytes for much more writing time;
    * lists of feature keys (held-out events: hashes repeated across rows),
      float64 (M_f*, repeated across features) and strings: dictionary, zstd;
    * float32 (M_fw): zstd alone, faster to write than with a dictionary, and
      smaller (few values repeat within a bucket).

    A table with feature keys keeps min/max statistics for them only (a key
    range is the one filter they serve; the others cost writing time).
    """
    keyed = "feature" in table.column_names
    delta, dictionary, plain = [], [], []
    for field in table.schema:
        if field.name == "feature":
            continue
        is_list = pa.types.is_list(field.type)
        value_type = field.type.value_type if is_list else field.type
        # Options name Parquet leaf columns: a list column's values are "<name>.list.element".
        leaf = f"{field.name}.list.element" if is_list else field.name
        is_key_list = is_list and pa.types.is_uint64(value_type)
        if pa.types.is_integer(value_type) and not is_key_list:
            delta.append(leaf)
        elif pa.types.is_float32(value_type):
            plain.append(leaf)
        else:
            dictionary.append(leaf)
    if keyed:
        delta.append("feature")
    compression = {c: "none" for c in delta}
    compression.update({c: PARQUET_COMPRESSION for c in dictionary + plain})
    with atomic_output(path) as f:
        pq.write_table(table, f if digest is None else _Digesting(f, digest),
                       use_dictionary=dictionary, compression=compression,
                       column_encoding={c: "DELTA_BINARY_PACKED" for c in delta},
                       write_statistics=["feature"] if keyed else True)


def read_parquet(path, columns=None):
    """One Parquet file as a table (``ParquetFile.read``: the dataset layer of
    ``pq.read_table`` holds more memory for nothing here).  A file that cannot be
    read (missing, truncated, damaged) is an ``SnmInputError`` naming it, one line."""
    from snm_core.io.errors import SnmInputError

    try:
        fs, inner = filesystem(path)
        with fs.open_input_file(inner) as f:
            source = f
            if fs is not _LOCAL and f.size() <= READ_BYTES:
                # One GET, not one for the footer and one per column chunk.
                source = pa.BufferReader(f.read())
            return pq.ParquetFile(source).read(columns=columns, use_threads=False)
    except (OSError, pa.ArrowException) as e:
        reason = " ".join("".join(c if c.isprintable() else " " for c in str(e)).split())
        raise SnmInputError(f"{path}: cannot read as Parquet ({reason[:300]}); the file is "
                            "damaged: re-run the stage that wrote it") from None


def drop_cached(path):
    """Let the page cache drop a local file this step has read for the last time
    (nothing for a remote one).  The kernel keeps a page read twice (written by one
    stage, read by the next) before a page written once: without this, the files a
    stage consumed would push out the file it writes, which the next stage reads."""
    if is_remote(path) or not hasattr(os, "posix_fadvise"):
        return
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def remove_file(path):
    """Delete ``path`` if it exists."""
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    fs, inner = filesystem(path)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(inner)


def free_bytes(path):
    """Free bytes of the local file system that holds (or will hold) ``path``; None for
    object storage."""
    if is_remote(path):
        return None
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def remove_tree(directory):
    """Delete a directory and everything under it, if it exists."""
    if not is_remote(directory):
        shutil.rmtree(directory, ignore_errors=True)
        return
    fs, inner = filesystem(directory)
    if fs.get_file_info(inner).type != pafs.FileType.NotFound:
        fs.delete_dir(inner)


def remove_stale(directory, keep, patterns):
    """Delete files in ``directory`` matching ``patterns`` that are not in ``keep``."""
    for name in listdir(directory):
        if name not in keep and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            remove_file(join(directory, name))


def link_or_copy(source, path):
    """Make ``path`` a file with ``source``'s bytes, atomically: a hard link where both
    are on one local file system (no bytes written), else a streamed copy (remotely a
    multipart upload, never a server-side copy, which S3 caps at 5 GB).  Writers of
    stage files replace them by rename, never in place, so the two names stay equal."""
    if not is_remote(source) and not is_remote(path):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
        try:
            with resource_errors(path):
                os.link(source, tmp)
        except OSError:  # another file system, or links not allowed: copy
            pass
        else:
            os.replace(tmp, path)
            with contextlib.suppress(FileNotFoundError):  # rename between links of one file
                os.unlink(tmp)                            # leaves both names
            return
    try:
        src = open_input(source)
    except FileNotFoundError:
        raise SnmInputError(f"{source}: not found; re-run the stage that wrote it") from None
    with src, atomic_output(path) as dst:
        shutil.copyfileobj(src, dst, READ_BYTES)
