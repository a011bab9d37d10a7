"""A model directory's scoring arrays, ``compact/``: built in a layout, and loaded.

``compact/`` is a cache of the model's Parquet tables: :func:`compile_model`
builds it in one of :data:`LAYOUTS` (hashed, any model; trie or small, n-gram
models), and :func:`load_model` memory-maps it and returns the layout's scorer.
Loading never writes: a model whose ``compact/`` is missing or of an older layout
version is refused with the ``snm compact`` command that builds it.
"""

import contextlib
import os
import shutil
import tempfile

from snm_core.io import local_copies, memory, model_files, storage, tables
from snm_core.io.errors import SnmInputError, resource_errors
from snm_core.io.progress import Progress
from snm_core.io.runlock import LOCK_NAME
from snm_core.scoring.card import write_model_card
from snm_core.scoring.layouts import hashed, hashed_build, ngram_trie
from snm_core.scoring.layouts.hashed import COMPACT
from snm_core.scoring.layouts.npy import compact_command
from snm_core.stages import manifests, validation

#: Layouts ``compact/`` may be built in (``--layout``): hashed keys (any
#: model), or an n-gram model's trie, plain (:mod:`snm_core.scoring.layouts.trie`) or coded
#: (:mod:`snm_core.scoring.layouts.small`).
LAYOUTS = ("hashed", "packed", "trie", "small")
#: The layouts of hashed keys (any model): plain, or packed (3-byte entries).
HASHED_LAYOUTS = ("hashed", "packed")
#: Files of a model directory that a scoring directory copies, beside vocab.txt.
CONFIG, CARD = "config.cfg", "model_card.md"
LAYOUT_HELP = ("scoring arrays (compact/): hashed (the default: any model, with the unadjusted "
               "model), packed (any model: about 3.7 bytes a link and a feature, values "
               "coded in 8 bits, no unadjusted model), trie (n-gram models: about 10 bytes a "
               "link, the fastest) or small (n-gram models: about 2.5 bytes a link, perplexity "
               "within 0.1%%)")


def compile_model(model_dir, layout="hashed", memory=None, progress=None, **options):
    """Build ``compact/`` in ``layout`` from the model's Parquet files; returns the compact
    manifest.

    ``layout`` is one of :data:`LAYOUTS`.  ``memory``: the budget (a
    :class:`~snm_core.io.memory.MemoryBudget`, a ``--memory`` text, or None: the
    default), checked before anything is removed; ``progress``: how the passes are
    shown (:func:`pass_progress`'s by default); ``options``: the layout builder's
    (tests' hooks).  A remote model's arrays are built in a local directory, then
    uploaded, their manifest last.
    """
    manifest = manifests.Model.read(model_dir)
    check_layout(manifest, model_dir, layout)
    resources = build_resources(manifest, layout, memory, progress)
    if not storage.is_remote(model_dir):
        local = os.path.join(model_dir, COMPACT)
        with resource_errors(local):
            return _build(model_dir, manifest, layout, local, resources, options)
    os.makedirs(local_copies.cache_directory(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=local_copies.cache_directory()) as staging, \
            resource_errors(staging):
        compact = _build(model_dir, manifest, layout, staging, resources, options)
        remote = storage.join(model_dir, COMPACT)
        storage.remove_tree(remote)
        local_copies.upload_tree(staging, remote, last=tables.MANIFEST)
    return compact


def build_resources(manifest, layout, budget=None, progress=None):
    """What every layout builder takes, beside the model: ``{"memory": bytes of working
    memory (the budget less the process's), "progress": progress(what, total, unit), a
    Progress of one pass}``; the budget checked first (a one-line error naming what it
    must hold)."""
    budget = memory.MemoryBudget.of(budget)
    # The trie layouts' least working memory depends on their sort keys' width: their
    # plan (trie_build.plan) checks it before any work.
    parts = hashed_build.memory_parts(manifest) if layout in HASHED_LAYOUTS else {}
    budget.require(f"compact ({layout})", {"the process": memory.PROCESS_BYTES, **parts})
    return {"memory": budget.working(),
            "progress": progress or pass_progress(layout)}


def pass_progress(layout):
    """``progress(what, total=None, unit="link")``: a :class:`Progress` of one pass of the
    ``layout`` build, shown as ``compact LAYOUT: what``."""
    def progress(what, total=None, unit="link"):
        return Progress(f"compact {layout}: {what}", total=total, unit=unit)
    return progress


def check_layout(manifest, model_dir, layout):
    """Refuse, before anything is removed, a layout that does not exist or cannot hold
    the model (the trie layouts: n-gram models only)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout not in HASHED_LAYOUTS:
        ngram_trie.ngram_span(manifest, model_dir, layout)


def _build(model_dir, manifest, layout, directory, resources, options):
    """Write ``compact/`` in ``layout`` into the local ``directory``, its manifest last;
    returns the compact manifest."""
    memory.configure_process("single")
    with memory.kept_heap("single"):  # a partition's arrays reused, not zeroed afresh
        if layout in HASHED_LAYOUTS:
            # Its passes stream through their arrays: huge pages would only cost
            # their zeroing (the trie's builds, which probe theirs, keep them).
            with memory.small_pages():
                return hashed_build.build_hashed(model_dir, manifest, directory,
                                                 packed=layout == "packed", **resources,
                                                 **options)
        from snm_core.scoring.layouts import small, trie, trie_build
        builder = small.build_small if layout == "small" else trie.build_trie
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        links = int(manifest["totals"]["links"]) * trie_build.PROGRESS_PASSES
        with resources["progress"]("n-grams by external sort", links) as shown:
            compact = builder(model_dir, manifest, directory, memory=resources["memory"],
                              progress=shown, **options)
        return compact.write(directory)


def write_scoring_directory(model_dir, layout, out, memory=None, progress=None):
    """Write a self-contained scoring directory of a model: what scoring reads and nothing
    else, so that a model ships as one directory.

    ``out`` (local or remote, new or empty) gets ``compact/`` in ``layout`` (built within
    ``memory``, showing ``progress``, as :func:`compile_model`),
    ``vocab.txt``, the configuration, the model card and a model manifest (last)
    that lists no Parquet table and records ``scoring_only``: its source and
    layout.  :func:`load_model` (eval, score, query, ``snm.load``) reads it like
    the model; the commands that need the tables (``export-arpa``, ``prune``,
    ``compact``) refuse it with a line naming the source.

    Returns
    -------
    dict
        The compact manifest.
    """
    manifest = validation.validate_directory(model_dir, "model").manifest
    check_layout(manifest, model_dir, layout)
    resources = build_resources(manifest, layout, memory, progress)
    if [n for n in storage.listdir(out) if n != LOCK_NAME] or storage.isfile(out):
        raise SnmInputError(f"{out}: exists and is not an empty directory; give a new "
                            "directory for --out (one without manifest.json is a run cut "
                            "short: delete it)")
    files = [n for n in (validation.VOCAB, CONFIG, CARD) if n in manifest["files"]
             or storage.isfile(storage.join(model_dir, n))]
    scoring = {**manifest, "files": sorted(files),
               "scoring_only": {"source": storage.absolute(model_dir), "layout": layout}}
    remote = storage.is_remote(out)
    if remote:
        os.makedirs(local_copies.cache_directory(), exist_ok=True)
    with contextlib.ExitStack() as stack:
        local = (stack.enter_context(tempfile.TemporaryDirectory(dir=local_copies.cache_directory()))
                 if remote else out)
        os.makedirs(local, exist_ok=True)
        with resource_errors(local):
            compact = _build(model_dir, manifest, layout, os.path.join(local, COMPACT),
                             resources, {})
            for name in files:
                storage.write_bytes(storage.read_bytes(storage.join(model_dir, name)),
                                    os.path.join(local, name))
            write_model_card(local, scoring, keep_evaluation=True,
                             name=storage.basename(storage.absolute(out)))
            manifests.write_manifest(scoring, local)  # the source's checksums replaced
            if remote:
                local_copies.upload_tree(local, out, last=tables.MANIFEST)
    return compact


#: What a hashed scoring directory holds besides its arrays and vocab.txt (manifests,
#: the configuration, overflow entries), at most: :func:`predicted_scoring_bytes`'s margin.
SCORING_EXTRA_BYTES = 64 << 10


def predicted_scoring_bytes(features, links, layout, vocabulary_size, vocabulary_bytes):
    """At most the bytes (:func:`scoring_bytes`) of a model of ``features`` and ``links``
    in the hashed ``layout`` (hashed or packed), before it is built;
    ``vocabulary_bytes``: its vocab.txt's."""
    return (hashed.compact_bytes(features, links, vocabulary_size, layout == "packed")
            + vocabulary_bytes + SCORING_EXTRA_BYTES)


def scoring_bytes(model_dir):
    """The bytes of the scoring directory ``snm compact --out`` would write of a model
    with a built ``compact/``: its arrays and manifest, vocab.txt, the configuration and
    a manifest, counted as the model's (which lists more files; the model card, a few
    hundred bytes that change with every evaluation, aside)."""
    stored_compact = storage.join(model_dir, COMPACT)
    compact = manifests.Compact.read(stored_compact)
    names = [storage.join(stored_compact, name) for name in compact["files"]] + [
        storage.join(stored_compact, tables.MANIFEST), storage.join(model_dir, "vocab.txt"),
        storage.join(model_dir, CONFIG), storage.join(model_dir, tables.MANIFEST)]
    return sum(storage.file_stamp(name)[1] for name in names if storage.exists(name))


def load_model(model_dir, mmap=True):
    """The scorer of a model directory, from its ``compact/`` (never written here: a
    model without current scoring arrays raises :class:`SnmInputError` naming the
    ``snm compact`` command that builds them).

    A remote model's scoring arrays are copied to a local cache on first
    load (:func:`snm_core.io.local_copies.local_copy`) and memory-mapped from there.
    The scorer is the layout's: :class:`snm_core.scoring.layouts.hashed.Model`,
    :class:`snm_core.scoring.layouts.trie.TrieModel` or
    :class:`snm_core.scoring.layouts.small.SmallModel`.
    """
    stored_compact = storage.join(model_dir, COMPACT)
    compact_manifest = storage.join(stored_compact, tables.MANIFEST)
    layout = (storage.read_json(compact_manifest).get("layout")
              if storage.isfile(compact_manifest) else None)
    built = (layout in hashed.READ_LAYOUTS or layout == hashed.PACKED_LAYOUT
             or layout in _trie_layouts(layout))
    # Manifest, vocab.txt, theta.npy; the Parquet tables too where compact/ is not built.
    checked = validation.validate_directory(model_dir, "model", parquet=not built)
    if not built:
        raise SnmInputError(missing_arrays_message(model_dir, layout))
    compact = manifests.Compact.read(stored_compact)
    vocabulary_size = checked.manifest["vocabulary_size"]
    tries = _trie_layouts(compact["layout"])
    if compact["layout"] in tries:
        files, load, model_type = tries[compact["layout"]]
        compact_dir = local_copies.local_copy(stored_compact, [n + ".npy" for n in files],
                                         tables.MANIFEST)
        arrays = load(compact_dir, compact, vocabulary_size, mmap)
        return model_type(checked.manifest, checked.vocabulary, compact, arrays)
    compact_dir = local_copies.local_copy(
        stored_compact, [n + ".npy" for n in hashed.compact_files(compact["layout"])],
        tables.MANIFEST)
    arrays = hashed.load_compact(compact_dir, compact, vocabulary_size, mmap)
    return hashed.Model(checked.manifest, checked.vocabulary, arrays,
                        compact.get("link_key_bits", 64))


def missing_arrays_message(model_dir, layout):
    """What to do about a model directory whose ``compact/`` is missing (``layout`` None)
    or of an older layout version."""
    name = layout.split("-")[0] if isinstance(layout, str) else None
    name = name if name in LAYOUTS else "hashed"
    found = ("no scoring arrays (compact/)" if layout is None else
             f"scoring arrays of an older layout version ({layout!r}, compact/)")
    return f"{model_dir}: {found}; build them with '{compact_command(model_dir, name)}'"


def read_model_tables(model_dir):
    """``(features, matrix, manifest)`` of a model directory as whole tables, in memory
    (for tests and small models; the stages read a bucket at a time)."""
    manifest = validation.validate_directory(model_dir, "model").manifest
    feats = model_files.read_all(model_dir, manifest, "features")
    matrix = model_files.read_all(model_dir, manifest, "matrix")
    return feats, matrix, manifest


def _trie_layouts(layout):
    """``{layout version: (files, load, scorer)}`` of the trie layouts; empty for a hashed
    ``layout``, whose scoring needs none of their modules."""
    if layout in hashed.READ_LAYOUTS or layout == hashed.PACKED_LAYOUT:
        return {}
    from snm_core.scoring.layouts import small, trie
    return {small.SMALL_LAYOUT: (small.SMALL_FILES, small.load_small, small.SmallModel),
            trie.TRIE_LAYOUT: (trie.TRIE_FILES, trie.load_trie, trie.TrieModel)}
