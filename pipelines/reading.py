"""Training and held-out text into a pipeline: :class:`TextShard` and :class:`ShardReader`.

A stage's first step does not receive lines: it receives :class:`TextShard`
elements ("reader ``i`` of ``n`` of this file") and reads the shard's line
batches itself, with a :class:`ShardReader`.  So text is never a shuffled or
materialised collection, on any runner: Beam's Dask runner holds a bundle's
outputs in a list before the next step sees them (a whole file's lines), and
a local runner holds every shuffled byte in memory (spreading one file's
batches with a reshuffle would hold many times the text's size).  Each of a
file's ``n`` readers decompresses the whole file and decodes only its batches;
inflating is far faster than counting, so that costs little.  ``n`` is the runner's
parallelism (:func:`pipelines.runners.parallelism`); see :func:`text_shards`.

What the text may hold and how each case is treated is
:mod:`snm_core.io.textfile`'s rule, the same for every stage: an empty file is
read as zero sentences (counted, ``empty_files``); empty lines and lines that
do not decode are skipped and counted (``empty_lines``, ``invalid_lines``).
Whether the latter are few enough to skip is decided over the whole input, where
the stage sums its totals (:func:`check_invalid_lines`): each shard adds the
first such line it read to its totals (:data:`FIRST_INVALID`), and the first of
those names the file and line of an error.
"""

import dataclasses

from pipelines import runners
from pipelines.running import counter
from snm_core.io import losscheck, textfile
from snm_core.io.textfile import DEFAULT_BATCH_BYTES

#: The totals entry listing each shard's first line that did not decode:
#: ``[file index, line number, path, problem]``.
FIRST_INVALID = "first_invalid_line"


@dataclasses.dataclass(frozen=True)
class TextShard:
    """Reader ``shard`` of ``shards`` of file ``path`` (source ``source``, the stage's file
    number ``file`` in the order given): it keeps the file's batches ``shard, shard +
    shards, ...``."""

    source: int
    path: str
    shard: int = 0
    shards: int = 1
    file: int = 0

    @property
    def name(self):
        """Identifies the shard in a stage's totals (each must be read exactly once)."""
        return f"{self.source}:{self.path}:{self.shard}/{self.shards}"


@dataclasses.dataclass
class LineBatch:
    """Consecutive lines of one file: ``lines[i]`` is line ``first_line + i`` (1-based)."""

    source: int
    path: str
    first_line: int
    lines: list


def text_shards(files, options):
    """``[(source_index, path), ...]`` -> every file's :class:`TextShard` s, as many per
    file as the runner of ``options`` (PipelineOptions) has workers.

    A stage lists them with ``beam.Create`` (which spreads its elements over
    the workers) and passes them to its last step, which checks that each
    was read exactly once.
    """
    readers = runners.parallelism(options)
    return [TextShard(source, path, reader, readers, number)
            for number, (source, path) in enumerate(files) for reader in range(readers)]


class ShardReader:
    """Reads a :class:`TextShard` 's :class:`LineBatch` es inside a DoFn.

    Batches are about ``batch_bytes`` of text in ``encoding``, read by
    :func:`snm_core.io.textfile.line_batches` (a line that does not decode is None:
    skipped and counted by :func:`snm_core.text.tokenize`).  Build it in the DoFn's
    constructor: it holds the DoFn's file counters, and ``progress``, the stage's
    :func:`pipelines.running.text_progress` (the files' bytes read, as stored).
    """

    def __init__(self, batch_bytes=DEFAULT_BATCH_BYTES, encoding="utf-8", progress=None):
        self.batch_bytes = batch_bytes
        self.encoding = encoding
        self.progress = progress
        self.empty_files = counter("empty_files")
        self.files = counter("files")

    def batches(self, shard, totals=None):
        """Yield the shard's batches (line numbers stay the file's).

        ``totals``: the stage's totals of this shard; once the shard is read, its first
        line that did not decode, if any, is added to them (:data:`FIRST_INVALID`).
        """
        if shard.shard == 0:
            self.files.inc()
        empty = True
        first = textfile.FirstInvalidLine()
        for first_line, lines in textfile.line_batches(shard.path, self.batch_bytes,
                                                        shard.shard, shard.shards, first,
                                                        self.encoding,
                                                        self.progress and self.progress.update):
            empty = False
            yield LineBatch(shard.source, shard.path, first_line, lines)
        if empty and shard.shard == 0:  # batch 0 of a file with any byte is reader 0's
            self.empty_files.inc()
        if first.first is not None and totals is not None:
            path, line_no, problem = first.first
            losscheck.add_totals(totals, {FIRST_INVALID: [[shard.file, line_no, path, problem]]})


def check_invalid_lines(totals, encoding="utf-8", skip_invalid=False):
    """The stage's lines that did not decode, over its whole input (its summed
    ``totals``), against :func:`snm_core.io.textfile.check_invalid_lines`; an error names
    the first of the first file that has one.  Takes :data:`FIRST_INVALID` out of
    ``totals``."""
    firsts = totals.pop(FIRST_INVALID, [])
    first = min(firsts, key=lambda f: (f[0], f[1]), default=None)
    invalid = totals.get("invalid_lines", 0)
    lines = totals.get("sentences", 0) + totals.get("empty_lines", 0) + invalid
    textfile.check_invalid_lines(
        textfile.InvalidLines(invalid, lines, first and (first[2], first[1], first[3])),
        encoding, skip_invalid)
