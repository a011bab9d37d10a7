"""Schemas of the Parquet files between stages, and their validation.

Every stage directory holds a ``manifest.json`` written last (so its presence
means the stage finished) that lists its files; readers check the manifest
and the columns before using anything, and say which file is wrong.

Count directory (``snm count``)::

    manifest.json              config, tags, feature types, vocabulary fingerprint,
                               bucket count, file list, totals
    vocab.txt                  the vocabulary the word ids refer to
    links-BBBBB-of-NNNNN.parquet     feature uint64, word int32, count int64
                                     (C(f,w)), continuation int64 (distinct
                                     words seen before f followed by w, for
                                     types that have a one-word-longer type;
                                     else 0), sorted by (feature, word)
    features-BBBBB-of-NNNNN.parquet  feature uint64, tag int16, type int16,
                                     count int64 (C(f,*)), diversity int64
                                     (distinct words after f), words list<int32>
                                     (identity words, oldest first), sorted by feature

Model directory (``snm apply``): the count files' rows with the adjusted
values, ``matrix-*.parquet`` (feature, word, count, ``m`` float32: M_fw) and
``features-*.parquet`` (the count feature columns plus ``m_star`` float64:
M_f*), with ``vocab.txt``, ``theta.npy``, ``config.cfg``, ``model_card.md``
and ``compact/`` (numpy arrays for fast, memory-mapped loading).

Bucket b holds the features whose key lies in the b-th of N equal key ranges
(:func:`snm_core.text.hashing.bucket_of`), with all their links, so the files in
bucket order form one table sorted by feature.
"""

import json

import pyarrow as pa

from snm_core.io import storage
from snm_core.io.errors import SnmInputError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"

LINKS = pa.schema([("feature", pa.uint64()), ("word", pa.int32()), ("count", pa.int64()),
                   ("continuation", pa.int64())])
FEATURES = pa.schema([("feature", pa.uint64()), ("tag", pa.int16()), ("type", pa.int16()),
                      ("count", pa.int64()), ("diversity", pa.int64()),
                      ("words", pa.list_(pa.int32()))])
WORD_COUNTS = pa.schema([("word", pa.string()), ("count", pa.int64())])
EVENTS = pa.schema([("file", pa.int16()), ("line", pa.int64()), ("target", pa.int32()),
                    ("features", pa.list_(pa.uint64()))])
MATRIX = pa.schema([("feature", pa.uint64()), ("word", pa.int32()), ("count", pa.int64()),
                    ("m", pa.float32())])
MODEL_FEATURES = pa.schema(list(FEATURES) + [pa.field("m_star", pa.float64())])
SMALL_M = pa.schema([("feature", pa.uint64()), ("word", pa.int32()), ("count", pa.int64()),
                     ("continuation", pa.int64()), ("feature_count", pa.int64()),
                     ("diversity", pa.int64()), ("tag", pa.int16()), ("type", pa.int16())])


def one_line(error, limit=300):
    """``str(error)`` on one line of printable characters, at most ``limit`` long: a
    library's message (pyarrow's may hold newlines and control bytes) inside ours."""
    text = " ".join("".join(c if c.isprintable() else " " for c in str(error)).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def bucket_file(prefix, bucket, num_buckets):
    return f"{prefix}-{bucket:05d}-of-{num_buckets:05d}.parquet"


#: What each manifest kind is, and the command that writes it (for error messages).
KINDS = {"vocab": ("a vocabulary directory", "snm vocab"),
         "count": ("a count directory", "snm count"),
         "join": ("a join directory", "snm join"),
         "fit": ("a fit directory", "snm fit"),
         "model": ("a model directory", "snm apply"),
         "loglinear": ("a log-linear model directory", "snm train --family loglinear"),
         "compact": ("a model's compact/ directory", "snm apply")}


def writer(kind):
    """The command that writes a ``kind`` directory: ``"snm apply"`` for ``"model"``."""
    return KINDS.get(kind, (None, f"snm {kind}"))[1]


def check_manifest(manifest, path, kind):
    """Raise :class:`SnmInputError` unless ``manifest`` (from ``path``) is a current ``kind``'s."""
    name, command = KINDS.get(kind, (f"a {kind} directory", writer(kind)))
    found = manifest.get("kind") if isinstance(manifest, dict) else None
    if found != kind:
        if found in KINDS:
            what = f"{KINDS[found][0]} (the output of '{KINDS[found][1]}')"
        else:
            what = "not an snm stage's manifest" if found is None else \
                f"of unknown kind {found!r}"
        raise SnmInputError(f"{path}: this is {what}, expected '{command}' output "
                            f"({name}); check the path")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise SnmInputError(f"{path}: format version {version} is newer than this release "
                                f"reads ({FORMAT_VERSION}); upgrade snm, or re-run "
                                f"'{command}' with this release")
        raise SnmInputError(f"{path}: format version {version}, this release reads version "
                            f"{FORMAT_VERSION}; re-run '{command}'")


def read_manifest(directory, kind):
    """Load and check ``directory/manifest.json`` of a stage of the given kind
    (local or remote, :mod:`snm_core.io.storage`); every file it lists must exist.

    Raises
    ------
    SnmInputError
        If the directory is not a finished stage output of that kind.
    """
    path = storage.join(directory, MANIFEST)
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise SnmInputError(f"{directory}: no {MANIFEST}; not the output of a finished "
                            f"'{writer(kind)}' run (re-run that stage)") from None
    except OSError as e:
        raise SnmInputError(f"{path}: cannot read ({e})") from None
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SnmInputError(f"{path}: not valid JSON ({e})") from None
    check_manifest(manifest, path, kind)
    present = set(storage.listdir(directory))
    for name in manifest.get("files", []):
        if name not in present and not storage.isfile(storage.join(directory, name)):
            raise SnmInputError(f"{storage.join(directory, name)} is listed in {MANIFEST} but "
                                f"missing; re-run '{writer(kind)}'")
    return manifest


def read_table(path, schema, columns=None):
    """Read a Parquet file and check it has ``schema``'s columns with their types."""
    try:
        table = storage.read_parquet(path, columns=columns)
    except (OSError, pa.ArrowException) as e:
        raise SnmInputError(f"{path}: cannot read as Parquet ({one_line(e)})") from None
    for name in columns or schema.names:
        want = schema.field(name).type
        if name not in table.column_names:
            raise SnmInputError(f"{path}: column {name!r} is missing")
        if table.schema.field(name).type != want:
            raise SnmInputError(f"{path}: column {name!r} has type "
                                f"{table.schema.field(name).type}, expected {want}")
    return table


def read_tables(directory, manifest, prefix, schema, columns=None):
    """Concatenate the manifest's ``prefix-*.parquet`` files in bucket order."""
    names = sorted(n for n in manifest["files"] if n.startswith(prefix + "-"))
    tables = [read_table(storage.join(directory, n), schema, columns) for n in names]
    if not tables:
        return schema.empty_table() if columns is None else pa.schema(
            [schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(tables)
