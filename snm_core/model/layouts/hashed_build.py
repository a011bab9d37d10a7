"""Building the hashed layout's ``compact/`` from a model's Parquet tables, by external sort.

Memory stays bounded whatever the model size: arrays are written to their
``.npy`` files in order (:class:`snm_core.model.layouts.npy.NpyWriter`);
feature keys arrive sorted (bucket files are key ranges), and links are
sorted by link key in two passes, first scattered into key-range partitions
of about ``partition_links`` links on disk, then each partition sorted alone
(two partitions at a time).
"""

import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from snm_core.fit import kernels
from snm_core.io import storage, tables
from snm_core.io.arrays import group_rows
from snm_core.io.errors import SnmInputError
from snm_core.model.layouts.hashed import COMPACT_FILES, COMPACT_LAYOUT, EntryTableWriter
from snm_core.model.layouts.npy import NpyWriter
from snm_core.stages import manifests
from snm_core.text.hashing import link_key

#: Links sorted at once when the compact arrays are built (~170 MB of work
#: memory each; two are sorted at once).
COMPILE_PARTITION_LINKS = 1 << 22


def _sort_partition(scratch, p, work):
    """Link keys, M and c of scratch partition p, sorted by key."""
    keys = np.fromfile(os.path.join(scratch, f"{p}.keys"), dtype=np.uint64)
    order = kernels.argsort_keys(keys, work).astype(np.intp)
    return keys[order], *(np.fromfile(os.path.join(scratch, f"{p}.{name}"),
                                      dtype=np.float32)[order] for name in ("m", "c"))


def build_hashed(model_dir, manifest, directory, partition_links):
    """:func:`compile_model` into the local ``directory``."""
    n_features, n_links = manifest["totals"]["features"], manifest["totals"]["links"]
    scratch = os.path.join(directory, "partitions.tmp")
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(scratch)
    bits = max(0, int(math.ceil(math.log2(max(n_links / partition_links, 1)))))
    parts = [{name: open(os.path.join(scratch, f"{p}.{name}"), "wb")
              for name in ("keys", "m", "c")} for p in range(1 << bits)]

    def output(name, dtype, n):
        return NpyWriter(os.path.join(directory, name + ".npy"), dtype, n)

    feature_table = EntryTableWriter(n_features, directory, "feature")
    seen = np.zeros(manifest["vocabulary_size"], dtype=bool)
    empty_types = [i for i, name in enumerate(manifest["feature_types"]) if name == "0-gram"]
    for name in sorted(n for n in manifest["files"] if n.startswith("features-")):
        feats = tables.read_table(storage.join(model_dir, name), tables.MODEL_FEATURES,
                                  ["feature", "type", "count", "diversity", "m_star"])
        matrix = tables.read_table(storage.join(model_dir, "matrix-" + name[len("features-"):]),
                                   tables.MATRIX)
        keys, diversity = feats["feature"].to_numpy(), feats["diversity"].to_numpy()
        feature_table.add(keys, feats["m_star"].to_numpy())
        word = matrix["word"].to_numpy()
        lk = link_key(np.repeat(keys, diversity), word)
        c = (matrix["count"].to_numpy() / np.repeat(feats["count"].to_numpy(), diversity))
        arrays = {"keys": lk, "m": matrix["m"].to_numpy(), "c": c.astype(np.float32)}
        part = (lk >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(lk), int)
        order, bounds = group_rows(part, 1 << bits)
        for p in np.flatnonzero(np.diff(bounds)):
            rows = order[bounds[p]:bounds[p + 1]]
            for key, array in arrays.items():
                array[rows].tofile(parts[p][key])
        empty = np.isin(feats["type"].to_numpy(), empty_types)
        seen[word[np.repeat(empty, diversity)]] = True
    del feats, matrix, keys, diversity, word, lk, c, arrays, part, order, bounds  # the last file's
    sizes = feature_table.finish()
    link_table = EntryTableWriter(n_links, directory, "link")
    link_c = output("link_c", np.float32, n_links)
    for files in parts:
        for f in files.values():
            f.close()
    collisions = 0
    # Partitions are sorted two at a time (the radix sort and the gathers release
    # the GIL) and written in order.
    with ThreadPoolExecutor(2) as pool:
        scratches = [{}, {}]
        sorted_parts = [pool.submit(_sort_partition, scratch, p, scratches[p % 2])
                        for p in range(min(2, len(parts)))]
        for p in range(len(parts)):
            keys, m, c = sorted_parts[p].result()
            if p + 2 < len(parts):
                sorted_parts.append(pool.submit(_sort_partition, scratch, p + 2,
                                                scratches[p % 2]))
            collisions += int(np.count_nonzero(keys[1:] == keys[:-1]))
            link_table.add(keys, m)
            link_c.append(c)
            sorted_parts[p] = None
    sizes += link_table.finish() + link_c.close()
    shutil.rmtree(scratch)
    if collisions:
        raise SnmInputError(f"{model_dir}: {collisions} pairs of links share a 64-bit link key "
                            "(expected about n**2 / 2**65); please report this")
    storage.write_npy(seen, os.path.join(directory, "seen_words.npy"))
    sizes += seen.nbytes
    return manifests.Compact(layout=COMPACT_LAYOUT, files=[n + ".npy" for n in COMPACT_FILES],
                             features=int(n_features), links=int(n_links),
                             bytes=int(sizes)).write(directory)
