"""The count's Beam steps (:mod:`pipelines.count` runs them): text shards to partial sums
cut by key-range bucket (:class:`ExtractLinkPartials`), each bucket merged into its
features file (:class:`MergeBucket`), each bucket's links file with its continuation
counts (:class:`WriteLinks`), and an existing count's buckets read back as partials
(:class:`ReadCountBucket`: ``--add_to``, ``snm select``); :class:`CountLinks` wires them.
"""


import apache_beam as beam
import numpy as np
import pyarrow.compute as pc

from pipelines import count_directory, reading, running
from pipelines.count_reference import ReferenceLinkPartials
from pipelines.shuffle import ArrayShuffle
from snm_core.count import continuation, counting, thresholds
from snm_core.count.budget import MAX_OCCURRENCES_PER_CHUNK, MERGE_CHUNK_ROWS
from snm_core.io import key_ranges, losscheck, storage, tables
from snm_core.io.checkpoints import checkpoint
from snm_core.stages import manifests
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import tokenize

#: The total of what ``--min_feature_count`` and ``--min_link_count`` left out
#: (:mod:`snm_core.count.thresholds`): feature occurrences, whether a sketch dropped them
#: before the merge or the merge after (not the features and links they made: the
#: feature sketch drops occurrences uncounted).
BELOW_THRESHOLD = ("below_threshold_occurrences",)
#: The Beam counter of the bytes a count's partials take in its scratch (the pass planning
#: of pipelines/count.py reads it).
SCRATCH_PART_BYTES = "scratch_part_bytes"
STAT_NAMES = ("sentences", "tokens", "oov_tokens", "empty_lines", "invalid_lines",
              "marker_tokens", "events", "feature_occurrences")


class _Extractor:
    """Vocabulary and feature extractor, built once per worker from picklable settings.

    The vocabulary travels as the name of the ``vocab.txt`` written to the output
    directory before the pipeline starts (see :func:`count_directory.shared_vocabulary`).
    """

    def __init__(self, config_text, tags, vocab_path, vocab_fingerprint):
        self.config_text, self.tags = config_text, tuple(tags)
        self.vocab_path, self.vocab_fingerprint = vocab_path, vocab_fingerprint

    def extractor(self):
        return FeatureExtractor(parse_config(self.config_text), self.tags)

    def build(self):
        return (count_directory.shared_vocabulary(self.vocab_path, self.vocab_fingerprint),
                self.extractor())


class ExtractLinkPartials(beam.DoFn):
    """TextShard -> ``(bucket, ("part", payload))`` and ``(0, ("stats", totals))``.

    With ``sketches`` (:class:`pipelines.count_sketch.SketchFile` s of a thresholded
    count), what cannot reach its threshold goes before it is summed: a feature's
    occurrences, a batch's links (collapsed into one row a feature).

    Each batch's links are summed at once (:func:`snm_core.count.counting.batch_partials`);
    the results are held until ``flush_links`` links are pending (and at the end
    of the shard), then cut into buckets, one part per bucket sent through
    ``shuffle``.  Summing across batches is left to the merge: it would cost
    more than the smaller shuffle saves.  Everything is emitted from
    ``process``, never from ``finish_bundle``: Beam's Dask runner drops what a
    DoFn emits there (``tests/upstream/beam_dask_finish_bundle.py``).
    """

    def __init__(self, settings, num_buckets, flush_links, shuffle, batch_bytes,
                 encoding="utf-8", sketches=(), buckets=None, stage="count"):
        self.settings = settings
        self.sketch_files = tuple(sketches)
        self.num_buckets = num_buckets
        # One pass of several (CountOptions.passes): the buckets it counts, whose feature
        # keys are a range (the others' occurrences go as soon as they are extracted),
        # and whether it reports the text's statistics (the first pass does).
        self.buckets = buckets or (0, num_buckets)
        self.text_stats = self.buckets[0] == 0
        self.key_range = None
        if self.buckets != (0, num_buckets):
            starts = key_ranges.bucket_starts(num_buckets)
            lo, hi = self.buckets
            self.key_range = (starts[lo], starts[hi] if hi < num_buckets else None)
        self.flush_links = flush_links
        self.shuffle = shuffle
        self.reader = reading.ShardReader(batch_bytes, encoding, running.text_progress(stage))
        self.counters = {name: running.counter(name)
                         for name in STAT_NAMES + BELOW_THRESHOLD + (SCRATCH_PART_BYTES,)}

    def setup(self):
        running.configure_allocators()
        self.vocab, self.extractor = self.settings.build()
        # Bound the arrays of one type's extraction (~70 bytes an occurrence) whatever
        # the config: a type has at most one pair per event and window.
        self.max_events = max(1, MAX_OCCURRENCES_PER_CHUNK
                              // self.extractor.max_windows_per_type)
        # Type ids (tag-major) of the features with no context words: their links are
        # summed over the shard (counting.ShardSums).
        self.context_free = np.array([t.num_words == 0 for t in self.extractor.feature_types]
                                     * len(self.extractor.tags))
        loaded = {f.kind: f.load(self.extractor, len(self.vocab)) for f in self.sketch_files}
        self.feature_sketch, self.link_sketch = loaded.get("features"), loaded.get("links")
        self.work = {}  # the sums' sort buffer, kept from chunk to chunk of a shard

    def process(self, shard):
        links, features, pending = [], [], 0
        shard_sums = counting.ShardSums(len(self.vocab))
        stats = {"shards": [shard.name]}
        dropped = 0  # occurrences the feature sketch left out, in this pass's buckets
        for batch in self.reader.batches(shard, stats):
            sentences, _, sentence_stats = tokenize(batch.lines, self.vocab)
            batch_stats = vars(sentence_stats)
            for chunk in sentences.chunks(self.max_events):
                losscheck.add_totals(batch_stats, {"events": chunk.num_events})
                # One feature type at a time: its arrays are a fraction of the chunk's.
                for events in self.extractor.extract_by_type(chunk, tags=[batch.source]):
                    losscheck.add_totals(batch_stats,
                                         {"feature_occurrences": events.num_pairs})
                    if self.key_range is not None:
                        events = events.select(self._in_range(events.key))
                    if self.feature_sketch is not None:
                        events, left_out = self.feature_sketch.keep_reaching(events)
                        dropped += left_out
                    if not events.num_pairs:
                        continue
                    batch_links, batch_features = counting.batch_partials(events, self.work)
                    if self.link_sketch is not None:
                        batch_links, batch_features = self.link_sketch.collapse(
                            batch_links, batch_features, events.type[0])
                    if len(batch_features["feature"]) == 1 and \
                            self.context_free[batch_features["type"][0]]:
                        shard_sums.add(batch_links, batch_features)
                        continue
                    links.append(batch_links)
                    features.append(batch_features)
                    pending += len(batch_links["feature"])
                    if pending >= self.flush_links:
                        yield from self._send(links, features)
                        links, features, pending = [], [], 0
                        checkpoint("count.flushed")  # fault tests stop a worker here
            if self.text_stats:
                for name, value in batch_stats.items():
                    self.counters[name].inc(value)
                losscheck.add_totals(stats, batch_stats)
        summed_links, summed_features = shard_sums.partials()
        yield from self._send(links + summed_links, features + summed_features)
        below = {BELOW_THRESHOLD[0]: dropped} if self.feature_sketch is not None else {}
        self.counters[BELOW_THRESHOLD[0]].inc(dropped)
        if self.text_stats:
            yield 0, ("stats", {**stats, **below})
        elif below:
            yield self.buckets[0], ("stats", below)
        self.work.clear()
        running.release_memory()

    def _in_range(self, keys):
        lo, hi = self.key_range
        return (keys >= lo) & (keys < hi) if hi is not None else keys >= lo

    def _send(self, links, features):
        if links:
            # Each partial is sorted by key, so its buckets are row ranges; the
            # shuffle writes every bucket's rows of all partials into one file.
            vocab_size = len(self.vocab)
            # (a pass's partials hold only its buckets' keys: the others' occurrences
            # went when they were extracted)
            cuts = [counting.cut_scratch_groups(link_part, feature_part, self.num_buckets,
                                                vocab_size, self.extractor.num_type_ids)
                    for link_part, feature_part in zip(links, features)]
            payloads = self.shuffle.send_cut({group: [cut[group] for cut in cuts]
                                              for group in cuts[0]}, by_bucket=True)
            for bucket, payload in payloads.items():
                self.counters[SCRATCH_PART_BYTES].inc(self.shuffle.stored_bytes(payload))
                yield bucket, ("part", payload)


class MergeBucket(beam.DoFn):
    """``(bucket, parts)`` -> the bucket's feature file; links and continuation names onward.

    Yields ``(bucket, ("links", payload))`` for this bucket's summed links,
    ``(parent bucket, ("extensions", payload))`` for the links they extend
    (see :func:`snm_core.count.continuation.extension_names`), the stats, and
    ``(bucket, ("checksums", {file: hex}))`` of its features file.
    """

    def __init__(self, settings, out, num_buckets, shuffle, merge_rows, min_feature_count=None,
                 min_link_count=None, partial=None, stage="count", buckets=None):
        self.settings = settings
        self.partial = partial  # (lower, cut, widths): snm_core.count.size_thresholds
        self.min_feature_count = min_feature_count or {}
        self.min_link_count = min_link_count or {}
        self.out = out
        self.num_buckets = num_buckets
        self.shuffle = shuffle
        self.merge_rows = merge_rows
        self.features_counter = running.counter("features")
        lo, hi = buckets or (0, num_buckets)
        self.progress = running.worker_progress(stage, "buckets merged", "bucket", hi - lo)

    def setup(self):
        running.configure_allocators()
        vocab, self.extractor = self.settings.build()
        self.vocab_size = len(vocab)  # the word of the link sketch's collapsed rows
        self.parents = continuation.parent_types(self.extractor.config)
        names = [t.name for t in self.extractor.feature_types]
        self.minimum = thresholds.per_type(self.min_feature_count, names)
        self.link_minimum = thresholds.per_type(self.min_link_count, names)
        self.work = {}  # the merge's sort buffer, kept from bucket to bucket of a bundle

    def process(self, element):
        bucket, parts = element
        payloads = []
        for kind, payload in parts:
            if kind == "stats":
                yield bucket, ("stats", payload)
            else:
                payloads.append(payload)
        # A chunk of parts at a time (a bucket may hold a frequent feature's partials
        # of every batch); in a chunk, one group of columns at a time, each read
        # straight into its concatenation: the links are summed before the features
        # are read.
        collapsed_word = self.vocab_size if self.min_link_count else None

        def read(start, stop, group):
            parts = payloads[start:stop]
            if group == "links":  # in the scratch's columns, which the merge reads
                return counting.links_from_scratch(
                    self.shuffle.receive_group(parts, "features", ("feature", "links")),
                    self.shuffle.receive_group(parts, "links"),
                    self.shuffle.receive_group(parts, "loose_links"))
            return counting.features_from_scratch(
                self.shuffle.receive_group(parts, "features", ("feature", "type", "width")),
                self.shuffle.receive_group(parts, "feature_words"))

        links, features, collisions, orphaned = counting.merge_bucket_chunks(
            [self.shuffle.rows(p, "links") + self.shuffle.rows(p, "loose_links")
             for p in payloads], read,
            len(self.extractor.feature_types), self.merge_rows, collapsed_word, self.work)
        self.shuffle.release(payloads)  # this bucket's parts, read
        left_out = {}
        if self.min_feature_count or self.min_link_count:
            features, links, left_out = thresholds.keep_counted(
                features, links, self.minimum, self.link_minimum, collapsed_word, self.partial)
            left_out["below_threshold_occurrences"] += orphaned
        name = tables.bucket_file("features", bucket, self.num_buckets)
        digest = manifests.checksum_digest()
        storage.write_parquet(features, storage.join(self.out, name), digest)
        checkpoint("count.merged")  # fault tests stop a worker here, mid-merge
        self.progress.update()
        self.features_counter.inc(features.num_rows)
        yield bucket, ("stats", {"features": features.num_rows, "key_collisions": collisions,
                                 **left_out})
        yield bucket, ("checksums", {name: digest.hexdigest()})
        # Without their features' keys: WriteLinks reads them from the features file.
        yield bucket, ("links", self.shuffle.send(counting.merged_links_to_scratch(
            links, features["feature"].to_numpy(), self.vocab_size)))
        parent_feature, word = continuation.extension_names(features, links, self.extractor,
                                                            self.parents)
        # Cut by the parent feature's bucket, the words as narrow as the scratch keeps them.
        names, bounds = continuation.names_by_bucket(
            parent_feature, word, self.num_buckets,
            counting.scratch_word_type(self.vocab_size))
        payloads = self.shuffle.send_cut({"extensions": [(names, bounds)]}, by_bucket=True)
        for target, payload in payloads.items():
            yield target, ("extensions", payload)

    def finish_bundle(self):
        self.work.clear()
        running.release_memory()


class WriteLinks(beam.DoFn):
    """``(bucket, parts)`` -> the bucket's links file with continuation counts (the names
    read ``merge_rows`` at a time at most); yields totals and its files' checksums."""

    def __init__(self, out, num_buckets, shuffle, merge_rows, stage="count"):
        self.out = out
        self.num_buckets = num_buckets
        self.shuffle = shuffle
        self.merge_rows = merge_rows
        self.links_counter = running.counter("links")
        self.progress = running.worker_progress(stage, "buckets written", "bucket", num_buckets)

    def setup(self):
        running.configure_allocators()

    def process(self, element):
        bucket, parts = element
        links, extensions, totals, links_payload = None, [], {}, None
        checksums = {}  # of the files written, for the manifest (not read back)
        for kind, payload in parts:
            if kind == "stats":
                losscheck.add_totals(totals, payload)
            elif kind == "checksums":
                checksums.update(payload)
            elif kind == "links":
                links_payload = payload
                keys = storage.read_parquet(storage.join(self.out, tables.bucket_file(
                    "features", bucket, self.num_buckets)), columns=["feature"])
                links = counting.merged_links_from_scratch(
                    self.shuffle.receive(payload), keys["feature"].to_numpy())
            else:
                extensions.append(payload)
        # The names a chunk at a time: the empty context's bucket is named by every link
        # of the 1-word contexts.
        bounds = counting.chunk_bounds([self.shuffle.rows(p, "extensions") for p in extensions],
                                       self.merge_rows)
        names = (self.shuffle.receive_group(extensions[start:stop], "extensions")
                 for start, stop in zip(bounds, bounds[1:]))
        links = continuation.add_continuation(links, ((n["feature"], n["word"]) for n in names))
        self.shuffle.release(extensions + ([links_payload] if links_payload is not None else []))
        name = tables.bucket_file("links", bucket, self.num_buckets)
        digest = manifests.checksum_digest()
        storage.write_parquet(links.cast(tables.LINKS), storage.join(self.out, name), digest)
        checksums[name] = digest.hexdigest()
        self.links_counter.inc(links.num_rows)
        self.progress.update()
        losscheck.add_totals(totals, {
            "links": links.num_rows,
            "link_count_sum": int(pc.sum(links["count"]).as_py() or 0)})
        yield {"totals": totals, "buckets": [bucket], "checksums": checksums}

    def finish_bundle(self):
        running.release_memory()


class ReadCountBucket(beam.DoFn):
    """Bucket number -> the bucket of an existing count directory, as one part (``--add_to``,
    or a count thresholded again: ``collapsed``, see
    :func:`snm_core.count.counting.partials_from_tables`; its C(f,*) sum is then sent on
    as the stat ``read_feature_counts``)."""

    def __init__(self, settings, directory, num_buckets, shuffle, collapsed=False):
        self.settings, self.directory = settings, directory
        self.num_buckets, self.shuffle = num_buckets, shuffle
        self.collapsed = collapsed

    def setup(self):
        vocab, self.extractor = self.settings.build()
        self.vocab_size = len(vocab)

    def process(self, bucket):
        def read(prefix):
            return storage.read_parquet(storage.join(
                self.directory, tables.bucket_file(prefix, bucket, self.num_buckets)))
        links, features = read("links"), read("features")
        if self.collapsed:
            yield bucket, ("stats", {"read_feature_counts": int(pc.sum(features["count"]).as_py()
                                                               or 0)})
        if links.num_rows:
            part = counting.partials_from_tables(
                links, features, self.extractor, self.vocab_size if self.collapsed else None)
            yield bucket, ("part", self.shuffle.send(
                counting.scratch_groups(part["links"], part["features"], self.vocab_size,
                                        self.extractor.num_type_ids)))


class CountLinks(beam.PTransform):
    """TextShard s -> count files in ``out``; output: each bucket's totals dict.

    Parameters
    ----------
    settings : _Extractor
    out : str, output directory
    num_buckets, flush_links, batch_bytes : int
    shuffle : ArrayShuffle, see :mod:`pipelines.shuffle`
    reference : bool, use the per-occurrence ``CombinePerKey`` path
    add_to : str, a count directory whose buckets are merged with the new counts
    merge_rows : int, partial links a bucket's merge reads at once
    encoding : str, the text's encoding
    min_feature_count, min_link_count : dict, ``{type name: N}``
        (:mod:`snm_core.count.thresholds`)
    sketches : count_sketch.SketchFile s, the thresholded types' sketches (what cannot reach its
        threshold goes before it is summed or sent)
    buckets : (first, end) of the buckets this pass counts (default all), of several passes
        over the text (:func:`bucket_passes`); such a pass stops after the merge: its output
        is the merged buckets' elements, which :class:`WriteCountedLinks` takes once every
        pass is done (a bucket's continuation counts come from buckets of any pass)
    stage : the name its progress shows
    """

    def __init__(self, settings, out, num_buckets, flush_links, batch_bytes, shuffle,
                 reference=False, add_to=None, merge_rows=MERGE_CHUNK_ROWS, encoding="utf-8",
                 min_feature_count=None, sketches=(), min_link_count=None, buckets=None,
                 stage="count"):
        super().__init__()
        self.buckets, self.stage = buckets, stage
        self.min_feature_count = min_feature_count
        self.min_link_count = min_link_count
        self.sketches = tuple(sketches)
        self.merge_rows = merge_rows
        self.encoding = encoding
        self.settings, self.out = settings, out
        self.num_buckets, self.flush_links = num_buckets, flush_links
        self.batch_bytes = batch_bytes
        self.shuffle = ArrayShuffle("beam", shuffle.scratch) if reference else shuffle
        self.reference = reference
        self.add_to = add_to

    def expand(self, shards):
        if self.reference:
            partials = shards | "ReferencePartials" >> ReferenceLinkPartials(
                self.settings, self.num_buckets, self.batch_bytes, self.encoding)
        else:
            partials = shards | "ExtractLinkPartials" >> beam.ParDo(ExtractLinkPartials(
                self.settings, self.num_buckets, self.flush_links, self.shuffle,
                self.batch_bytes, self.encoding, self.sketches, self.buckets, self.stage))
        if self.add_to:
            existing = (shards.pipeline
                        | "ExistingBuckets" >> beam.Create(list(range(self.num_buckets)))
                        | "ReadExisting" >> beam.ParDo(ReadCountBucket(
                            self.settings, self.add_to, self.num_buckets, self.shuffle)))
            partials = (partials, existing) | "WithExisting" >> beam.Flatten()
        merged = (partials
                  | "GroupByBucket" >> beam.GroupByKey()
                  | "MergeBuckets" >> beam.ParDo(MergeBucket(
                      self.settings, self.out, self.num_buckets, self.shuffle, self.merge_rows,
                      self.min_feature_count, self.min_link_count, stage=self.stage,
                      buckets=self.buckets)))
        if self.buckets is not None:
            return merged
        return merged | "Write" >> WriteCountedLinks(self.out, self.num_buckets, self.shuffle,
                                                     self.merge_rows, self.stage)


class WriteCountedLinks(beam.PTransform):
    """The merged buckets' elements (:class:`MergeBucket`'s) -> each bucket's links file with
    its continuation counts; output: each bucket's totals dict."""

    def __init__(self, out, num_buckets, shuffle, merge_rows, stage="count"):
        super().__init__()
        self.out, self.num_buckets, self.shuffle = out, num_buckets, shuffle
        self.merge_rows, self.stage = merge_rows, stage

    def expand(self, merged):
        return (merged
                | "GroupByLinkBucket" >> beam.GroupByKey()
                | "WriteLinks" >> beam.ParDo(WriteLinks(self.out, self.num_buckets, self.shuffle,
                                                        self.merge_rows, self.stage)))
