"""A model directory's scoring arrays, ``compact/``: built in a layout, and loaded.

``compact/`` is a cache of the model's Parquet tables: :func:`compile_model`
builds it in one of :data:`LAYOUTS` (hashed, any model; trie or small, n-gram
models), and :func:`load_model` memory-maps it, building it first when it is
missing or of an older layout, and returns the layout's scorer.
"""

import os
import shutil
import tempfile

from snm_core.io import memory, storage, tables
from snm_core.model.layouts import hashed, hashed_build, ngram_trie, small, trie
from snm_core.model.layouts.hashed import COMPACT, COMPACT_FILES, COMPACT_LAYOUT
from snm_core.stages import manifests, validation

#: Layouts ``compact/`` may be built in (``--layout``): hashed keys (any
#: model), or an n-gram model's trie, plain (:mod:`snm_core.model.layouts.trie`) or coded
#: (:mod:`snm_core.model.layouts.small`).
LAYOUTS = ("hashed", "trie", "small")
LAYOUT_HELP = ("scoring arrays (compact/): hashed (the default: any model, with the unadjusted "
               "model), trie (n-gram models: about 10 bytes a link, the fastest) or small "
               "(n-gram models: about 2.5 bytes a link, perplexity within 0.1%%)")


def compile_model(model_dir, layout="hashed", partition_links=hashed_build.COMPILE_PARTITION_LINKS):
    """Build ``compact/`` in ``layout`` from the model's Parquet files; returns the compact
    manifest.

    ``layout`` is one of :data:`LAYOUTS`.  A remote model's arrays are built
    in a local directory, then uploaded, their manifest last.
    """
    memory.limit_heap_retention()  # its large temporaries go back when freed
    manifest = manifests.Model.read(model_dir)
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout != "hashed":
        ngram_trie.ngram_span(manifest, model_dir, layout)  # refused before anything is removed
        builder = small.build_small if layout == "small" else trie.build_trie

        def build(directory):
            shutil.rmtree(directory, ignore_errors=True)
            os.makedirs(directory)
            return builder(model_dir, manifest, directory).write(directory)
    else:
        def build(directory):
            return hashed_build.build_hashed(model_dir, manifest, directory, partition_links)
    if not storage.is_remote(model_dir):
        local = os.path.join(model_dir, COMPACT)
        with storage.resource_errors(local):
            return build(local)
    os.makedirs(storage.cache_directory(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=storage.cache_directory()) as staging, \
            storage.resource_errors(staging):
        compact = build(staging)
        remote = storage.join(model_dir, COMPACT)
        storage.remove_tree(remote)
        storage.upload_tree(staging, remote, last=tables.MANIFEST)
    return compact


def load_model(model_dir, mmap=True):
    """The scorer of a model directory; builds ``compact/`` first if it is missing.

    A remote model's scoring arrays are copied to a local cache on first
    load (:func:`snm_core.io.storage.local_copy`) and memory-mapped from there.
    The scorer is the layout's: :class:`snm_core.model.layouts.hashed.Model`,
    :class:`snm_core.model.layouts.trie.TrieModel` or
    :class:`snm_core.model.layouts.small.SmallModel`.
    """
    tries = {small.SMALL_LAYOUT: (small.SMALL_FILES, small.load_small, small.SmallModel),
             trie.TRIE_LAYOUT: (trie.TRIE_FILES, trie.load_trie, trie.TrieModel)}
    stored_compact = storage.join(model_dir, COMPACT)
    compact_manifest = storage.join(stored_compact, tables.MANIFEST)
    layout = (storage.read_json(compact_manifest).get("layout")
              if storage.isfile(compact_manifest) else None)
    built = layout == COMPACT_LAYOUT or layout in tries
    # Manifest, vocab.txt, theta.npy; the Parquet tables only if compact/ is built from them.
    checked = validation.validate_directory(model_dir, "model", parquet=not built)
    if not built:  # missing, or an older version of its layout ("small-0": small)
        name = layout.split("-")[0] if isinstance(layout, str) else "hashed"
        compile_model(model_dir, name if name in LAYOUTS else "hashed")
    compact = manifests.Compact.read(stored_compact)
    vocabulary_size = checked.manifest["vocabulary_size"]
    if compact["layout"] in tries:
        files, load, model_type = tries[compact["layout"]]
        compact_dir = storage.local_copy(stored_compact, [n + ".npy" for n in files],
                                         tables.MANIFEST)
        arrays = load(compact_dir, compact, vocabulary_size, mmap)
        return model_type(checked.manifest, checked.vocabulary, compact, arrays)
    compact_dir = storage.local_copy(stored_compact, [n + ".npy" for n in COMPACT_FILES],
                                     tables.MANIFEST)
    arrays = hashed.load_compact(compact_dir, compact, vocabulary_size, mmap)
    return hashed.Model(checked.manifest, checked.vocabulary, arrays)


def read_model_tables(model_dir):
    """``(features, matrix, manifest)`` of a model directory as whole tables (for export)."""
    manifest = validation.validate_directory(model_dir, "model").manifest
    feats = tables.read_tables(model_dir, manifest, "features", tables.MODEL_FEATURES)
    matrix = tables.read_tables(model_dir, manifest, "matrix", tables.MATRIX)
    return feats, matrix, manifest
