"""The rows of a model's matrix M for sampling: one memory-mapped CSR in feature-key order.

``snm sample`` draws a feature of a history, then a word of its row
(:mod:`snm_core.sample.sample_loops`).  The model's buckets
(:mod:`snm_core.io.model_files`) are key ranges sorted by (feature, word), so read
in bucket order they give the rows in key order, a bucket at a time: memory
holds one bucket, whatever the model's size.  Written to ``.npy`` files:

* ``records``, uint64 (3 (n_f + 1),): per feature its key, its first link and
  M_f* (float64 bits: the sum of its row's M_fw), then a sentinel whose first
  link is n_l;
* ``index``, int32 (int64 past 2^31 features) (2^bits + 1,): the KeyIndex over
  the keys (:class:`snm_core.scoring.layouts.hashed_tables.KeyIndex`);
* ``links``, uint64 (2 n_l,): the rows' alias tables
  (:func:`snm_core.sample.sample_loops.alias_rows`), per link a threshold
  (float64 bits), then its word and its alias word (uint32 each).

26 bytes a feature and 16 a link.  Finding a feature reads its index slot and
its record, and drawing a word of its row reads one link.

The directory is a cache of the Parquet tables, like ``compact/``: a local
model keeps it as ``MODEL/sample_rows/`` (a model directory that cannot be
written, or a remote one, under :func:`snm_core.io.local_copies.cache_directory`),
and it is rebuilt when the model's manifest changes.
"""

import hashlib
import math
import os
import shutil

import numpy as np

from snm_core.io import local_copies, model_files, storage, tables
from snm_core.io.errors import SnmInputError, resource_errors
from snm_core.scoring.layouts.hashed_tables import KeyIndexWriter, index_bits
from snm_core.scoring.layouts.npy import NpyWriter, load_checked
from snm_core.sample.sample_loops import RECORD, alias_rows

ROWS = "sample_rows"
ROWS_FILES = ("records", "index", "links")
#: Version of the files above (the cache's manifest ``layout``); another is rebuilt.
ROWS_LAYOUT = 2


class ModelRows:
    """The memory-mapped rows of a model (see the module docstring).

    Attributes
    ----------
    records : uint64 (3 (n_f + 1),); masses : its float64 view (M_f* at 3p + 2)
    index : KeyIndex start array; shift : np.uint64, 64 - its bits
    links : uint64 (2 n_l,); thresholds : its float64 view
    """

    def __init__(self, arrays):
        self.records = arrays["records"]
        self.masses = self.records.view(np.float64)
        self.index = arrays["index"]
        self.shift = np.uint64(64 - int(round(math.log2(len(self.index) - 1))))
        self.links = arrays["links"]
        self.thresholds = self.links.view(np.float64)

    @property
    def parts(self):
        """What :meth:`snm_core.sample.sample_loops.Rows.of` takes, in its order."""
        return (self.records, self.index, self.shift, self.links)


def rows_directory(model_dir):
    """Where the rows of ``model_dir`` are kept: ``MODEL/sample_rows`` if the model is a
    local directory this process may write, else a directory of the local cache."""
    if not storage.is_remote(model_dir) and os.access(model_dir, os.W_OK):
        return os.path.join(model_dir, ROWS)
    name = storage.absolute(model_dir).rstrip("/")
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:24]
    return os.path.join(local_copies.cache_directory(), f"{digest}-{ROWS}")


def load_rows(model_dir, manifest_bytes, manifest, say=lambda message: None):
    """The :class:`ModelRows` of a model, built first unless its cache is current.

    Parameters
    ----------
    model_dir : str, local path or URL of a model directory (checked by the caller)
    manifest_bytes : bytes of its ``manifest.json`` (the cache's identity)
    manifest : dict, the same parsed
    say : callable taking a progress message
    """
    directory = rows_directory(model_dir)
    identity = hashlib.sha256(manifest_bytes).hexdigest()
    cached = os.path.join(directory, tables.MANIFEST)
    current = False
    if os.path.isfile(cached):
        stored = storage.read_json(cached)
        current = stored.get("model") == identity and stored.get("layout") == ROWS_LAYOUT
    if not current:
        say(f"building the rows of {model_dir} in {directory}")
        _build_replacing(model_dir, manifest, directory, identity)
    n_f, n_l = manifest["totals"]["features"], manifest["totals"]["links"]
    expected = {"records": (np.uint64, (RECORD * (n_f + 1),)),
                "index": ((np.int32, np.int64), ((1 << index_bits(n_f)) + 1,)),
                "links": (np.uint64, (2 * n_l,))}
    return ModelRows(load_checked(directory, ROWS_FILES, expected))


def _build_replacing(model_dir, manifest, directory, identity):
    """Build into a directory of this process's own, then put it in place (a concurrent
    build of the same rows loses nothing: the last rename wins, both are equal)."""
    staging = f"{directory}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        with resource_errors(staging):
            build_rows(model_dir, manifest, staging)
            storage.write_json({"kind": "sample_rows", "format_version": tables.FORMAT_VERSION,
                                "layout": ROWS_LAYOUT, "model": identity,
                                "features": manifest["totals"]["features"],
                                "links": manifest["totals"]["links"]},
                               os.path.join(staging, tables.MANIFEST))
        old = f"{directory}.{os.getpid()}.old"
        if os.path.exists(directory):
            os.rename(directory, old)
        os.rename(staging, directory)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build_rows(model_dir, manifest, directory):
    """Write the rows' ``.npy`` files into the local ``directory``, a bucket at a time."""
    n_f, n_l = manifest["totals"]["features"], manifest["totals"]["links"]

    def output(name, dtype, n):
        return NpyWriter(os.path.join(directory, name + ".npy"), dtype, n)

    records = output("records", np.uint64, RECORD * (n_f + 1))
    links = output("links", np.uint64, 2 * n_l)
    index = KeyIndexWriter(n_f)
    index.out = output("index", index.dtype, (1 << index.bits) + 1)  # its slots, as they come
    links_done, last_key = 0, None
    num_buckets = int(manifest["num_buckets"])
    for bucket in range(num_buckets):
        features_path, _ = model_files.bucket_paths(model_dir, "features", bucket, num_buckets)
        links_path, _ = model_files.bucket_paths(model_dir, "matrix", bucket, num_buckets)
        feats = model_files.read_bucket(model_dir, "features", bucket, num_buckets,
                                        ["feature", "diversity"])
        matrix = model_files.read_bucket(model_dir, "matrix", bucket, num_buckets,
                                         ["feature", "word", "m"])
        keys = feats["feature"].to_numpy()
        diversity = feats["diversity"].to_numpy()
        if diversity.sum() != matrix.num_rows or not np.array_equal(
                np.repeat(keys, diversity), matrix["feature"].to_numpy()):
            raise SnmInputError(f"{links_path}: its rows are not those {features_path} "
                                "lists; re-run snm apply")
        if len(keys) and (np.any(keys[1:] <= keys[:-1])
                          or (last_key is not None and keys[0] <= last_key)):
            raise SnmInputError(f"{features_path}: features not in increasing "
                                f"key order across the buckets; re-run snm apply")
        alias, mass = alias_rows(matrix["m"].to_numpy().astype(np.float64), diversity,
                                 matrix["word"].to_numpy())
        block = np.empty((len(keys), RECORD), np.uint64)
        block[:, 0] = keys
        block[:, 1] = links_done + np.cumsum(diversity) - diversity
        block[:, 2] = mass.view(np.uint64)
        records.append(block.ravel())
        links.append(alias)
        index.add(keys)
        links_done += matrix.num_rows
        if len(keys):
            last_key = keys[-1]
    records.append(np.array([0, links_done, 0], np.uint64))
    index.finish()
    return records.close() + links.close() + index.out.close()
