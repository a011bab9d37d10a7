"""Training and held-out text into a pipeline: :class:`ReadText` and its readers.

What the text may hold and how each case is treated is
:mod:`snm_core.textfile`'s rule, the same for every stage: an empty file is
read as zero sentences (counted, ``empty_files``); empty lines and lines that
are not valid UTF-8 are skipped and counted (``empty_lines``,
``invalid_lines``), the first few of the latter logged with file and line.
"""

import dataclasses
import logging
import os

import apache_beam as beam

from pipelines.running import counter
from snm_core import textfile
from snm_core.textfile import DEFAULT_BATCH_BYTES


_log = logging.getLogger(__name__)


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
