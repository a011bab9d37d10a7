"""A model directory's two tables, each bucket stored as two files of equal rows.

``matrix`` (:data:`~snm_core.io.tables.MATRIX`) is ``links-B`` (feature, word,
count) with ``m-B`` (M_fw) beside it; ``features``
(:data:`~snm_core.io.tables.MODEL_FEATURES`) is ``features-B`` with ``m_star-B``
(M_f*).  ``snm apply`` hard-links the count's links and features files into the
model and writes only the values: the count's rows, a feature's words above all,
are never decoded and encoded again.  A pruned model writes all four files.

Readers name the logical table and its columns; this module reads the columns
from the file that holds them and checks the two files' rows agree.
"""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snm_core.io import storage, tables
from snm_core.io.errors import SnmInputError

#: Table -> ((rows file prefix, its schema), (values file prefix, its schema)).
PARTS = {
    "matrix": (("links", tables.MODEL_LINKS), ("m", tables.M_VALUES)),
    "features": (("features", tables.FEATURES), ("m_star", tables.M_STAR_VALUES)),
}
SCHEMAS = {"matrix": tables.MATRIX, "features": tables.MODEL_FEATURES}
#: Every bucket file a model directory may hold (``matrix-*``: an older release's).
PATTERNS = ["links-*.parquet", "m-*.parquet", "features-*.parquet", "m_star-*.parquet",
            "matrix-*.parquet"]


def file_names(num_buckets):
    """The bucket files of a model of ``num_buckets`` buckets, sorted."""
    return sorted(tables.bucket_file(prefix, b, num_buckets)
                  for parts in PARTS.values() for prefix, _ in parts for b in range(num_buckets))


def bucket_paths(model_dir, table, bucket, num_buckets):
    """``(rows file, values file)`` of one bucket of ``table``."""
    rows_path, _, values_path, _ = _files(model_dir, table, bucket, num_buckets)
    return rows_path, values_path


def _files(model_dir, table, bucket, num_buckets):
    """``(rows path, rows schema, values path, values schema)`` of one bucket."""
    (rows_prefix, rows_schema), (values_prefix, values_schema) = PARTS[table]
    rows_path, values_path = (storage.join(model_dir, tables.bucket_file(p, bucket, num_buckets))
                              for p in (rows_prefix, values_prefix))
    return rows_path, rows_schema, values_path, values_schema


def _split(table, columns):
    """``columns`` (None: all) of ``table`` as (the rows file's, the value column or None)."""
    columns = list(SCHEMAS[table].names if columns is None else columns)
    value = PARTS[table][1][1].names[0]
    return [c for c in columns if c != value], (value if value in columns else None), columns


def read_bucket(model_dir, table, bucket, num_buckets, columns=None):
    """One bucket of ``table`` (``"matrix"`` or ``"features"``): its ``columns`` (None: all
    of the table's schema), checked, in that order."""
    rows_path, rows_schema, values_path, values_schema = _files(model_dir, table, bucket,
                                                                num_buckets)
    row_columns, value, columns = _split(table, columns)
    rows = tables.read_table(rows_path, rows_schema, row_columns)
    if value is None:
        return rows
    values = tables.read_table(values_path, values_schema)
    _check_rows(values_path, values.num_rows, rows_path, rows.num_rows)
    return rows.append_column(value, values[value]).select(columns)


def read_all(model_dir, manifest, table, columns=None):
    """Every bucket of ``table`` as one table, in bucket order: the whole table in
    memory, for tests and small models (the stages read a bucket at a time)."""
    num_buckets = int(manifest["num_buckets"])
    return pa.concat_tables([read_bucket(model_dir, table, b, num_buckets, columns)
                             for b in range(num_buckets)])


def bucket_batches(model_dir, table, bucket, num_buckets, columns, batch_size):
    """One bucket of ``table`` as record batches of at most ``batch_size`` rows with
    ``columns``; the value column, 4 or 8 bytes a row, is read whole."""
    rows_path, rows_schema, values_path, values_schema = _files(model_dir, table, bucket,
                                                                num_buckets)
    row_columns, value, columns = _split(table, columns)
    values = None
    if value is not None:
        values = tables.read_table(values_path, values_schema)[value].to_numpy()
    try:
        with storage.open_input(rows_path, seekable=True) as f:
            rows_file = pq.ParquetFile(f)
            tables.check_columns(rows_path, rows_file.schema_arrow, rows_schema, row_columns)
            if values is not None:
                _check_rows(values_path, len(values), rows_path, rows_file.metadata.num_rows)
            done = 0
            for batch in rows_file.iter_batches(batch_size, columns=row_columns,
                                                use_threads=False):
                if values is not None:
                    batch = pa.RecordBatch.from_arrays(
                        batch.columns + [pa.array(values[done:done + batch.num_rows])],
                        names=row_columns + [value]).select(columns)
                done += batch.num_rows
                yield batch
    except (OSError, pa.ArrowException) as e:
        raise SnmInputError(f"{rows_path}: cannot read as Parquet ({tables.one_line(e)}); "
                            "the file is damaged: re-run the stage that wrote it") from None


def bucket_chunks(model_dir, bucket, num_buckets, feature_columns, link_columns,
                  chunk_links):
    """``(features, links)`` of one bucket, about ``chunk_links`` links at a time (a
    feature's links never split; at least one chunk, empty for an empty bucket): the
    features' ``feature_columns`` (and ``diversity``) and their links' ``link_columns``,
    dicts of numpy arrays, but a pyarrow list array for the features' ``words``."""
    batch_size = max(1024, chunk_links // 4)
    columns = list(dict.fromkeys(list(feature_columns) + ["diversity"]))
    links = _Rows(bucket_batches(model_dir, "matrix", bucket, num_buckets, link_columns,
                                 batch_size),
                  bucket_paths(model_dir, "matrix", bucket, num_buckets)[0], link_columns)
    empty = pa.RecordBatch.from_pylist([], schema=pa.schema(
        [SCHEMAS["features"].field(c) for c in columns]))
    for batch in _at_least_one(bucket_batches(model_dir, "features", bucket, num_buckets,
                                              columns, batch_size), empty):
        features = {name: batch.column(name).to_numpy(zero_copy_only=False)
                    for name in columns if name != "words"}
        if "words" in columns:
            features["words"] = batch.column("words")
        yield features, links.take(int(features["diversity"].sum()))
    links.check_end()


def _at_least_one(batches, empty):
    found = False
    for batch in batches:
        found = True
        yield batch
    if not found:
        yield empty


class _Rows:
    """The link rows of a bucket's batches, ``n`` at a time."""

    def __init__(self, batches, path, columns):
        self.batches, self.path, self.columns = batches, path, list(columns)
        self.pending = {name: pa.array([], SCHEMAS["matrix"].field(name).type).to_numpy()
                        for name in self.columns}

    def take(self, n):
        parts, have = [self.pending], len(self.pending[self.columns[0]])
        while have < n:
            batch = next(self.batches, None)
            if batch is None:
                raise SnmInputError(f"{self.path}: fewer links than the features' "
                                    "diversities; re-run the stage that wrote it")
            parts.append({name: batch.column(name).to_numpy() for name in self.columns})
            have += batch.num_rows
        joined = {name: np.concatenate([p[name] for p in parts]) if len(parts) > 1
                  else parts[0][name] for name in self.columns}
        self.pending = {name: values[n:] for name, values in joined.items()}
        return {name: values[:n] for name, values in joined.items()}

    def check_end(self):
        if len(self.pending[self.columns[0]]) or next(self.batches, None) is not None:
            raise SnmInputError(f"{self.path}: more links than the features' diversities; "
                                "re-run the stage that wrote it")


def _check_rows(values_path, values_rows, rows_path, rows):
    if values_rows != rows:
        raise SnmInputError(f"{values_path} holds {values_rows:,} rows, {rows_path} "
                            f"{rows:,}; re-run the stage that wrote them")


def write_bucket(out_dir, bucket, num_buckets, features, matrix):
    """One bucket's four files from the tables ``features`` and ``matrix`` (a pruned
    model's)."""
    for table, data in (("features", features), ("matrix", matrix)):
        rows_path, rows_schema, values_path, values_schema = _files(out_dir, table, bucket,
                                                                    num_buckets)
        storage.write_parquet(data.select(rows_schema.names).cast(rows_schema), rows_path)
        storage.write_parquet(data.select(values_schema.names).cast(values_schema),
                              values_path)


def write_values(out_dir, bucket, num_buckets, m, m_star, new_digest):
    """One bucket's ``m`` and ``m_star`` files (numpy arrays) beside its rows; returns
    ``{file name: hex}`` of the two, each taken as it is written by a digest of
    ``new_digest`` (a checksum's constructor: the manifest's, which ``io`` cannot import)."""
    taken = {}
    for table, values in (("matrix", m), ("features", m_star)):
        _, _, values_path, schema = _files(out_dir, table, bucket, num_buckets)
        digest = new_digest()
        storage.write_parquet(pa.table([pa.array(np.asarray(values))], schema=schema),
                              values_path, digest)
        taken[storage.basename(values_path)] = digest.hexdigest()
    return taken
