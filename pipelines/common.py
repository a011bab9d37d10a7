"""What every pipeline shares: training sources, reading text in batches, options, metrics, files.

Bad input policy (documented in the README):

* a glob that matches no file: an error before the pipeline starts (exit 2);
* an empty file: read as zero sentences, counted (``empty_files``);
* an empty or whitespace-only line: skipped, counted (``empty_lines``);
* a line that is not valid UTF-8: skipped, counted (``invalid_utf8_lines``),
  and the first few are logged with file and line number.
"""

import argparse
import collections
import dataclasses
import logging
import os
import re
import threading

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
import pyarrow as pa

from snm_core import memory, storage, tables, textfile
from snm_core.config import parse_config
from snm_core.errors import SnmInputError
from snm_core.features import FeatureExtractor
from snm_core.textfile import DEFAULT_BATCH_BYTES
from snm_core.vocab import Vocabulary

#: Namespace of every Beam counter the toolkit reports.
METRICS_NAMESPACE = "snm"

_TAG = re.compile(r"^[A-Za-z0-9_.-]+$")
_log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Source:
    """A training source: a tag (``""`` when untagged) and a file glob."""

    tag: str
    glob: str


def parse_sources(specs, pooled=False):
    """Parse ``[TAG=]GLOB`` arguments into sources.

    Every source has a tag, or none has (one pooled source of all the globs).
    Several globs may share a tag.  ``pooled=True`` drops the tags.
    """
    sources = []
    for spec in specs:
        tag, sep, glob = spec.partition("=")
        if not sep or "/" in tag or not _TAG.match(tag):
            tag, glob = "", spec
        if not glob:
            raise SnmInputError(f"--train {spec!r}: empty file pattern")
        sources.append(Source("" if pooled else tag, glob))
    tagged = {s.tag != "" for s in sources}
    if len(tagged) > 1:
        raise SnmInputError("give every --train source a tag (TAG=GLOB) or none: "
                            + ", ".join(specs))
    return sources


def source_tags(sources):
    """The distinct tags of the sources, in order of first appearance (``[""]`` if pooled)."""
    return list(dict.fromkeys(s.tag for s in sources))


def expand_sources(sources, tags=None):
    """``[(tag_index, path), ...]`` for every file of every source, each glob's files sorted.

    ``tags`` is the tag list the indices refer to (default: :func:`source_tags`).

    Raises
    ------
    SnmInputError
        If a glob matches no file.
    """
    tags = source_tags(sources) if tags is None else tags
    files = []
    for source in sources:
        paths = storage.glob(source.glob)
        if not paths:
            raise SnmInputError(f"--train {source.glob!r} matches no file")
        files += [(tags.index(source.tag), path) for path in paths]
    if len(set(p for _, p in files)) != len(files):
        raise SnmInputError("a training file is matched by two --train patterns; each file "
                            "must be counted once")
    return files


def pipeline_options(beam_args):
    """PipelineOptions from the leftover arguments; FnApiRunner unless a runner is named.

    The DirectRunner would first try to download the Prism runner, which
    stalls or fails on machines without network access.  Construction-time
    type checking is off unless ``--pipeline_type_check`` is given: the
    elements are untyped arrays and dicts, so it checks nothing and cost
    ~70 ms of every run's start-up.
    """
    if not any(a == "--runner" or a.startswith("--runner=") for a in beam_args):
        beam_args = ["--runner=FnApiRunner"] + list(beam_args)
    if "--pipeline_type_check" not in beam_args:
        beam_args = ["--no_pipeline_type_check"] + list(beam_args)
    logging.getLogger(_FN_RUNNER_LOGGER).addFilter(_in_memory_workers_warning)
    return PipelineOptions(beam_args)


_FN_RUNNER_LOGGER = "apache_beam.runners.portability.fn_api_runner.fn_runner"


def _in_memory_workers_warning(record):
    """Drop the FnApiRunner's warning that ``in_memory`` mode ignores ``--direct_num_workers``.

    It does not: each stage's input is split into that many parts, run at
    once in as many threads (``ParallelBundleManager``), each by its own
    in-process worker.  That is the local runner ``snm`` recommends: two
    workers of a kernel 5-gram count ran in two threads, with 8% less CPU than
    ``multi_threading`` (whose workers talk to the runner over gRPC).
    """
    return not record.getMessage().startswith("If direct_num_workers is not equal to 1")


def add_source_args(parser):
    parser.add_argument("--train", action="append", required=True, metavar="[TAG=]GLOB",
                        help="training text (one sentence a line, plain or .gz); repeat "
                             "for several sources, each with its own TAG")
    parser.add_argument("--batch_bytes", type=int, default=DEFAULT_BATCH_BYTES,
                        help="text per numpy batch (default %(default)s)")


def counter(name):
    return beam.metrics.Metrics.counter(METRICS_NAMESPACE, name)


#: glibc's malloc keeps blocks below this size in its heaps for reuse (see
#: :func:`configure_allocators`), and gives the top of a heap back above the trim size.
MALLOC_MMAP_THRESHOLD = 32 << 20
MALLOC_TRIM_THRESHOLD = 64 << 20


def configure_allocators():
    """Arrow allocates with malloc, as numpy does; malloc reuses blocks up to 32 MiB.

    * Arrow's default pool (mimalloc) keeps freed pages that ``release_unused``
      does not all return; on the kernel 5-gram count it held ~50 MiB more at
      the peak, for no speed.  Importing :mod:`snm_core` before pyarrow already
      did this for all of Arrow (see ``snm_core/__init__.py``); a worker that
      imported pyarrow first (Beam's own worker start-up) gets it here for what
      pyarrow allocates.
    * glibc maps each block above its threshold (128 KiB, raised to the size of
      the largest one freed) straight from the system and unmaps it when freed,
      so the next one is faulted in afresh, a page at a time.  A count's
      per-batch arrays are 1-5 MB: the kernel 5-gram count took 234K page
      faults.  Fixed thresholds of 32 MiB (map: the most glibc's own would
      reach) and 64 MiB (trim) keep them in the heaps: 71K faults, 2-4% less
      CPU and wall time over ten paired runs, for 20 MiB more peak RSS.  An
      8 MiB threshold did as well there, but cost a skip-10-gram count 4% more
      CPU: its larger arrays were mapped afresh every time.
      :func:`release_memory` still trims at the end of a bundle.
      ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` in the environment
      win.

    Process-wide, so stage DoFns call it in ``setup``.
    """
    pa.set_memory_pool(pa.system_memory_pool())
    memory.set_thresholds(MALLOC_MMAP_THRESHOLD, MALLOC_TRIM_THRESHOLD)


def release_memory():
    """:func:`snm_core.memory.release_memory`, called at the end of each bundle of the
    count's stages.  Not called more often: trimming after every flush of the
    kernel 5-gram count cost 2 s of CPU, 13%, to save 20 MiB of peak RSS."""
    memory.release_memory()


#: Runners that execute in this process and hold shuffled data in its memory.
LOCAL_RUNNERS = (None, "DirectRunner", "FnApiRunner", "BundleBasedDirectRunner",
                 "SwitchingDirectRunner")


def local_read_shards(options):
    """Readers per file for :class:`ReadText`: the local runner's workers, else 0.

    A local runner holds every shuffled byte in memory: spreading one file's
    batches with a reshuffle held ~20x the text's size (kernel: 18 MB of text,
    ~330 MiB).  So there each worker reads the whole file and keeps its share
    of the batches instead; on a cluster the reshuffle is the better spread.
    """
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        return 0
    workers = options.view_as(DirectOptions).direct_num_workers
    return workers if workers > 0 else os.cpu_count() or 1


class ReadText(beam.PTransform):
    """``[(source_index, path), ...]`` -> LineBatch es, spread over the workers.

    On a cluster a file is read by one worker, and a reshuffle of its batches
    lets every worker process a single large file.  On a local runner
    (:func:`local_read_shards`) each file is read by as many readers as there
    are workers, reader ``i`` of ``n`` keeping batches ``i, i + n, ...``: no
    text is shuffled, at the cost of decompressing each file ``n`` times.
    """

    def __init__(self, files, batch_bytes=DEFAULT_BATCH_BYTES, shards=None):
        super().__init__()
        self.files = list(files)
        self.batch_bytes = batch_bytes
        self.shards = shards  # readers per file; 0: one, then a reshuffle; None: by runner

    def expand(self, pbegin):
        shards = self.shards
        if shards is None:
            shards = local_read_shards(pbegin.pipeline.options)
        readers = max(shards, 1)
        # Create spreads its elements over the workers itself (a reshuffle when
        # there are two or more); another reshuffle here was one more stage.
        batches = (pbegin
                   | "ListFiles" >> beam.Create([(source, path, reader, readers)
                                                 for source, path in self.files
                                                 for reader in range(readers)])
                   | "ReadLineBatches" >> beam.ParDo(ReadLineBatches(self.batch_bytes)))
        if shards:
            return batches
        return batches | "SpreadBatches" >> beam.Reshuffle()


class CallOnce(beam.PTransform):
    """``fn(elements, *args)`` once, with the list of all the input's elements.

    For a stage's last step (its manifest), given the small per-bucket results:
    also runs when the input is empty.  The elements reach ``fn`` as a side
    input; ``CombineGlobally`` (whose default value for an empty input is a
    side input too) then ``Map`` took one stage more: 6 against 5 for a count,
    0.06 s of a two-line count's ~0.6 s in the local runner.
    """

    def __init__(self, fn, *args):
        super().__init__()
        self.fn, self.args = fn, args

    def expand(self, pcoll):
        fn, args = self.fn, self.args
        return (pcoll.pipeline
                | "Once" >> beam.Create([None])
                | "Call" >> beam.Map(lambda _, elements: fn(list(elements), *args),
                                     beam.pvalue.AsList(pcoll)))


def run_pipeline(beam_args, build):
    """Build a pipeline with ``build(pipeline)``, run it to the end, return its snm metrics."""
    pipeline = beam.Pipeline(options=pipeline_options(beam_args))
    build(pipeline)
    result = pipeline.run()
    result.wait_until_finish()
    return metric_totals(result)


def metric_totals(result):
    """``{name: value}`` of the snm counters of a finished pipeline."""
    totals = {}
    query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE))
    for c in query["counters"]:
        value = c.committed if c.committed is not None else c.attempted
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + (value or 0)
    return totals


def print_summary(title, totals):
    print(f"== {title} ==")
    for name in sorted(totals):
        print(f"  {name:<24}{totals[name]:>16,}")


@dataclasses.dataclass
class LineBatch:
    """Consecutive lines of one file: ``lines[i]`` is line ``first_line + i`` (1-based)."""

    source: int
    path: str
    first_line: int
    lines: list


class ReadLineBatches(beam.DoFn):
    """``(source_index, path, shard, shards)`` -> :class:`LineBatch` es of about
    ``batch_bytes`` of text, read by :func:`snm_core.textfile.line_batches`
    (a line that is not valid UTF-8 is None: logged, then skipped and counted
    by :func:`snm_core.text.tokenize`)."""

    def __init__(self, batch_bytes=DEFAULT_BATCH_BYTES):
        self.batch_bytes = batch_bytes
        self.empty_files = counter("empty_files")
        self.files = counter("files")
        self.log = textfile.InvalidLineLog()

    def process(self, element):
        """``(source, path, shard, shards)``: keep batches ``shard, shard + shards, ...``
        of the file (line numbers stay the file's); ``(source, path, 0, 1)`` keeps all."""
        source, path, shard, shards = element
        if shard == 0:
            self.files.inc()
        empty = True
        for first_line, lines in textfile.line_batches(path, self.batch_bytes, shard, shards,
                                                        self.log):
            empty = False
            yield LineBatch(source, path, first_line, lines)
        if empty and shard == 0:  # batch 0 of a file with any byte is reader 0's
            self.empty_files.inc()


#: Vocabularies by (path, fingerprint), the most recently used last (see shared_vocabulary).
_VOCABULARIES = collections.OrderedDict()
_VOCABULARIES_LOCK = threading.Lock()
_MAX_VOCABULARIES = 8


def shared_vocabulary(path, fingerprint):
    """The vocabulary file at ``path``, read once per worker process and shared by its DoFns.

    DoFns carry the file's name, not its words: the runner unpickles every DoFn
    once per stage and worker, and a 37,553-word list pickled into each cost
    ``snm count`` ~1 s and ~115 MiB on the DirectRunner, even on 100 lines.
    Workers that are threads of one process wait for the first to read it (the
    reading holds the GIL, so reading it twice at once took twice as long).
    """
    with _VOCABULARIES_LOCK:
        vocab = _VOCABULARIES.get((path, fingerprint))
        if vocab is None:
            vocab = Vocabulary.parse(storage.read_bytes(path).decode("utf-8"), path)
            if vocab.fingerprint() != fingerprint:
                raise SnmInputError(f"{path} changed while the pipeline was running; "
                                    "run it again")
        _remember(path, fingerprint, vocab)
    return vocab


def share_vocabulary(path, vocab):
    """Let :func:`shared_vocabulary` answer ``path`` with ``vocab``, just written there.

    The stage that writes the file before its pipeline holds the vocabulary
    already; workers that run in its process (the local runner's in-memory
    mode) then need not read it again: 0.1 s before a kernel count's workers
    could start.  Returns ``vocab.fingerprint()``.
    """
    fingerprint = vocab.fingerprint()
    with _VOCABULARIES_LOCK:
        _remember(path, fingerprint, vocab)
    return fingerprint


def _remember(path, fingerprint, vocab):
    _VOCABULARIES[(path, fingerprint)] = vocab
    _VOCABULARIES.move_to_end((path, fingerprint))
    while len(_VOCABULARIES) > _MAX_VOCABULARIES:
        _VOCABULARIES.popitem(last=False)


class CountSettings:
    """What a worker needs from a count directory's manifest (picklable, small)."""

    def __init__(self, counts_dir, manifest):
        self.counts_dir = counts_dir
        self.manifest = manifest

    @classmethod
    def load(cls, counts_dir):
        manifest = tables.read_manifest(counts_dir, "count")
        path = storage.join(counts_dir, "vocab.txt")
        if Vocabulary.parse(storage.read_bytes(path).decode("utf-8"), path).fingerprint() != \
                manifest["vocabulary_fingerprint"]:
            raise SnmInputError(f"{counts_dir}/vocab.txt does not match its manifest; "
                                "re-run snm count")
        return cls(counts_dir, manifest)

    def vocabulary(self):
        return shared_vocabulary(storage.join(self.counts_dir, "vocab.txt"),
                                 self.manifest["vocabulary_fingerprint"])

    @property
    def num_buckets(self):
        return self.manifest["num_buckets"]

    def build(self):
        extractor = FeatureExtractor(parse_config(self.manifest["config"]),
                                     self.manifest["tags"])
        return self.vocabulary(), extractor

    def bucket_paths(self, bucket):
        return {prefix: storage.join(self.counts_dir, tables.bucket_file(prefix, bucket, self.num_buckets))
                for prefix in ("features", "links")}


def parse_stage_args(parser, options_type, argv):
    """``(options_type(**flags), beam_args)``: the parser's flags (named as the
    options' fields) and the leftover arguments, which are Beam's."""
    args, beam_args = parser.parse_known_args(argv)
    return options_type(**vars(args)), beam_args


def stage_parser(description):
    return argparse.ArgumentParser(description=description,
                                   epilog="Other arguments are Beam pipeline options "
                                          "(--runner, --direct_num_workers, ...).")
