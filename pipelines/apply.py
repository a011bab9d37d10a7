"""snm apply: the adjusted matrix M for every link of the count table, as a model directory.

    snm apply --count count/ --fit fit/ --out model/

Reads: a count directory (``snm count``) and a fit directory (``snm fit``:
``theta.npy`` and its meta-feature settings).  Writes a self-contained model
directory (see :mod:`snm_core.io.tables`):

* ``links-BBBBB-of-NNNNN.parquet`` and ``features-BBBBB-of-NNNNN.parquet``: the
  count's files, hard-linked (copied where a link cannot be made);
* ``m-BBBBB-of-NNNNN.parquet``: m = M_fw (float32) of each of those links, and
  ``m_star-BBBBB-of-NNNNN.parquet``: m_star = M_f* (float64) of each feature
  (:mod:`snm_core.io.model_files`);
* ``vocab.txt``, ``config.cfg``, ``theta.npy``, ``model_card.md``,
  ``manifest.json`` (corpus statistics, meta-feature settings, fit summary;
  written last) and ``compact/`` (arrays for scoring, built after the pipeline
  when the model directory is local).

The pipeline is a Beam map over the count buckets: each worker reads one
bucket's features (not their words) and links, computes A(f, w) and M_fw for
every link (one compiled call, ``kernels.adjust_links``) and M_f* for every
feature.  A bucket holds all links of its features, so the per-feature sum is
done in the same step, without a CombinePerKey shuffle.
"""

import dataclasses
from typing import Optional

import apache_beam as beam
import numpy as np

from pipelines import count_directory, running
from snm_core.fit.metafeatures import MetaFeatureSpec
from snm_core.io import losscheck, model_files, storage, tables
from snm_core.io.checkpoints import checkpoint
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import MemoryBudget
from snm_core.apply.adjust import adjust_bucket
from snm_core.scoring.card import write_model_card
from snm_core.scoring.compact import HASHED_LAYOUTS, build_resources, compile_model
from snm_core.scoring.layouts import ngram_trie
from snm_core.scoring.layouts.hashed import COMPACT
from snm_core.stages import manifests
from snm_core.stages.validation import validate_directory

#: What an apply worker holds, in bytes, a link of the count bucket it adjusts: the
#: bucket as read, its meta-feature entries and the matrix it writes.
APPLY_LINK_BYTES = 120
#: What the adjustment reads of the count's files (not a feature's words).
ADJUST_FEATURE_COLUMNS = ["feature", "tag", "type", "count", "diversity"]
ADJUST_LINK_COLUMNS = ["word", "count", "continuation"]


class AdjustBucket(beam.DoFn):
    """Bucket number -> writes its matrix and features files; yields the bucket's totals."""

    def __init__(self, settings, theta_path, spec, out):
        self.settings = settings
        self.theta_path = theta_path
        self.spec = spec
        self.out = out
        self.links_counter = running.counter("links")
        self.progress = running.worker_progress("apply", "buckets", "bucket",
                                                settings.num_buckets)

    def setup(self):
        import io
        running.configure_allocators()
        self.theta = np.load(io.BytesIO(storage.read_bytes(self.theta_path)))
        _, extractor = self.settings.build()
        self.type_salts = extractor.type_salts
        self.num_feature_types = len(extractor.feature_types)

    def process(self, bucket):
        paths = self.settings.bucket_paths(bucket)
        features = storage.read_parquet(paths["features"], columns=ADJUST_FEATURE_COLUMNS)
        links = storage.read_parquet(paths["links"], columns=ADJUST_LINK_COLUMNS)
        m, m_star = adjust_bucket(
            features, links, self.theta, self.spec, self.type_salts, self.num_feature_types)
        num_buckets = self.settings.num_buckets
        for table, count_file in (("matrix", paths["links"]), ("features", paths["features"])):
            rows_path, _ = model_files.bucket_paths(self.out, table, bucket, num_buckets)
            storage.link_or_copy(count_file, rows_path)  # the model's rows: the count's files
        checkpoint("apply.bucket")  # fault tests stop a worker here, mid-write
        taken = model_files.write_values(self.out, bucket, num_buckets, m, m_star,
                                         manifests.checksum_digest)
        self.progress.update()
        self.links_counter.inc(len(m))
        yield {"links": len(m), "features": len(m_star), "bucket": bucket, "checksums": taken}


def check_apply(totals, counts):
    """What apply read (the count's manifest) against what it wrote (:mod:`snm_core.io.losscheck`)."""
    with losscheck.Checks("apply") as checks:
        checks.each_once("buckets", range(counts.num_buckets), [t["bucket"] for t in totals])
        for name in ("links", "features"):
            checks.equal(f"{name} counted", counts.totals[name], f"{name} applied",
                         sum(t[name] for t in totals))


def write_manifest(totals, out, settings, fit_manifest):
    counts = settings.manifest
    check_apply(totals, counts)
    files = model_files.file_names(settings.num_buckets)
    manifest = manifests.Model(
        config=counts.config, tags=counts.tags, feature_types=counts.feature_types,
        vocabulary_size=counts.vocabulary_size,
        vocabulary_fingerprint=counts.vocabulary_fingerprint, num_buckets=settings.num_buckets,
        files=sorted(files + ["vocab.txt", "theta.npy", "config.cfg"]),
        totals={k: sum(t[k] for t in totals) for k in ("links", "features")},
        count_totals=counts.totals, sources=counts.sources, fit=fit_manifest.summary(),
        extra={"selection": counts.extra["selection"]} if "selection" in counts.extra else {})
    storage.remove_stale(out, set(files), model_files.PATTERNS)
    # the rows files and vocab.txt are the count's, linked or copied: their checksums too;
    # the values files', taken as they were written
    known = manifests.reusable_checksums(counts.checksums)
    for t in totals:
        known.update(t["checksums"])
    return manifest.write(out, known=manifests.taken_checksums(known))


@dataclasses.dataclass(frozen=True)
class ApplyOptions:
    """What ``snm apply`` does; one field per command-line flag."""

    count: str  # the count directory
    fit: str  # the fit directory (theta.npy)
    out: str
    layout: str = "hashed"  # of compact/: snm_core.scoring.compact.LAYOUTS
    memory: Optional[MemoryBudget] = None  # --memory (a text is parsed); None: the default

    def __post_init__(self):
        running.absolute_paths(self, "count", "fit", "out")
        running.check_layout(self.layout)
        object.__setattr__(self, "memory", MemoryBudget.of(self.memory))


def run(args, beam_args=(), model_card=True, summary=True):
    """Run the apply pipeline, then build the scoring arrays and (unless ``model_card`` is
    false: ``snm train`` writes it once, with the evaluation) the model card; returns the
    model's manifest.  ``summary``: print its totals (and Beam metrics) as a table."""
    beam_args = list(beam_args)
    settings = count_directory.CountDirectory.load(args.count)  # validated
    fit_manifest = validate_directory(args.fit, "fit").manifest  # theta.npy's header too
    if fit_manifest.vocabulary_fingerprint != settings.manifest.vocabulary_fingerprint:
        raise SnmInputError(f"{args.fit} was fitted with another vocabulary than "
                            f"{args.count}; run snm join and snm fit on these counts")
    if args.layout not in HASHED_LAYOUTS:  # refused before the pipeline runs
        ngram_trie.ngram_span(settings.manifest, args.count, args.layout)
    spec = MetaFeatureSpec(**fit_manifest.metafeatures)
    budget = args.memory
    workers = running.workers_per_process(beam_args)
    budget.require("apply", {**running.bucket_memory(settings.manifest, workers,
                                                     APPLY_LINK_BYTES),
                             "theta": workers * 4 * spec.hash_size})
    build_resources(settings.manifest, args.layout, budget)  # compact/'s, checked now too
    theta_path = storage.join(args.fit, "theta.npy")
    storage.makedirs(args.out)
    storage.remove_file(storage.join(args.out, tables.MANIFEST))
    storage.remove_tree(storage.join(args.out, COMPACT))
    for name in ("vocab.txt",):
        storage.write_bytes(storage.read_bytes(storage.join(args.count, name)),
                           storage.join(args.out, name))
    storage.write_bytes(storage.read_bytes(theta_path), storage.join(args.out, "theta.npy"))
    storage.write_text(settings.manifest.config, storage.join(args.out, "config.cfg"))

    def build(p):
        _ = (p
             | "Buckets" >> beam.Create(list(range(settings.num_buckets)))  # spread by Create
             | "Adjust" >> beam.ParDo(AdjustBucket(settings, theta_path, spec, args.out))
             | "WriteManifest" >> running.CallOnce(write_manifest, args.out, settings, fit_manifest))

    metrics = running.run_pipeline(beam_args, build, "apply", shared_paths=[args.out])
    manifest = manifests.Model.read(args.out)
    # The scoring arrays (a remote model's: built here), their sort within the budget.
    compile_model(args.out, args.layout, memory=budget)
    if model_card:
        write_model_card(args.out, manifest)
    if summary:
        running.print_summary(f"snm apply: {manifest.totals['links']:,} links -> {args.out}",
                              manifest.totals, metrics)
    return manifest
