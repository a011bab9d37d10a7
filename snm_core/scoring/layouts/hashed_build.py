"""Building the hashed layout's ``compact/`` from a model's Parquet tables, by external sort.

Memory stays within the working memory given whatever the model size: arrays
are written to their ``.npy`` files in order
(:class:`snm_core.scoring.layouts.npy.NpyWriter`); feature keys arrive sorted
(bucket files are key ranges), and links are sorted by link key in passes:

1. *scatter*: each bucket's links, a slice at a time, appended as records (link
   key, M_fw, c(w|f)) to one file per key range (the key's top bits), at most
   ``2**FAN_OUT_BITS`` files;
2. *scatter again* (only past ``2**FAN_OUT_BITS`` partitions, about 1G links at
   the largest partition): each file split by the next bits, a slice at a time,
   into at most ``2**FAN_OUT_BITS`` files, until a partition holds about
   ``partition_links`` links; so at most ``2**FAN_OUT_BITS + 1`` scratch files are
   open at once at any size;
3. *sort*: each partition sorted alone (two at a time) and written in order.

Links whose whole link keys are equal (about n^2 / 2^65 pairs) meet in one
partition (``shared_links`` in the manifest counts them); their entries get :data:`~snm_core.scoring.layouts.hashed_tables.SHARED` and,
in a last pass over the tables that runs only then, their (key, feature, word,
M, c) go to ``link_collisions``.  The arrays depend on nothing but the model:
not on the partitions, the passes or the memory.
"""

import functools
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from snm_core.io import model_files, storage
from snm_core.io.memory import MemoryBudget
from snm_core.io.progress import Progress
from snm_core.io.radix import sort_records
from snm_core.scoring.layouts.hashed import (COLLISION, COMPACT_FILES, COMPACT_LAYOUT,
                                           PACKED_FILES, PACKED_LAYOUT, link_key_mask)
from snm_core.scoring.layouts.hashed_tables import (CODEBOOK_SAMPLE, SHARED, EntryTableWriter,
                                                  fit_codebook)
from snm_core.scoring.layouts.hashed_build_kernels import RECORD, fill_records, group_by_bits
from snm_core.scoring.layouts.npy import NpyWriter, known_checksums
from snm_core.stages import manifests

#: Scratch files a scatter pass writes at once is at most 2**FAN_OUT_BITS.
FAN_OUT_BITS = 8
#: Links of a partition at most, whatever the memory (larger ones sort no faster).
MAX_PARTITION_LINKS = 1 << 22
#: Links of a partition at least (below, a budget too small is an error): small, so that a
#: budget that fits the rest of a stage fits the build too (more scatter levels, the same arrays).
MIN_PARTITION_LINKS = 1 << 12
#: Working memory a link of a partition: two partitions sorted at once (each its
#: records and the sort's spare ones: 32 bytes a link) and the sorted one being
#: written; a scatter slice needs less.
PARTITION_LINK_BYTES = 2 * 32 + 16
#: Buckets read ahead, each on its own thread, while one is scattered: reading is
#: the pass's slowest part.
READERS = 2
#: Memory a link of a bucket being read (its matrix columns and share of the feature
#: rows, as read: 16 bytes and a share of a 42-byte feature row; its feature row: 4; its
#: records, feature rows and words: 28).  READERS + 1 are held: one scattered while
#: the next ones are read.
BUCKET_LINK_BYTES = (READERS + 1) * (48 + 4 + 28)


def memory_parts(manifest):
    """The fixed parts of the build's working memory (``{what: bytes}``): the model
    buckets as read (``READERS + 1``) and the smallest partitions."""
    bucket = manifest["totals"]["links"] / max(manifest.get("num_buckets") or 1, 1)
    return {"model buckets as read": int(bucket * BUCKET_LINK_BYTES),
            "the smallest sort partitions": MIN_PARTITION_LINKS * PARTITION_LINK_BYTES}


def partition_links(manifest, working):
    """Links of a sort partition within ``working`` bytes (:func:`memory_parts` held)."""
    left = working - memory_parts(manifest)["model buckets as read"]
    return int(min(MAX_PARTITION_LINKS, max(MIN_PARTITION_LINKS, left // PARTITION_LINK_BYTES)))


def scatter_levels(n_links, partition, fan_out_bits=FAN_OUT_BITS):
    """The key bits each scatter pass splits on, so that a partition holds about
    ``partition`` links: ``[8, 3]`` is 256 files, each split into 8."""
    total = max(0, int(math.ceil(math.log2(max(n_links / partition, 1)))))
    levels = [min(fan_out_bits, total)]
    while sum(levels) < total:
        levels.append(min(fan_out_bits, total - sum(levels)))
    return levels


class Scatter:
    """Records appended to ``2**bits`` files by key bits ``[64 - shift - bits, 64 - shift)``
    (in their order, so a file's records keep theirs)."""

    def __init__(self, paths, shift, bits):
        self.paths, self.shift, self.bits = paths, np.uint64(shift), bits
        self.files = [open(path, "wb") for path in paths]

    def add(self, records):
        if self.bits == 0:
            self.files[0].write(memoryview(records).cast("B"))
            return
        rows = records.view(np.uint64).reshape(-1, 2)
        grouped = np.empty_like(rows)
        bounds = group_by_bits(rows, self.shift, self.bits, grouped)
        # Buffered writes (ndarray.tofile makes a system call each: 20 us).
        grouped = memoryview(grouped).cast("B")
        size = RECORD.itemsize
        for p in np.flatnonzero(np.diff(bounds)):
            self.files[p].write(grouped[bounds[p] * size:bounds[p + 1] * size])

    def close(self):
        for f in self.files:
            f.close()


def _bucket_slices(model_dir, bucket, num_buckets, slice_links, mask,
                   columns=("word", "m", "count")):
    """``(features table, slices)`` of one bucket: slices of its link rows as ``(feature
    rows, RECORD array, words)``, at most ``slice_links`` each."""
    feats = model_files.read_bucket(model_dir, "features", bucket, num_buckets,
                                    ["feature", "type", "count", "diversity", "m_star"])
    matrix = model_files.read_bucket(model_dir, "matrix", bucket, num_buckets, list(columns))
    for table in ("features", "matrix"):  # compact/, written next, is what scoring reads
        for path in model_files.bucket_paths(model_dir, table, bucket, num_buckets):
            storage.drop_cached(path)
    keys, counts = feats["feature"].to_numpy(), feats["count"].to_numpy()
    # Each link's feature row, from the features' diversities (its links follow them).
    feature_rows = np.repeat(np.arange(len(keys), dtype=np.int32), feats["diversity"].to_numpy())
    word, m, count = (matrix[c].to_numpy() for c in columns)

    def slices():
        for lo in range(0, len(word), slice_links):
            hi = min(lo + slice_links, len(word))
            rows = feature_rows[lo:hi]
            records = fill_records(keys, counts, rows, word[lo:hi], m[lo:hi], count[lo:hi], mask)
            yield rows, records, word[lo:hi]
    return feats, slices()


def _bucket_records(model_dir, bucket, num_buckets, slice_links, mask, empty_types):
    """One bucket read for the scatter: ``(feature keys, M_f*, slices)``, each slice
    ``(RECORD array, the words of its links of the empty context)``."""
    feats, slices = _bucket_slices(model_dir, bucket, num_buckets, slice_links, mask)
    empty = np.isin(feats["type"].to_numpy(), empty_types)
    return (feats["feature"].to_numpy(), feats["m_star"].to_numpy(),
            [(records, words[empty[rows]]) for rows, records, words in slices])


def _codebooks(model_dir, num_buckets):
    """The packed tables' codebooks (features' M_f*, links' M_fw;
    :func:`snm_core.scoring.layouts.hashed_tables.fit_codebook`), each fitted on a sample
    of its values drawn as often as scoring reads them: a feature's M_f* by its count
    C(f,*) (every event it fires in adds it), a link's M_fw by C(f,w).  Unweighted, the
    few frequent features, whose M_f* is in nearly every event's sums, fell in the
    sparse tail of the values and were read with errors of several percent."""
    return tuple(fit_codebook(_usage_sample(model_dir, num_buckets, table, value))
                 for table, value in (("features", "m_star"), ("matrix", "m")))


def _usage_sample(model_dir, num_buckets, table, value):
    """About :data:`CODEBOOK_SAMPLE` of a model table's ``value`` column, each row drawn
    in proportion to its ``count`` (systematic sampling over every bucket, in order: a
    row of count c is drawn about c / step times)."""
    total = sum(float(model_files.read_bucket(model_dir, table, b, num_buckets,
                                              ["count"])["count"].to_numpy().sum())
                for b in range(num_buckets))
    step = max(total / CODEBOOK_SAMPLE, 1e-300)
    drawn, before = [], 0.0
    for b in range(num_buckets):
        rows = model_files.read_bucket(model_dir, table, b, num_buckets, [value, "count"])
        ends = before + np.cumsum(rows["count"].to_numpy(), dtype=np.float64)
        starts = np.concatenate([[before], ends[:-1]])
        drawn.append(np.repeat(rows[value].to_numpy(),
                               (np.floor(ends / step) - np.floor(starts / step)).astype(np.int64)))
        before = ends[-1] if len(ends) else before
    return np.concatenate(drawn + [np.zeros(0)])


def _sort_partition(path, work):
    """A scratch partition's records sorted by key (the file is removed)."""
    records = np.fromfile(path, dtype=RECORD)
    os.remove(path)
    # Links of equal keys (each marked shared after) may end in any order.
    sort_records(records, work)
    return records


def build_hashed(model_dir, manifest, directory, memory=None, progress=None, partition=None,
                 fan_out_bits=FAN_OUT_BITS, link_key_bits=64, settle_every_link=None,
                 packed=False):
    """:func:`snm_core.scoring.compact.compile_model` into the local ``directory``;
    ``packed``: the packed layout (3-byte entries, no c(w|f); ``hashed.PACKED_LAYOUT``).

    ``memory``: bytes of working memory (default: the default budget's, less the
    process's); ``progress(what, total, unit)``: a :class:`Progress` a pass;
    ``partition`` (links), ``fan_out_bits`` and ``link_key_bits``: tests' hooks, many
    partitions, scatter levels or collisions on a small model; ``settle_every_link``
    (default: with keys cut short) puts every link in the collisions.
    """
    if memory is None:
        memory = MemoryBudget.parse().working()
    progress = progress or (lambda what, total=None, unit="link":
                            Progress(f"compact {'packed' if packed else 'hashed'}: {what}",
                                     total=total, unit=unit))
    n_features, n_links = manifest["totals"]["features"], manifest["totals"]["links"]
    partition = partition or partition_links(manifest, memory)
    mask = link_key_mask(link_key_bits)
    scratch = os.path.join(directory, "partitions.tmp")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(scratch)
    num_buckets = int(manifest["num_buckets"])
    buckets = range(num_buckets)
    levels = scatter_levels(n_links, partition, fan_out_bits)

    codebooks = _codebooks(model_dir, num_buckets) if packed else (None, None)
    # Pass 1: the tables, scattered by the keys' first bits; the feature table, seen words.
    paths = [os.path.join(scratch, f"{p:03x}") for p in range(1 << levels[0])]
    feature_table = EntryTableWriter(n_features, directory, "feature", packed=packed,
                                     codebook=codebooks[0])
    seen = np.zeros(manifest["vocabulary_size"], dtype=bool)
    empty_types = [i for i, name in enumerate(manifest["feature_types"]) if name == "0-gram"]
    scatter = Scatter(paths, 64 - levels[0], levels[0])
    # The next buckets are read and hashed on other threads (Parquet's reads and the
    # compiled loops release the GIL) while this one is scattered.
    read = functools.partial(_bucket_records, model_dir, num_buckets=num_buckets,
                             slice_links=partition, mask=mask, empty_types=empty_types)
    with ThreadPoolExecutor(READERS) as reader, progress("scatter", n_links) as shown:
        ahead = [reader.submit(read, name) for name in buckets[:READERS]]
        for i in range(len(buckets)):
            keys, m_star, slices = ahead[i].result()
            ahead[i] = None  # the bucket is let go once scattered
            if i + READERS < len(buckets):
                ahead.append(reader.submit(read, buckets[i + READERS]))
            feature_table.add(keys, m_star)
            for records, empty_words in slices:
                scatter.add(records)
                seen[empty_words] = True
                shown.update(len(records))
    scatter.close()
    sizes = feature_table.finish()

    # Pass 2 (past 2**fan_out_bits partitions): each file split by the next bits.
    for level, bits in enumerate(levels[1:], start=1):
        split = []
        with progress(f"scatter, level {level + 1}", n_links) as shown:
            for path in paths:
                children = [f"{path}.{q:03x}" for q in range(1 << bits)]
                scatter = Scatter(children, 64 - sum(levels[:level + 1]), bits)
                with open(path, "rb") as f:
                    while len(records := np.fromfile(f, RECORD, count=partition)):
                        scatter.add(records)
                        shown.update(len(records))
                scatter.close()
                os.remove(path)
                split += children
        paths = split

    # Pass 3: partitions sorted two at a time (the radix sort and the gathers release
    # the GIL) and written in order.
    link_table = EntryTableWriter(n_links, directory, "link", packed=packed,
                                  codebook=codebooks[1])
    link_c = None if packed else NpyWriter(os.path.join(directory, "link_c.npy"), np.float32,
                                           n_links)
    # With keys cut short (a test's hook), an absent link would find a present one of the
    # same short key: every link goes to the collisions, settled by (feature, word).
    everything_shared = link_key_bits < 64 if settle_every_link is None else settle_every_link
    shared_keys, shared_links = [], 0
    with ThreadPoolExecutor(2) as pool, progress("sort", n_links) as shown:
        scratches = [{}, {}]
        sorted_parts = [pool.submit(_sort_partition, paths[p], scratches[p % 2])
                        for p in range(min(2, len(paths)))]
        for p in range(len(paths)):
            records = sorted_parts[p].result()
            if p + 2 < len(paths):
                sorted_parts.append(pool.submit(_sort_partition, paths[p + 2],
                                                scratches[p % 2]))
            sorted_parts[p] = None
            keys = records["key"]
            same = keys[1:] == keys[:-1]
            if same.any() or everything_shared:  # the links of shared keys: to the collisions
                shared = np.zeros(len(keys), bool)
                shared[1:] |= same
                shared[:-1] |= same
                shared_links += int(np.count_nonzero(shared))
                shared |= everything_shared
                records["m"][shared] = records["c"][shared] = SHARED
                shared_keys.append(np.unique(keys[shared]))
            link_table.add(keys, records["m"])
            if link_c is not None:
                link_c.append(records["c"])
            shown.update(len(records))
            del records, keys
    sizes += link_table.finish() + (link_c.close() if link_c is not None else 0)
    shutil.rmtree(scratch)

    shared_keys = np.concatenate(shared_keys + [np.zeros(0, np.uint64)])
    collisions = _collisions(model_dir, buckets, shared_keys, partition, mask, progress)
    for name, array in (("link_collisions", collisions), ("seen_words", seen)):
        storage.write_npy(array, os.path.join(directory, name + ".npy"))
        sizes += array.nbytes
    extra = {"link_collisions": len(collisions), "shared_links": shared_links}
    if link_key_bits != 64:
        extra["link_key_bits"] = link_key_bits
    files = PACKED_FILES if packed else COMPACT_FILES
    return manifests.Compact(layout=PACKED_LAYOUT if packed else COMPACT_LAYOUT,
                             files=[n + ".npy" for n in files],
                             features=int(n_features), links=int(n_links), bytes=int(sizes),
                             extra=extra).write(directory, known=known_checksums(
                                 feature_table.writers() + link_table.writers() + [link_c]))


def _collisions(model_dir, buckets, shared_keys, partition, mask, progress):
    """The :data:`COLLISION` rows of the links whose keys are ``shared_keys``, by a pass
    over the tables (none when there are none)."""
    found = []
    if len(shared_keys):
        with progress("collisions", len(buckets), "bucket") as shown:
            for bucket in buckets:
                feats, slices = _bucket_slices(model_dir, bucket, len(buckets), partition, mask)
                keys = feats["feature"].to_numpy()
                for rows, records, words in slices:
                    at = np.flatnonzero(np.isin(records["key"], shared_keys))
                    rows_found = np.zeros(len(at), COLLISION)
                    for field in ("key", "m", "c"):
                        rows_found[field] = records[field][at]
                    rows_found["feature"], rows_found["word"] = keys[rows[at]], words[at]
                    found.append(rows_found)
                shown.update()
    collisions = np.concatenate(found + [np.zeros(0, COLLISION)])
    return collisions[np.lexsort((collisions["word"], collisions["feature"],
                                  collisions["key"]))]
