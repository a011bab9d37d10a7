"""snm join: the held-out events and "small M", the rows of the count matrix they touch.

    snm join --count count/ --heldout dev.txt --out join/

Reads: a count directory (``snm count``) and held-out text (a file or glob,
plain or .gz).  The held-out text is read with the count's vocabulary and
configuration; with corpus tags every feature appears once per training tag.
Writes to ``--out``:

* ``events-FFFF-LLLLLLLLL.parquet`` (one per input batch; F = file index,
  L = first line): one row per predicted word: ``file`` int16, ``line`` int64
  (1-based), ``target`` int32, ``features`` list<uint64> (every feature key
  of the event, whether or not training saw it);
* ``small_m-BBBBB-of-NNNNN.parquet``: every link (f, w) of every training
  feature f that occurs in the events: ``feature`` uint64, ``word`` int32,
  ``count`` int64 C(f,w), ``continuation`` int64 (the link's continuation
  count, see :mod:`snm_core.io.tables`), ``feature_count`` int64 C(f,*),
  ``diversity`` int64, ``tag`` int16, ``type`` int16; sorted by (feature, word), in the
  count's key-range buckets;
* ``manifest.json`` (last).

The join is a CoGroupByKey on the key-range bucket: the held-out side brings
the distinct feature keys of each bucket, the count side the bucket's files;
the worker that gets a bucket reads only that bucket's count files and keeps
the rows of the held-out keys (a partitioned merge join: no worker holds
all counts, and the counts are not shuffled).
"""

import dataclasses
from typing import Optional

import apache_beam as beam
import numpy as np

from pipelines import count_directory, reading, running
from snm_core.join import small_m
from snm_core.io import key_ranges, losscheck, storage, tables, textfile
from snm_core.io.arrays import sorted_distinct
from snm_core.io.checkpoints import checkpoint
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import MemoryBudget
from snm_core.stages import manifests
from snm_core.text.tokenize import tokenize

#: What a join worker holds, in bytes, a link of the count bucket it joins: the bucket's
#: links and features as read, and the rows it selects.
JOIN_LINK_BYTES = 90
HELDOUT_STATS = ("sentences", "tokens", "oov_tokens", "empty_lines", "invalid_lines",
                 "marker_tokens", "events", "feature_occurrences")


class ExtractHeldoutEvents(beam.DoFn):
    """TextShard -> an events file per batch; yields ``("keys", (bucket, keys))`` and stats."""

    def __init__(self, settings, out, batch_bytes, encoding="utf-8"):
        self.settings = settings
        self.out = out
        self.reader = reading.ShardReader(batch_bytes, encoding, running.text_progress("join"))
        self.counters = {name: running.counter(name) for name in HELDOUT_STATS}

    def setup(self):
        running.configure_allocators()
        self.vocab, self.extractor = self.settings.build()

    def process(self, shard):
        shard_stats = {"shards": [shard.name]}
        for batch in self.reader.batches(shard, shard_stats):
            yield from self._batch(batch)
        yield "stats", shard_stats

    def _batch(self, batch):
        sentences, kept, stats = tokenize(batch.lines, self.vocab)
        events = self.extractor.extract(sentences)  # every feature once per training tag
        stats = {**vars(stats), "events": events.num_events,
                 "feature_occurrences": events.num_pairs}
        for name, value in stats.items():
            self.counters[name].inc(value)
        table = small_m.events_table(events, batch.source, batch.first_line + kept)
        name = f"events-{batch.source:04d}-{batch.first_line:09d}.parquet"
        storage.write_parquet(table, storage.join(self.out, name))
        keys = sorted_distinct(events.key)
        buckets = key_ranges.bucket_of(keys, self.settings.num_buckets)
        bounds = np.searchsorted(buckets, np.arange(self.settings.num_buckets + 1))
        for b in np.flatnonzero(np.diff(bounds)):
            yield "keys", (int(b), keys[bounds[b]:bounds[b + 1]])
        yield "stats", {**stats, "event_files": [name], "event_rows": table.num_rows}


class JoinBucket(beam.DoFn):
    """``(bucket, {"heldout": [keys...], "counts": [paths]})`` -> small_m file; yields stats."""

    def __init__(self, out, num_buckets):
        self.out = out
        self.num_buckets = num_buckets
        self.links_counter = running.counter("small_m_links")
        self.progress = running.worker_progress("join", "buckets", "bucket", num_buckets)

    def process(self, element):
        bucket, grouped = element
        parts = list(grouped["heldout"])
        keys = sorted_distinct(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        (paths,) = grouped["counts"]
        # Not the features' words: a list column, the slowest to decode, small M keeps none.
        features = storage.read_parquet(paths["features"], columns=list(small_m.FEATURE_COLUMNS))
        links = storage.read_parquet(paths["links"], columns=list(small_m.LINK_COLUMNS))
        rows = small_m.select_rows(features, links, keys)
        name = tables.bucket_file("small_m", bucket, self.num_buckets)
        storage.write_parquet(rows, storage.join(self.out, name))
        checkpoint("join.bucket")  # fault tests stop a worker here
        self.progress.update()
        self.links_counter.inc(rows.num_rows)
        yield {"small_m_links": rows.num_rows,
               "small_m_features": len(sorted_distinct(rows["feature"].to_numpy())),
               "heldout_features": len(keys), "buckets": [bucket]}


def check_join(stats, shards, num_buckets):
    """What the join read against what it wrote (:mod:`snm_core.io.losscheck`)."""
    with losscheck.Checks("join") as checks:
        checks.each_once("text shards", shards, stats.get("shards", []))
        checks.each_once("buckets", range(num_buckets), stats.get("buckets", []))
        checks.equal("held-out words and sentence ends read",
                     stats.get("tokens", 0) + stats.get("sentences", 0),
                     "held-out events written", stats.get("event_rows", 0))
        checks.equal("held-out events extracted", stats.get("events", 0),
                     "held-out events written", stats.get("event_rows", 0))


def write_manifest(results, out, settings, heldout, shards, encoding="utf-8",
                   skip_invalid=False):
    stats = {}
    for result in results:
        losscheck.add_totals(stats, result)
    check_join(stats, shards, settings.num_buckets)
    reading.check_invalid_lines(stats, encoding, skip_invalid)
    for name in ("shards", "buckets", "event_rows"):
        stats.pop(name, None)
    event_files = sorted(stats.pop("event_files", []))
    small_m_files = [tables.bucket_file("small_m", b, settings.num_buckets)
                     for b in range(settings.num_buckets)]
    counts = settings.manifest
    manifest = manifests.Join(
        counts=settings.counts_dir, heldout=heldout, config=counts.config, tags=counts.tags,
        feature_types=counts.feature_types,
        vocabulary_fingerprint=counts.vocabulary_fingerprint, num_buckets=settings.num_buckets,
        files=sorted(event_files + small_m_files), totals=stats)
    storage.remove_stale(out, set(manifest.files), ["events-*.parquet", "small_m-*.parquet"])
    return manifest.write(out)


class JoinHeldout(beam.PTransform):
    """Held-out TextShard s -> events files and small-M files in ``out``; output: stats dicts."""

    def __init__(self, settings, out, batch_bytes=textfile.DEFAULT_BATCH_BYTES,
                 encoding="utf-8"):
        super().__init__()
        self.settings = settings
        self.out = out
        self.batch_bytes = batch_bytes
        self.encoding = encoding

    def expand(self, shards):
        extracted = shards | "ExtractEvents" >> beam.ParDo(
            ExtractHeldoutEvents(self.settings, self.out, self.batch_bytes, self.encoding))
        heldout_keys = (extracted
                        | "Keys" >> beam.Filter(lambda kv: kv[0] == "keys")
                        | "BucketKeys" >> beam.Values())
        count_files = (shards.pipeline
                       | "CountBuckets" >> beam.Create(
                           [(b, self.settings.bucket_paths(b))
                            for b in range(self.settings.num_buckets)],
                           reshuffle=False))  # the CoGroupByKey spreads them
        joined = ({"heldout": heldout_keys, "counts": count_files}
                  | "CoGroupByBucket" >> beam.CoGroupByKey()
                  | "JoinBuckets" >> beam.ParDo(JoinBucket(self.out, self.settings.num_buckets)))
        event_stats = (extracted
                       | "Stats" >> beam.Filter(lambda kv: kv[0] == "stats")
                       | "StatsValues" >> beam.Values())
        return (joined, event_stats) | "AllStats" >> beam.Flatten()


@dataclasses.dataclass(frozen=True)
class JoinOptions:
    """What ``snm join`` does; one field per command-line flag."""

    count: str  # the count directory
    heldout: str  # a file or glob
    out: str
    batch_bytes: int = textfile.DEFAULT_BATCH_BYTES
    memory: Optional[MemoryBudget] = None  # --memory (a text is parsed); None: the default
    encoding: str = "utf-8"
    skip_invalid: bool = False

    def __post_init__(self):
        running.absolute_paths(self, "count", "heldout", "out")
        object.__setattr__(self, "memory", MemoryBudget.of(self.memory))
        textfile.check_encoding(self.encoding)


def run(args, beam_args=(), summary=True):
    """Run the join pipeline; returns its manifest.  ``summary``: print its totals (and
    Beam metrics) as a table."""
    beam_args = list(beam_args)
    settings = count_directory.CountDirectory.load(args.count)
    args.memory.require("join", running.bucket_memory(
        settings.manifest, running.workers_per_process(beam_args), JOIN_LINK_BYTES))
    paths = storage.glob(args.heldout)
    if not paths:
        raise SnmInputError(f"--heldout {args.heldout!r} matches no file")
    storage.makedirs(args.out)
    storage.remove_file(storage.join(args.out, tables.MANIFEST))

    def build(p):
        shards = reading.text_shards(list(enumerate(paths)), p.options)
        _ = (p
             | "ListShards" >> beam.Create(shards)
             | "Join" >> JoinHeldout(settings, args.out, args.batch_bytes, args.encoding)
             | "WriteManifest" >> running.CallOnce(write_manifest, args.out, settings,
                                                  args.heldout, [s.name for s in shards],
                                                  args.encoding, args.skip_invalid))

    metrics = running.run_pipeline(beam_args, build, "join", shared_paths=[args.out],
                                   text=paths)
    manifest = storage.read_json(storage.join(args.out, tables.MANIFEST))
    if summary:
        running.print_summary(f"snm join: {manifest['totals']['small_m_links']:,} small-M "
                              f"links -> {args.out}", manifest["totals"], metrics)
    return manifest
