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

Every write is atomic: the content goes to a temporary name in the same
directory (a dot file, which no stage lists) and is moved to its name when
complete (a rename locally; on an object store the final object appears in
one step), so a reader never sees half a file and a killed stage leaves no
partial output under a real name.  Writers take the data first and the path
second, as ``pyarrow.parquet.write_table`` and ``json.dump`` do.
"""

import contextlib
import fnmatch
import glob as globlib
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import tempfile
import threading
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from snm_core.io.errors import RESOURCE_ERRNOS, SnmStageError

#: Parquet compression for the columns that are compressed at all (zstd: ~3x
#: smaller than uncompressed on strings and floats, fast to decode).
PARQUET_COMPRESSION = "zstd"

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
                fs = pafs.S3FileSystem(**kwargs)
            else:
                fs = pafs.FileSystem.from_uri(f"{scheme}://{authority}")[0]
            _REMOTE[(scheme, authority)] = fs
    if scheme in ("s3", "gs", "gcs"):  # paths inside are "bucket/key"
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


def makedirs(directory):
    if not is_remote(directory):
        os.makedirs(directory, exist_ok=True)
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
    """``path`` open for binary reading (the file's bytes as stored); a remote file
    is a stream unless ``seekable``."""
    if not is_remote(path):
        return open(path, "rb")
    fs, inner = filesystem(path)
    if seekable:
        return fs.open_input_file(inner)
    return fs.open_input_stream(inner, compression=None)


#: numpy's ``tofile`` reports a short write without its errno.
_SHORT_WRITE = re.compile(r"^\d+ requested and \d+ written$")


def resource_error_message(error, path=None):
    """``"writing PATH: what ran out"`` for an OSError that means a full disk, a file
    size limit or a quota (or a short write, which is one of them); None for any other
    error."""
    if not isinstance(error, OSError):
        return None
    if error.errno in RESOURCE_ERRNOS:
        what = RESOURCE_ERRNOS[error.errno]
    elif error.errno is None and _SHORT_WRITE.match(str(error)):
        what = "a write stopped short (the disk is full or a file size limit was reached)"
    else:
        return None
    where = path or error.filename
    return (f"writing {where}: " if where else "") + what


@contextlib.contextmanager
def resource_errors(path):
    """Turn a full disk (or file size limit, or quota) while writing ``path`` into an
    :class:`SnmStageError` naming the path: a fault, not a bug."""
    try:
        yield
    except OSError as e:
        message = resource_error_message(e, path)
        if message is None:
            raise
        raise SnmStageError(message) from None


@contextlib.contextmanager
def open_output(path):
    """``path`` open for binary writing in place (for scratch files that nothing
    names until they are complete; everything else goes through :func:`atomic_output`)."""
    with resource_errors(path):
        if not is_remote(path):
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "wb") as f:
                yield f
            return
        fs, inner = filesystem(path)
        with fs.open_output_stream(inner, compression=None) as f:
            yield f


@contextlib.contextmanager
def atomic_output(path):
    """A binary file open for writing whose content appears at ``path`` only when
    the block completes (temporary name in the same directory, then a move); a full
    disk is an :class:`SnmStageError` naming ``path``."""
    with resource_errors(path), _atomic_output(path) as f:
        yield f


@contextlib.contextmanager
def _atomic_output(path):
    if not is_remote(path):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                                   dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return
    fs, inner = filesystem(path)
    directory, name = inner.rsplit("/", 1)
    tmp = f"{directory}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with fs.open_output_stream(tmp, compression=None) as f:
            yield f
        fs.move(tmp, inner)
    except BaseException:
        with contextlib.suppress(OSError):
            fs.delete_file(tmp)
        raise


@contextlib.contextmanager
def streamed_output(path):
    """A binary file open for writing an output of any size, which appears at ``path``
    only when the block completes.  Locally :func:`atomic_output`; a remote file is
    written straight to its name as one multipart upload (S3 makes the object visible
    when the upload completes, and a copy would be limited to 5 GB): if the block
    fails, what was uploaded is deleted."""
    if not is_remote(path):
        with atomic_output(path) as f:
            yield f
        return
    fs, inner = filesystem(path)
    with resource_errors(path):
        try:
            with fs.open_output_stream(inner, compression=None) as f:
                yield f
        except BaseException:
            # pyarrow completes the upload when the stream closes: remove the object
            with contextlib.suppress(OSError):
                fs.delete_file(inner)
            raise


def write_bytes(data, path):
    with atomic_output(path) as f:
        f.write(data)


def write_text(text, path):
    write_bytes(text.encode("utf-8"), path)


def write_json(obj, path):
    write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", path)


def read_bytes(path):
    with open_input(path) as f:
        return f.read()


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


def write_parquet(table, path):
    """Write a table as Parquet, atomically, straight to the file (no copy in memory).

    Encodings by column (measured on a kernel 5-gram count bucket):

    * ``feature``, the hashed keys a table is sorted by: deltas, uncompressed
      (nearly all distinct, so a dictionary would be built only to be dropped,
      and zstd found little in the deltas);
    * other integers (word ids, counts, types, a feature's words): deltas,
      uncompressed.  Dictionary encoding + zstd took 2-3x as long to write,
      for 5-15% fewer bytes; zstd on the deltas saved 4.5% of the bytes for
      10-20% more writing time;
    * lists of feature keys (held-out events: hashes repeated across rows),
      floats and strings: dictionary, zstd.

    A table with feature keys keeps min/max statistics for them only (a key
    range is the one filter they serve; 6% of the writing time).
    """
    keyed = "feature" in table.column_names
    delta, dictionary = [], []
    for field in table.schema:
        if field.name == "feature":
            continue
        is_list = pa.types.is_list(field.type)
        value_type = field.type.value_type if is_list else field.type
        # Options name Parquet leaf columns: a list column's values are "<name>.list.element".
        leaf = f"{field.name}.list.element" if is_list else field.name
        is_key_list = is_list and pa.types.is_uint64(value_type)
        (delta if pa.types.is_integer(value_type) and not is_key_list else dictionary).append(leaf)
    if keyed:
        delta.append("feature")
    compression = {c: "none" for c in delta}
    compression.update({c: PARQUET_COMPRESSION for c in dictionary})
    with atomic_output(path) as f:
        pq.write_table(table, f, use_dictionary=dictionary, compression=compression,
                       column_encoding={c: "DELTA_BINARY_PACKED" for c in delta},
                       write_statistics=["feature"] if keyed else True)


def read_parquet(path, columns=None):
    """One Parquet file as a table (``ParquetFile.read``: the dataset layer of
    ``pq.read_table`` held ~15 MiB more for nothing here).  A file that cannot be
    read (missing, truncated, damaged) is an ``SnmInputError`` naming it, one line."""
    from snm_core.io.errors import SnmInputError

    try:
        fs, inner = filesystem(path)
        with fs.open_input_file(inner) as f:
            return pq.ParquetFile(f).read(columns=columns, use_threads=False)
    except (OSError, pa.ArrowException) as e:
        reason = " ".join("".join(c if c.isprintable() else " " for c in str(e)).split())
        raise SnmInputError(f"{path}: cannot read as Parquet ({reason[:300]}); the file is "
                            "damaged: re-run the stage that wrote it") from None


def remove_file(path):
    """Delete ``path`` if it exists."""
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    fs, inner = filesystem(path)
    with contextlib.suppress(FileNotFoundError):
        fs.delete_file(inner)


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


def upload_tree(local_directory, path, last=None):
    """Copy a local directory's files to ``path`` (local or remote), each atomically;
    the file named ``last`` (a manifest) after all the others."""
    files = []
    for root, _, names in os.walk(local_directory):
        files += [os.path.relpath(os.path.join(root, n), local_directory) for n in names]
    for relative in sorted(files, key=lambda r: (r == last, r)):
        with open(os.path.join(local_directory, relative), "rb") as src, \
                atomic_output(join(path, relative.replace(os.sep, "/"))) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)


def cache_directory():
    """Where remote stage directories are copied for reading (``$SNM_CACHE``,
    else ``$XDG_CACHE_HOME/snm`` or ``~/.cache/snm``)."""
    root = os.environ.get("SNM_CACHE")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME")
                            or os.path.join(os.path.expanduser("~"), ".cache"), "snm")
    return root


def local_copy(directory, names, marker):
    """A local directory holding ``names`` (relative paths) of ``directory``.

    A local ``directory`` is returned as it is.  A remote one is copied into
    :func:`cache_directory` on first use and reused while its ``marker`` file
    (a manifest, written last by the stage) has the same bytes; the cached
    marker is written last too, so a copy cut short is redone.
    """
    if not is_remote(directory):
        return directory
    marker_bytes = read_bytes(join(directory, marker))
    digest = hashlib.sha256(directory.rstrip("/").encode("utf-8")).hexdigest()[:24]
    local = os.path.join(cache_directory(), digest)
    cached_marker = os.path.join(local, marker)
    if os.path.isfile(cached_marker):
        with open(cached_marker, "rb") as f:
            if f.read() == marker_bytes:
                return local
        os.unlink(cached_marker)
    for name in names:
        target = os.path.join(local, *name.split("/"))
        with open_input(join(directory, name)) as src, atomic_output(target) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    with atomic_output(cached_marker) as f:
        f.write(marker_bytes)
    return local
