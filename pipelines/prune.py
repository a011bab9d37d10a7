"""snm prune: a model pruned to a number of links, or by a score threshold.

    snm prune --model model/ --out pruned/ (--target_links N | --threshold T)
              [--criterion backoff|reestimate|mass|count] [--heldout JOIN [--heldout_weight 8]]

Reads a model directory (``snm apply`` or ``snm prune``); writes a complete model
directory of the same buckets (``eval``, ``score`` and, for n-gram models pruned by
``backoff``, ``export-arpa`` read it), with each feature's M_f*, count and
diversity recomputed from the links it keeps and features left without links
dropped.  Its manifest gains ``pruning``; the model card says what was removed.

Four criteria (:mod:`snm_core.prune.criteria` has the arithmetic):

* ``backoff`` (default for n-gram configurations): the relative entropy that
  removing a link causes in the model's back-off form, the pruned model closed
  under ARPA's rules.  The back-off form is joins by suffix key over key-range
  partitions on scratch storage (``OUT/_scratch``), one Beam element a model bucket
  or a partition, a ``GroupByKey`` on the partition between steps
  (:mod:`snm_core.arpa.backoff`); then passes over the partitions find the cut
  that keeps the target, and each model bucket is rewritten with the rows its
  partitions keep (:mod:`pipelines.prune_backoff`).  A worker holds one partition
  (``--memory``) or one model bucket.
* ``reestimate`` (pooled n-gram configurations): the model estimated again from its
  counts with count moving, pruned in passes by the relative entropy of backing off,
  E-M between passes, as pocolm does (:mod:`pipelines.prune_reestimate`), in this
  process; ``--heldout`` chooses its discounts, for the unpruned model and then for
  the pruned one.
* ``mass`` (default otherwise) and ``count`` (any configuration): the
  probability mass the link carries under its feature, weighted by how often
  the feature fires: with its share of the feature's adjusted mass (mass), or
  with its relative frequency, which is its count (count); each breaks the
  other's ties.  ``--heldout`` weighs the features that held-out text touches
  more.  A Beam map over the buckets: up to four passes each build a
  histogram of the links' ranks, narrowing to the cut that keeps the target
  (within 1%), then one pass writes the kept links.  A worker holds one bucket.
"""

import dataclasses
import io
from typing import Optional

import apache_beam as beam
import numpy as np

from pipelines import running
from pipelines.prune_backoff import prune_backoff
from pipelines.prune_output import finish, write_manifest
from pipelines.prune_reestimate import prune_reestimate
from snm_core.io import model_files, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import MemoryBudget, parse_size
from snm_core.prune import criteria as prune_lib
from snm_core.scoring.card import write_model_card
from snm_core.scoring.compact import HASHED_LAYOUTS, predicted_scoring_bytes, scoring_bytes
from snm_core.scoring.layouts import ngram_trie
from snm_core.stages import manifests
from snm_core.text.config import parse_config

CRITERIA = ("backoff", "reestimate") + tuple(prune_lib.BUCKET_CRITERIA)
#: How much more the features of held-out text weigh with --heldout (chosen on
#: halves of mix's held-out set: benchmarks/README.md, "Pruning").
HELDOUT_WEIGHT = 8.0
#: The histogram a selection pass leaves for the driver, in the output directory.
HISTOGRAM_FILE = "prune-histogram.npy"


@dataclasses.dataclass(frozen=True)
class PruneOptions:
    """What ``snm prune`` does; one field per command-line flag."""

    model: str
    out: str
    target_links: int = None
    target_size: int = None  # bytes of the scoring directory (snm compact --out)
    threshold: float = None
    criterion: str = None  # None: backoff for n-gram configurations, else mass
    heldout: str = None  # a join directory on the model's counts
    heldout_weight: float = None  # with heldout; None: HELDOUT_WEIGHT
    layout: str = "hashed"  # of compact/: LAYOUTS
    memory: Optional[MemoryBudget] = None  # --memory (a text is parsed); None: the default

    def __post_init__(self):
        running.absolute_paths(self, "model", "out", "heldout")
        running.check_layout(self.layout)
        if isinstance(self.target_size, str):
            object.__setattr__(self, "target_size", parse_size(self.target_size,
                                                               "--target_size"))
        given = [v is not None for v in (self.target_links, self.target_size, self.threshold)]
        if sum(given) != 1:
            raise SnmInputError("give one of --target_links N, --target_size SIZE or "
                                "--threshold T")
        if self.target_links is not None and self.target_links < 1:
            raise SnmInputError("--target_links must be at least 1")
        if self.target_size is not None and self.target_size < 1:
            raise SnmInputError("--target_size must be at least one byte")
        if self.criterion not in (None,) + CRITERIA:
            raise SnmInputError(f"--criterion must be one of {', '.join(CRITERIA)}, "
                                f"got {self.criterion!r}")
        if self.heldout is None and self.heldout_weight is not None:
            raise SnmInputError("--heldout_weight weighs the features of --heldout JOIN: "
                                "give that too")
        if self.heldout is not None and self.heldout_weight is None:
            object.__setattr__(self, "heldout_weight", HELDOUT_WEIGHT)
        if self.heldout_weight is not None and not self.heldout_weight > 0:
            raise SnmInputError("--heldout_weight must be positive")
        object.__setattr__(self, "memory", MemoryBudget.of(self.memory))


@dataclasses.dataclass(frozen=True)
class Source:
    """What every worker needs of the model being pruned, and how it ranks links."""

    model: str
    num_buckets: int
    scoring: prune_lib.BucketScoring
    heldout: str = None

    @classmethod
    def of(cls, options, manifest, criterion):
        types = manifest["feature_types"]
        scoring = prune_lib.BucketScoring(
            criterion, int(manifest["count_totals"]["events"]),
            tuple(i for i, name in enumerate(types) if name == "0-gram"),
            options.heldout_weight if options.heldout else 1.0)
        return cls(options.model, manifest["num_buckets"], scoring, options.heldout)

    def read(self, bucket):
        """``(features, matrix, heldout_features)`` of one bucket (the last None
        without --heldout)."""
        features, matrix = (model_files.read_bucket(self.model, table, bucket, self.num_buckets)
                            for table in ("features", "matrix"))
        heldout = None
        if self.heldout:
            heldout = np.unique(storage.read_parquet(storage.join(
                self.heldout, tables.bucket_file("small_m", bucket, self.num_buckets)),
                columns=["feature"])["feature"].to_numpy())
        return features, matrix, heldout

    def ranks(self, bucket):
        features, matrix, heldout = self.read(bucket)
        return self.scoring.ranks(features, matrix, heldout)[0]


class RankHistogram(beam.DoFn):
    """Bucket number -> :func:`snm_core.prune.criteria.rank_histogram` of its links' ranks."""

    def __init__(self, source, level, prefix):
        self.source, self.level, self.prefix = source, level, prefix
        self.progress = running.worker_progress("prune", f"ranks, pass {level + 1}", "bucket",
                                                source.num_buckets)

    def setup(self):
        running.configure_allocators()

    def process(self, bucket):
        yield prune_lib.rank_histogram(self.source.ranks(bucket), self.level, self.prefix)
        self.progress.update()


class PruneBucket(beam.DoFn):
    """Bucket number -> writes its pruned files; yields what it read and kept."""

    def __init__(self, source, threshold_rank, out):
        self.source, self.threshold_rank, self.out = source, threshold_rank, out
        self.links_counter = running.counter("links")
        self.progress = running.worker_progress("prune", "writing", "bucket",
                                                source.num_buckets)

    def setup(self):
        running.configure_allocators()

    def process(self, bucket):
        self.progress.update()
        features, matrix, heldout = self.source.read(bucket)
        kept_features, kept_matrix = prune_lib.prune_bucket(
            features, matrix, self.source.scoring, self.threshold_rank, heldout)
        prune_lib.write_bucket(self.out, bucket, self.source.num_buckets, kept_features,
                               kept_matrix)
        self.links_counter.inc(kept_matrix.num_rows)
        yield {"bucket": bucket, "links_read": matrix.num_rows,
               "features_read": features.num_rows, "links": kept_matrix.num_rows,
               "features": kept_features.num_rows}


def _save_histogram(histograms, path):
    total = np.zeros(1 << prune_lib.RANK_DIGIT_BITS, np.int64)
    for histogram in histograms:
        total += histogram
    buffer = io.BytesIO()
    np.save(buffer, total)
    storage.write_bytes(buffer.getvalue(), path)


def prune_by_buckets(options, manifest, criterion, beam_args=(), summary=True):
    """The ``mass`` or ``count`` pipeline (see the module docstring); returns the
    pruned manifest (``summary``: see :func:`run`)."""
    source = Source.of(options, manifest, criterion)
    buckets = list(range(source.num_buckets))
    histogram_path = storage.join(options.out, HISTOGRAM_FILE)

    def histogram(level, prefix):
        def build(p):
            _ = (p
                 | "Buckets" >> beam.Create(buckets)
                 | "Histogram" >> beam.ParDo(RankHistogram(source, level, prefix))
                 | "Save" >> running.CallOnce(_save_histogram, histogram_path))
        running.run_pipeline(beam_args, build, "prune", shared_paths=[options.out])
        counts = np.load(io.BytesIO(storage.read_bytes(histogram_path)))
        storage.remove_file(histogram_path)
        return counts

    prune_lib.start_output(options.model, options.out)
    if options.target_links is not None:
        threshold_rank, _ = prune_lib.select_rank(histogram, options.target_links,
                                                  tolerance=options.target_links // 100)
        threshold = float(np.uint32(threshold_rank >> 32).view(np.float32))
    else:
        threshold_rank, threshold = prune_lib.score_rank(options.threshold), options.threshold
    primary, tie = prune_lib.BUCKET_CRITERIA[criterion]
    pruning = {"criterion": f"{criterion}: the {primary} mass, ties by the {tie} mass "
                            "(snm_core/prune/criteria.py)", "suffix_closed": False,
               "heldout": options.heldout, "heldout_weight": source.scoring.heldout_weight,
               "target_links": options.target_links, "threshold": threshold,
               "links_before": manifest["totals"]["links"],
               "features_before": manifest["totals"]["features"], "source": options.model}

    def build(p):
        _ = (p
             | "Buckets" >> beam.Create(buckets)
             | "Prune" >> beam.ParDo(PruneBucket(source, threshold_rank, options.out))
             | "WriteManifest" >> running.CallOnce(write_manifest, options.out, manifest,
                                                   pruning))

    metrics = running.run_pipeline(beam_args, build, "prune", shared_paths=[options.out])
    return finish(options, manifest, metrics, summary)


# --- the backoff criterion: steps over partitions (snm_core/arpa/backoff.py) -------------

def check_heldout(heldout, manifest):
    """A --heldout directory must come from ``snm join`` on this model's counts."""
    from snm_core.stages.validation import validate_directory
    joined = validate_directory(heldout, "join").manifest
    for name in ("config", "tags", "vocabulary_fingerprint", "num_buckets"):
        if joined.get(name) != manifest.get(name):
            raise SnmInputError(f"{heldout}: its {name} differs from the model's; give the "
                                "snm join output on the counts this model was applied to")


#: Bytes a link of a pruned model takes in each layout, features and index included, for
#: the first guess of :func:`prune_to_size` (kernel skip-10-gram and 5-gram models).
NOMINAL_LINK_BYTES = {"hashed": 20, "packed": 7, "trie": 10, "small": 2.5}
#: A size target is met within this share below it (never above).
SIZE_TOLERANCE = 0.03
#: Prunings a size target may take at most.
SIZE_ROUNDS = 8
#: Bytes the record of a size target adds to the pruned model's manifest, at most.
SIZE_RECORD_BYTES = 1024


def prune_to_size(options, manifest, beam_args=(), summary=True):
    """Prune to ``options.target_size`` bytes of the scoring directory
    (:func:`snm_core.scoring.compact.scoring_bytes`): prune to a number of links and
    measure, then to a number interpolated between the closest prunings below and above
    the target (a feature's entry comes with its first link kept, so the bytes grow
    faster than the links), until the size is within :data:`SIZE_TOLERANCE` below the
    target, the whole model fits, or the rounds run out (then the largest pruning below
    it).  Returns the pruned manifest, whose ``pruning`` records the target and rounds."""
    # The search aims below the target by what the manifest's record of it adds.
    asked, total = options.target_size, int(manifest["totals"]["links"])
    target = max(1, asked - SIZE_RECORD_BYTES)
    goal = target * (1 - SIZE_TOLERANCE / 2)
    under, over = None, None  # (links asked, bytes) of the closest prunings each side
    links = max(1, min(total, int(goal / NOMINAL_LINK_BYTES[options.layout])))
    if options.layout in HASHED_LAYOUTS and predicted_scoring_bytes(
            manifest["totals"]["features"], total, options.layout,
            manifest["vocabulary_size"],
            storage.file_stamp(storage.join(options.model, "vocab.txt"))[1]) <= target:
        links = total  # the whole model fits: one pruning that keeps it, not a search
    rounds = []
    for _ in range(SIZE_ROUNDS):
        pruned = run(dataclasses.replace(options, target_links=links, target_size=None),
                     beam_args, summary=False)
        kept, size = int(pruned["totals"]["links"]), scoring_bytes(options.out)
        rounds.append({"links": kept, "bytes": size})
        if size <= target:
            if size >= target * (1 - SIZE_TOLERANCE) or links >= total:
                break
            under = max(under or (0, 0), (links, size))
        else:
            over = min(over or (total + 1, 0), (links, size))
        if under and over:
            (l0, s0), (l1, s1) = under, over
            following = int(l0 + (goal - s0) * (l1 - l0) / max(s1 - s0, 1))
            following = min(max(following, l0 + 1), l1 - 1)
        else:
            following = int(links * goal / size)
        following = max(1, min(total, following))
        if following == links or (under and over and over[0] - under[0] <= 1):
            break
        links = following
    if size > target or (under and size < under[1]):
        if under is None:
            raise SnmInputError(f"--target_size {asked:,} bytes: no pruning met it in "
                                f"{len(rounds)} rounds (the last: {size:,} bytes at "
                                f"{kept:,} links); give a larger size")
        pruned = run(dataclasses.replace(options, target_links=under[0], target_size=None),
                     beam_args, summary=False)
        kept, size = int(pruned["totals"]["links"]), scoring_bytes(options.out)
        rounds.append({"links": kept, "bytes": size})
    pruned = dict(pruned)
    pruned["pruning"] = {**pruned["pruning"], "target_size": asked, "size_rounds": rounds}
    manifests.write_manifest(pruned, options.out, known=pruned.get("checksums"))
    write_model_card(options.out, pruned)
    size = scoring_bytes(options.out)
    if summary:
        before = manifest["totals"]
        running.print_summary(
            f"snm prune: {kept:,} of {before['links']:,} links, {size:,} bytes for "
            f"--target_size {asked:,} ({len(rounds)} round(s)) -> {options.out}",
            pruned["totals"], None)
    return pruned


def run(options, beam_args=(), summary=True):
    """Prune ``options.model`` into ``options.out``; returns the pruned model's manifest.
    ``summary``: print its totals (and Beam metrics) as a table."""
    from snm_core.stages.validation import validate_directory
    manifest = validate_directory(options.model, "model").manifest
    if options.target_size is not None:
        return prune_to_size(options, manifest, beam_args, summary)
    if options.layout not in HASHED_LAYOUTS:  # refused before anything is pruned
        ngram_trie.ngram_span(manifest, options.model, options.layout)
    ngram = parse_config(manifest["config"]).ngram_order is not None
    criterion = options.criterion or ("backoff" if ngram else "mass")
    if criterion == "reestimate":
        return prune_reestimate(options, manifest, check_heldout, summary)
    if criterion != "backoff":
        if options.heldout:
            check_heldout(options.heldout, manifest)
        return prune_by_buckets(options, manifest, criterion, beam_args, summary)
    if options.heldout:
        raise SnmInputError("--heldout weighs features for --criterion mass or count; "
                            "backoff weighs contexts by their training counts")
    return prune_backoff(options, manifest, beam_args, summary)
