"""snm prune: a model pruned to a number of links, or by a score threshold.

    snm prune --model model/ --out pruned/ (--target_links N | --threshold T)
              [--criterion backoff|mass|count] [--heldout JOIN [--heldout_weight 8]]

Reads a model directory (``snm apply`` or ``snm prune``); writes a complete model
directory of the same buckets (``eval``, ``score`` and, for n-gram models pruned by
``backoff``, ``export-arpa`` read it), with each feature's M_f*, count and
diversity recomputed from the links it keeps and features left without links
dropped.  Its manifest gains ``pruning``; the model card says what was removed.

Three criteria (:mod:`snm_core.prune.criteria` has the arithmetic):

* ``backoff`` (default for n-gram configurations): the relative entropy that
  removing a link causes in the model's back-off form, the pruned model closed
  under ARPA's rules.  The back-off form is joins by suffix key over key-range
  partitions on scratch storage (``OUT/_scratch``), one Beam element a model bucket
  or a partition, a ``GroupByKey`` on the partition between steps
  (:mod:`snm_core.arpa.backoff`); then passes over the partitions find the cut
  that keeps the target, and each model bucket is rewritten with the rows its
  partitions keep.  A worker holds one partition (``--memory``) or one model bucket.
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
from typing import Optional
import io
import math
import time

import apache_beam as beam
import numpy as np

from pipelines import running, shuffle
from snm_core.io import losscheck, model_files, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import PROCESS_BYTES, MemoryBudget, parse_size
from snm_core.arpa import backoff
from snm_core.prune import criteria as prune_lib
from snm_core.scoring.card import write_model_card
from snm_core.scoring.compact import (HASHED_LAYOUTS, compile_model, predicted_scoring_bytes,
                                    scoring_bytes)
from snm_core.scoring.layouts import ngram_trie
from snm_core.prune.backoff import KeepRule, PruneJob, select_cut
from snm_core.stages import manifests
from snm_core.text.config import parse_config

CRITERIA = ("backoff",) + tuple(prune_lib.BUCKET_CRITERIA)
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


def write_manifest(totals, out, manifest, pruning):
    """Checks what was read against the source's totals, then writes the manifest."""
    with losscheck.Checks("prune") as checks:
        checks.each_once("buckets", range(manifest["num_buckets"]),
                         [t["bucket"] for t in totals])
        for name in ("links", "features"):
            checks.equal(f"{name} in the model", manifest["totals"][name], f"{name} read",
                         sum(t[f"{name}_read"] for t in totals))
    return prune_lib.finish_output(out, manifest, sum(t["links"] for t in totals),
                                   sum(t["features"] for t in totals), pruning)


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
    return _finish(options, manifest, metrics, summary)


# --- the backoff criterion: steps over partitions (snm_core/arpa/backoff.py) -------------

class ScanBuckets(beam.DoFn):
    """A group of model buckets -> their contexts and entries cut into partitions;
    messages to every partition."""

    def __init__(self, job):
        self.job = job
        self.progress = running.worker_progress("prune", "reading the model", "bucket group",
                                                job.scans)

    def setup(self):
        running.configure_allocators()

    def process(self, group):
        yield from backoff.send(group, {}, self.job.scan(group), self.job.partitions)
        self.progress.update()


class RunStep(beam.DoFn):
    """``(partition, messages from every producer)`` -> the step on that partition;
    messages to ``destinations`` partitions.

    Every producer of the step before (``previous``) is done, so the tables it was the
    last to read are deleted (by partition 0): the scratch peaks at about half what
    keeping every table to the end took.  (A runner that recomputes a finished step,
    as Dask does for results a lost worker held, then fails on a missing file
    instead of writing anything wrong.)
    """

    def __init__(self, job, step, producers, destinations, previous=None):
        self.job, self.step, self.previous = job, step, previous
        self.producers, self.destinations = producers, destinations
        self.progress = running.worker_progress(
            "prune", f"{step[0]} join of order {step[1]}", "partition", job.partitions)

    def setup(self):
        running.configure_allocators()

    def process(self, element):
        partition, messages = element
        facts = backoff.receive("prune", self.producers, list(messages))
        if partition == 0 and self.previous is not None:
            for table in self.job.consumed(self.previous):
                self.job.remove(table)
        partial = self.job.run_step(self.step, partition, facts)
        self.progress.update()
        yield from backoff.send(partition, facts, partial, self.destinations)


class KeepPartition(beam.DoFn):
    """Partition -> the model rows its kept entries own, cut by model bucket."""

    def __init__(self, job, rule):
        self.job, self.rule = job, rule

    def setup(self):
        running.configure_allocators()

    def process(self, partition):
        yield from backoff.send(partition, {}, self.job.keep(partition, self.rule),
                                self.job.num_buckets)


class PruneBackoffBucket(beam.DoFn):
    """``(bucket, messages of every partition)`` -> writes the bucket's kept rows,
    renormalised; yields what it read and kept."""

    def __init__(self, job, out):
        self.job, self.out = job, out
        self.progress = running.worker_progress("prune", "writing", "bucket", job.num_buckets)

    def setup(self):
        running.configure_allocators()

    def process(self, element):
        bucket, messages = element
        self.progress.update()
        facts = backoff.receive("prune", range(self.job.partitions), list(messages))
        features, matrix = (model_files.read_bucket(self.job.model, table, bucket,
                                                    self.job.num_buckets)
                            for table in ("features", "matrix"))
        keep = np.zeros(matrix.num_rows, bool)
        keep[self.job.kept_rows(bucket)] = True
        kept_features, kept_matrix = prune_lib.pruned_tables(features, matrix, keep)
        prune_lib.write_bucket(self.out, bucket, self.job.num_buckets, kept_features,
                               kept_matrix)
        yield {"bucket": bucket, "links_read": matrix.num_rows,
               "features_read": features.num_rows, "links": kept_matrix.num_rows,
               "features": kept_features.num_rows, "lowest_kept": facts["lowest_kept"]}


def _save_arrays(arrays, path):
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    storage.write_bytes(buffer.getvalue(), path)


def _load_arrays(path):
    with np.load(io.BytesIO(storage.read_bytes(path))) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def _sum_histograms(results):
    return [sum(r[i] for r in results) for i in range(2)]


def _concatenate_gathered(results):
    return [np.concatenate([r[0] for r in results], axis=1),
            np.concatenate([r[1] for r in results])]


def _save_totals(elements, partitions, path):
    facts = backoff.receive("prune", range(partitions), [m for _, m in elements])
    storage.write_json(facts, path)


def prune_backoff(options, manifest, beam_args=(), summary=True):
    """The ``backoff`` pipelines (see the module docstring); returns the pruned
    manifest (``summary``: see :func:`run`)."""
    scratch = shuffle.scratch_directory(options.out)
    budget = options.memory
    workers = running.workers_per_process(beam_args)
    budget.require("prune", {"the process": PROCESS_BYTES,
                             "a partition a worker": workers * backoff.MIN_MEMORY})
    working = budget.working()
    job = PruneJob.plan(options.model, manifest, scratch, working, workers)
    runs = []

    def run(build):
        runs.append(running.run_pipeline(beam_args, build, "prune", shared_paths=[options.out]))

    def collect(name, step, combine):
        """``step(partition)`` on every partition, the results combined in this process.

        Each partition's arrays go to a scratch file of their own, never through the
        runner: a runner buffers, pickles and groups elements, several copies of
        what the selection gathers."""
        directory = storage.join(scratch, name)

        def path(partition):
            return storage.join(directory, f"{partition:05d}.npz")

        run(lambda p: (
            p | "Partitions" >> beam.Create(range(job.partitions))
            | name.capitalize() >> beam.Map(lambda q: _save_arrays(step(q), path(q)))))
        results = [_load_arrays(path(q)) for q in range(job.partitions)]
        storage.remove_tree(directory)
        return combine(results)

    prune_lib.start_output(options.model, options.out)
    if storage.exists(scratch):  # a killed run's: the run lock says none is live
        print(f"snm prune: removing {scratch}, left by a run that did not finish")
        storage.remove_tree(scratch)
    started = time.monotonic()
    try:
        totals_path = storage.join(scratch, "totals.json")

        def form(p):
            messages = (p | "Buckets" >> beam.Create(range(job.scans))
                        | "Scan" >> beam.ParDo(ScanBuckets(job)))
            producers, steps = range(job.scans), job.steps()
            for i, step in enumerate(steps):
                label = f"{step[0].capitalize()}{step[1]}"
                messages = (messages | f"To{label}" >> beam.GroupByKey()
                            | label >> beam.ParDo(RunStep(
                                job, step, producers, job.partitions if i + 1 < len(steps)
                                else 1, steps[i - 1] if i else None)))
                producers = range(job.partitions)
            _ = messages | "Totals" >> running.CallOnce(_save_totals, job.partitions,
                                                        totals_path)

        run(form)
        facts = storage.read_json(totals_path)
        backoff.check_totals("prune", manifest, facts, job.order)
        if summary:
            print(f"snm prune: back-off form and scores of {facts['links']:,} links in "
                  f"{job.partitions} partition(s) ({time.monotonic() - started:.1f} s)")
        if options.target_links is not None:
            rule = KeepRule(cut=select_cut(
                lambda level, prefix: collect("histogram", lambda q: job.histogram(
                    q, level, prefix), _sum_histograms),
                lambda prefix: collect("gather", lambda q: job.gather(q, prefix),
                                       _concatenate_gathered),
                options.target_links, max(1, working // 128)))
        else:
            rule = KeepRule(threshold=options.threshold)
        pruning = {"criterion": "relative entropy in the back-off form "
                                "(snm_core/prune/backoff.py)",
                   "suffix_closed": True, "target_links": options.target_links,
                   "threshold": options.threshold,
                   "links_before": manifest["totals"]["links"],
                   "features_before": manifest["totals"]["features"], "source": options.model}

        def write(totals):
            if options.target_links is not None:
                lowest = totals[0]["lowest_kept"] if totals else []
                pruning["threshold"] = min(lowest) if lowest else math.inf
            return write_manifest(totals, options.out, manifest, pruning)

        run(lambda p: (
            p | "Partitions" >> beam.Create(range(job.partitions))
            | "Keep" >> beam.ParDo(KeepPartition(job, rule))
            | "ToBuckets" >> beam.GroupByKey()
            | "Prune" >> beam.ParDo(PruneBackoffBucket(job, options.out))
            | "WriteManifest" >> running.CallOnce(write)))
    finally:
        storage.remove_tree(scratch)
    return _finish(options, manifest, runs[-1], summary)


def _finish(options, manifest, metrics, summary=True):
    """compact/, the model card and the summary of a pruned model whose manifest is
    written."""
    pruned = storage.read_json(storage.join(options.out, tables.MANIFEST))
    compile_model(options.out, options.layout, memory=options.memory)
    write_model_card(options.out, pruned)
    before, after = manifest["totals"], pruned["totals"]
    if summary:
        running.print_summary(f"snm prune: {after['links']:,} of {before['links']:,} links "
                              f"({after['links'] / max(before['links'], 1):.1%}), "
                              f"{after['features']:,} of {before['features']:,} features -> "
                              f"{options.out}", after, metrics)
    return pruned


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
    if criterion != "backoff":
        if options.heldout:
            check_heldout(options.heldout, manifest)
        return prune_by_buckets(options, manifest, criterion, beam_args, summary)
    if options.heldout:
        raise SnmInputError("--heldout weighs features for --criterion mass or count; "
                            "backoff weighs contexts by their training counts")
    return prune_backoff(options, manifest, beam_args, summary)
