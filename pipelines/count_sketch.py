"""The first of a thresholded count's two passes over the text (``--min_feature_count``,
``--min_link_count``): sketches of the thresholded types' feature and link keys
(:mod:`snm_core.count.sketch`), which the second pass (:mod:`pipelines.count`) reads to
leave out, before its scratch, what cannot reach its threshold.
"""

import dataclasses
import uuid

import apache_beam as beam
import numpy as np

from pipelines import reading, running
from snm_core.count import sketch, thresholds
from snm_core.count.budget import MAX_OCCURRENCES_PER_CHUNK
from snm_core.io import storage
from snm_core.io.arrays import run_starts
from snm_core.text import hashing
from snm_core.text.tokenize import tokenize


@dataclasses.dataclass(frozen=True)
class SketchFile:
    """Where one of the count's sketches is, its shape, and the thresholds it serves
    (picklable; :mod:`snm_core.count.sketch`): of feature keys (``kind`` "features",
    ``--min_feature_count``) or of link keys ("links", ``--min_link_count``)."""

    kind: str
    path: str
    log2_cells: int
    bits: int
    thresholds: dict  # {type name: N}

    def minimum(self, extractor):
        """The threshold of each type id (tag-major), 1 for none."""
        return np.tile(thresholds.per_type(self.thresholds,
                                           [t.name for t in extractor.feature_types]),
                       len(extractor.tags))

    def keys(self, events):
        """The keys this sketch counts of ``events``' pairs."""
        if self.kind == "features":
            return events.key
        return hashing.link_key(events.key, events.target[events.event])

    def load(self, extractor, vocab_size):
        return _SketchFilter(sketch.FeatureSketch.load(self.path, self.log2_cells, self.bits),
                             self.minimum(extractor), vocab_size)


class _SketchFilter:
    """A worker's loaded sketch: what cannot reach its type's threshold goes early."""

    def __init__(self, loaded, minimum, vocab_size):
        self.sketch, self.minimum, self.vocab_size = loaded, minimum, vocab_size

    def keep_reaching(self, events):
        """``(events, occurrences left out)``: ``events`` (one type's, as the extractor
        yields them) without the pairs whose feature's estimate is below the threshold."""
        if not events.num_pairs or self.minimum[events.type[0]] <= 1:
            return events, 0
        keep = self.sketch.reaches(events.key, self.minimum[events.type[0]])
        left_out = int(len(keep) - np.count_nonzero(keep))
        if not left_out:
            return events, 0
        return events.select(keep), left_out

    def collapse(self, links, features, type_id):
        """A batch's summed ``links`` and ``features`` partials of type ``type_id``, the
        links whose estimate is below the threshold summed into one row a feature, of
        the vocabulary's size as word (the merge keeps C(f,*) exact and then leaves
        those rows out), and only the features with a link kept: one whose links all
        collapsed everywhere is left out anyway, and where another batch keeps a link
        that batch sends its row."""
        minimum = self.minimum[type_id]
        if minimum <= 1 or not len(links["feature"]):
            return links, features
        keep = self.sketch.reaches(hashing.link_key(links["feature"], links["word"]), minimum)
        if keep.all():
            return links, features
        # Both partials are sorted by key and every feature has links: a feature's row is
        # its run of links.
        has_kept = np.logical_or.reduceat(keep, run_starts(links["feature"]))
        return (thresholds.collapse_links(links, keep, self.vocab_size),
                {name: column[has_kept] for name, column in features.items()
                 if name != "links"})  # the links per row change


class SketchShard(beam.DoFn):
    """TextShard -> ``(kind, path)`` of scratch files holding the sketches of the
    thresholded feature or link keys (the first of the count's two passes over the
    text).

    A worker keeps one sketch of each kind over all the shards it reads, and saves it
    (atomically, over its earlier save) after each: its file then holds every shard it
    has yielded, so the parts on disk are one a worker and kind, not one a shard (at
    100M words a sketch is 1 GiB; a corpus of many files would fill the disk).  A retried
    shard adds its keys again, which only raises an estimate: what is dropped early
    stays what the exact filter drops, and the count's files are the same.
    """

    def __init__(self, settings, sketch_files, parts, batch_bytes, encoding="utf-8"):
        self.settings, self.sketch_files, self.parts = settings, sketch_files, parts
        self.reader = reading.ShardReader(batch_bytes, encoding,
                                          running.text_progress("count: sketch"))

    def setup(self):
        running.configure_allocators()
        self.vocab, self.extractor = self.settings.build()
        self.minimum = [f.minimum(self.extractor) for f in self.sketch_files]
        self.max_events = max(1, MAX_OCCURRENCES_PER_CHUNK
                              // self.extractor.max_windows_per_type)
        self.counted = None  # this worker's sketches, made at its first shard

    def process(self, shard):
        if self.counted is None:
            self.counted = [sketch.FeatureSketch(f.log2_cells, f.bits)
                            for f in self.sketch_files]
            worker = uuid.uuid4().hex
            self.paths = [storage.join(self.parts, f"{f.kind}-{worker}.sketch")
                          for f in self.sketch_files]
        counted = self.counted
        for batch in self.reader.batches(shard):
            sentences, _, _ = tokenize(batch.lines, self.vocab)
            for chunk in sentences.chunks(self.max_events):
                for events in self.extractor.extract_by_type(chunk, tags=[batch.source]):
                    for file, minimum, cells in zip(self.sketch_files, self.minimum, counted):
                        if events.num_pairs and minimum[events.type[0]] > 1:
                            cells.add(file.keys(events))
        for file, cells, path in zip(self.sketch_files, counted, self.paths):
            cells.save(path)
            yield file.kind, path
        running.release_memory()


def merge_sketches(parts, sketch_files):
    """The workers' sketches of each kind summed into its file (CallOnce); parts removed.
    A worker's file is named by each shard it read: once is summed."""
    for file in sketch_files:
        paths = sorted({path for kind, path in parts if kind == file.kind})
        sketch.merge_files(paths, file.path, file.log2_cells, file.bits)
        for path in paths:
            storage.remove_file(path)


def count_sketches(args, beam_args, settings, files, scratch, min_feature_count,
                   min_link_count, budget, workers, occurrences):
    """The first pass of a thresholded count: the sketches of the thresholded types'
    feature and link keys in ``scratch`` (:mod:`snm_core.count.sketch`), as
    :class:`SketchFile` s sharing what ``budget`` (a :class:`MemoryBudget`) gives each
    of ``workers``; ``occurrences``: the text's estimated feature occurrences."""
    wanted = [(kind, given) for kind, given in (("features", min_feature_count),
                                                ("links", min_link_count)) if given]
    share = budget.working() // ((workers + 1) * len(wanted))
    sketch_files = []
    for kind, given in wanted:
        bits = sketch.cell_bits(max(given.values()))
        sketch_files.append(SketchFile(kind, storage.join(scratch, f"{kind}.sketch"),
                                       sketch.plan_cells(occurrences, bits, share), bits,
                                       given))
    parts = storage.join(scratch, "sketch-parts")
    storage.makedirs(parts)

    def build(p):
        _ = (p
             | "ListShards" >> beam.Create(reading.text_shards(files, p.options))
             | "Sketch" >> beam.ParDo(SketchShard(settings, sketch_files, parts,
                                                 args.batch_bytes, args.encoding))
             | "MergeSketches" >> running.CallOnce(merge_sketches, sketch_files))

    running.run_pipeline(beam_args, build, "count: sketch", shared_paths=[args.out, scratch],
                         text=[path for _, path in files])
    return sketch_files
