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

Model directory (``snm apply``): two tables, each bucket of them stored as two
files of equal rows, the rows and the adjusted values beside them
(:mod:`snm_core.io.model_files`)::

    links-BBBBB-of-NNNNN.parquet     the count's links file (feature, word, count;
                                     the rest unread)
    m-BBBBB-of-NNNNN.parquet         m float32: M_fw of each of those links
    features-BBBBB-of-NNNNN.parquet  the count's features file
    m_star-BBBBB-of-NNNNN.parquet    m_star float64: M_f* of each of those features

with ``vocab.txt``, ``theta.npy``, ``config.cfg``, ``model_card.md`` and ``compact/``
(numpy arrays for fast, memory-mapped loading).  Read together they are the tables
:data:`MATRIX` and :data:`MODEL_FEATURES`.

Bucket b holds the features whose key lies in the b-th of N equal key ranges
(:func:`snm_core.io.key_ranges.bucket_of`), with all their links, so the files in
bucket order form one table sorted by feature.
"""


import pyarrow as pa

from snm_core.io import storage
from snm_core.io.errors import SnmInputError

FORMAT_VERSION = 2  # 2: the model's values beside the count's files
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
MODEL_LINKS = pa.schema(list(LINKS)[:3])
M_VALUES = pa.schema([("m", pa.float32())])
M_STAR_VALUES = pa.schema([("m_star", pa.float64())])
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


def check_columns(path, found, schema, columns=None, remedy=""):
    """Raise :class:`SnmInputError` unless the Arrow schema ``found`` (of the file ``path``)
    has ``schema``'s columns (or the named ``columns`` of it) with their types;
    ``remedy``, if given, ends the message ("; re-run 'snm count'")."""
    for name in columns or schema.names:
        want = schema.field(name).type
        index = found.get_field_index(name)
        if index < 0:
            raise SnmInputError(f"{path}: column {name!r} is missing{remedy}")
        if found.field(index).type != want:
            raise SnmInputError(f"{path}: column {name!r} has type {found.field(index).type}, "
                                f"expected {want}{remedy}")


def read_table(path, schema, columns=None):
    """Read a Parquet file and check it has ``schema``'s columns with their types."""
    try:
        table = storage.read_parquet(path, columns=columns)
    except (OSError, pa.ArrowException) as e:
        raise SnmInputError(f"{path}: cannot read as Parquet ({one_line(e)})") from None
    check_columns(path, table.schema, schema, columns)
    return table


def read_tables(directory, manifest, prefix, schema, columns=None):
    """Concatenate the manifest's ``prefix-*.parquet`` files in bucket order."""
    names = sorted(n for n in manifest["files"] if n.startswith(prefix + "-"))
    tables = [read_table(storage.join(directory, n), schema, columns) for n in names]
    if not tables:
        return schema.empty_table() if columns is None else pa.schema(
            [schema.field(c) for c in columns]).empty_table()
    return pa.concat_tables(tables)
