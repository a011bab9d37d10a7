"""The counts a model of a given size is fitted on: a count thresholded again
(:mod:`snm_core.count.size_thresholds`), ``snm train --prune_to`` of a model that is
not an n-gram model.

Two pipelines over the count's buckets: the first sums each bucket's histograms of link
counts, from which the lowest level of link thresholds whose model fits is chosen, and
the largest share of the step to it that fits too; the second reads each bucket back
as one part, as ``--add_to`` does, and merges it as the count's own merge does with
those thresholds (and that share), so that the output is the count they would have
given (continuation counts counted over the kept extensions).
"""

import dataclasses
import io
from typing import Optional

import apache_beam as beam
import numpy as np

from pipelines import count_links
from pipelines import count_directory, runners, running
from pipelines.shuffle import ArrayShuffle, scratch_directory
from snm_core.count import budget as count_budget
from snm_core.count import continuation, size_thresholds, thresholds
from snm_core.io import losscheck, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import MemoryBudget, parse_size
from snm_core.scoring.compact import predicted_scoring_bytes
from snm_core.stages import manifests
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor

HISTOGRAM_FILE = "_link_count_histograms.npz"


@dataclasses.dataclass(frozen=True)
class SelectOptions:
    """What the select stage does."""

    count: str
    out: str
    target_links: Optional[int] = None
    target_size: Optional[int] = None  # bytes of the scoring directory (snm compact --out)
    layout: str = "hashed"  # the scoring directory's: hashed or packed
    memory: Optional[MemoryBudget] = None  # --memory (a text is parsed); None: the default

    def __post_init__(self):
        running.absolute_paths(self, "count", "out")
        if isinstance(self.target_size, str):
            object.__setattr__(self, "target_size", parse_size(self.target_size, "--prune_to"))
        if (self.target_links is None) == (self.target_size is None):
            raise SnmInputError("give a number of links or a size to select the counts for")
        if self.layout not in ("hashed", "packed"):
            raise SnmInputError(f"--layout {self.layout}: a model that is not an n-gram model "
                                "is stored hashed or packed; give one of those")
        object.__setattr__(self, "memory", MemoryBudget.of(self.memory))


class BucketHistograms(beam.DoFn):
    """Bucket number -> :func:`snm_core.count.size_thresholds.histograms` of it."""

    def __init__(self, source, widths):
        self.source, self.widths = source, widths
        self.progress = running.worker_progress("select", "link counts read", "bucket",
                                                source.num_buckets)

    def process(self, bucket):
        paths = self.source.bucket_paths(bucket)
        features = storage.read_parquet(paths["features"],
                                        columns=["type", "diversity", "words"])
        links = storage.read_parquet(paths["links"], columns=["count", "word"])
        yield size_thresholds.histograms(features, links,
                                         len(self.source.manifest.feature_types), self.widths)
        self.progress.update()


def _sum(parts):
    """The sum of :class:`~snm_core.count.size_thresholds.Histograms` (None for none), as
    Beam's combiner: each worker adds its buckets' before they are sent."""
    total = None
    for part in parts:
        if part is not None:
            total = part if total is None else total + part
    return total


def _save(totals, path):
    buffer = io.BytesIO()
    np.savez(buffer, **_sum(totals).arrays())
    storage.write_bytes(buffer.getvalue(), path)


def fits(options, vocabulary_size, vocabulary_bytes):
    """``fits(features, links)``: whether a model of those fits the target."""
    if options.target_links is not None:
        return lambda features, links: links <= options.target_links
    return lambda features, links: options.target_size >= predicted_scoring_bytes(
        features, links, options.layout, vocabulary_size, vocabulary_bytes)


def write_manifest(written, out, source, min_feature_count, min_link_count, selection):
    """Checks what was written against what was read; writes the manifest (last)."""
    counted, known = {}, {}
    for part in written:
        losscheck.add_totals(counted, part["totals"])
        known.update(part.get("checksums", {}))  # taken as its files were written
    with losscheck.Checks("select") as checks:
        checks.equal("C(f,*) of the features read", counted.get("read_feature_counts", 0),
                     "the link counts written and those left out",
                     counted.get("link_count_sum", 0)
                     + counted.get("below_threshold_occurrences", 0))
    totals = dict(source.totals)
    totals.update(links=counted.get("links", 0), features=counted.get("features", 0),
                  link_count_sum=counted.get("link_count_sum", 0))
    # What the source count left out and this one: every occurrence not in a kept link.
    totals["below_threshold_occurrences"] = (totals["feature_occurrences"]
                                             - totals["link_count_sum"])
    files = [tables.bucket_file(prefix, b, source.num_buckets)
             for prefix in ("features", "links") for b in range(source.num_buckets)]
    manifest = manifests.Count(
        config=source.config, tags=list(source.tags), feature_types=list(source.feature_types),
        vocabulary_size=source.vocabulary_size,
        vocabulary_fingerprint=source.vocabulary_fingerprint, num_buckets=source.num_buckets,
        sources=list(source.sources), files=sorted(files + ["vocab.txt"]), totals=totals,
        min_feature_count=dict(min_feature_count), min_link_count=dict(min_link_count),
        extra={"selection": selection})
    return manifest.write(out, known=manifests.taken_checksums(known))


def run(options, beam_args=(), summary=True):
    """Select ``options.count`` into ``options.out``; returns the new count's manifest."""
    source_dir = count_directory.CountDirectory.load(options.count)
    source = source_dir.manifest
    config = parse_config(source.config)
    types = config.feature_types()
    widths = size_thresholds.root_widths(types, continuation.parent_types(config))
    storage.makedirs(options.out)
    storage.remove_file(storage.join(options.out, tables.MANIFEST))
    histogram_path = storage.join(options.out, HISTOGRAM_FILE)

    def histograms(p):
        _ = (p
             | "Buckets" >> beam.Create(list(range(source.num_buckets)))
             | "Histograms" >> beam.ParDo(BucketHistograms(source_dir, widths))
             | "Sum" >> beam.CombineGlobally(_sum)
             | "Save" >> running.CallOnce(_save, histogram_path))

    running.run_pipeline(beam_args, histograms, "select", shared_paths=[options.out])
    with np.load(io.BytesIO(storage.read_bytes(histogram_path))) as saved:
        counts = size_thresholds.Histograms(**{name: saved[name] for name in saved.files})
    storage.remove_file(histogram_path)
    vocab_bytes = storage.file_stamp(storage.join(options.count, "vocab.txt"))[1]
    given = thresholds.per_type(source.min_link_count, source.feature_types)
    level, minimum, partial, features, links = size_thresholds.choose(
        counts, types, given, fits(options, source.vocabulary_size, vocab_bytes))
    min_link_count = {name: int(n) for name, n in zip(source.feature_types, minimum) if n > 1}
    selection = {"level": level, "partial": partial and {
                     "below": {name: int(n) for name, n, m in zip(source.feature_types,
                                                                  partial[0], minimum) if n < m},
                     "share": partial[1] / size_thresholds.BINS},
                 "links": links, "features": features,  # as predicted; the totals agree
                 "target_links": options.target_links,
                 "target_size": options.target_size, "layout": options.layout,
                 "links_before": source.totals["links"], "source": options.count,
                 "predicted_bytes": predicted_scoring_bytes(
                     features, links, options.layout, source.vocabulary_size, vocab_bytes)}

    storage.link_or_copy(storage.join(options.count, "vocab.txt"),
                         storage.join(options.out, "vocab.txt"))
    scratch = scratch_directory(options.out, None, running.workers_are_local(beam_args))
    workers = running.workers_per_process(beam_args)
    plan = count_budget.plan_memory(
        options.memory, workers, source.totals["tokens"],
        FeatureExtractor(config).occurrences_per_event, num_buckets=source.num_buckets,
        fixed_buckets=True)

    def rethreshold(p):
        shuffle = ArrayShuffle("files", scratch, release=runners.kind(p.options) == "local")
        _ = (p
             | "Buckets" >> beam.Create(list(range(source.num_buckets)))
             | "ReadCount" >> beam.ParDo(count_links.ReadCountBucket(
                 source_dir, options.count, source.num_buckets, shuffle, collapsed=True))
             | "GroupByBucket" >> beam.GroupByKey()
             | "MergeBuckets" >> beam.ParDo(count_links.MergeBucket(
                 source_dir, options.out, source.num_buckets, shuffle, plan.merge_rows,
                 source.min_feature_count, min_link_count,
                 partial and (partial[0], partial[1], widths)))
             | "GroupByLinkBucket" >> beam.GroupByKey()
             | "WriteLinks" >> beam.ParDo(count_links.WriteLinks(
                 options.out, source.num_buckets, shuffle, plan.merge_rows))
             | "WriteManifest" >> running.CallOnce(write_manifest, options.out, source,
                                                   source.min_feature_count, min_link_count,
                                                   selection))

    try:
        metrics = running.run_pipeline(beam_args, rethreshold, "select",
                                       shared_paths=[options.out, scratch])
    finally:
        ArrayShuffle("files", scratch).cleanup()
    manifest = storage.read_json(storage.join(options.out, tables.MANIFEST))
    if summary:
        running.print_summary(
            f"snm select: level {level}, {manifest['totals']['links']:,} of "
            f"{source.totals['links']:,} links -> {options.out}", manifest["totals"], metrics)
    return manifest

