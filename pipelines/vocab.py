"""snm vocab: word counts and a vocabulary from training text.

    snm vocab --train 'corpus/*.txt.gz' --out vocab_dir [--min_count 2] [--max_size N]

Reads: the training sources (``[TAG=]GLOB``, plain or .gz text, one sentence a line).
Writes to ``--out``:

* ``word_counts.parquet``: ``word`` string, ``count`` int64, every distinct
  word of all sources, most frequent first (ties alphabetical);
* ``vocab.txt``: ``<S>``, ``</S>``, ``<UNK>``, then the words seen at least
  ``--min_count`` times (at most ``--max_size``), most frequent first;
* ``manifest.json``: settings and totals; written last.

The default ``--min_count 2`` leaves the words seen once out, so ``<UNK>``
occurs in training and gets a probability; with ``--min_count 1`` an unseen
test word would have probability zero.
"""

import dataclasses
from typing import Optional

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import reading, running, training_sources
from snm_core.io import losscheck, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.textfile import DEFAULT_BATCH_BYTES, check_encoding
from snm_core.stages import manifests
from snm_core.text.tokenize import TokenizeStats, count_words, sum_word_counts
from snm_core.text.vocab import SPECIALS, Vocabulary

DEFAULT_MIN_COUNT = 2
#: Distinct words held in a combiner accumulator before it is compacted.
COMPACT_ROWS = 1 << 20


class CountWordsFn(beam.CombineFn):
    """Word counts of text shards; accumulator ``(list of count tables, stats dict)``."""

    def __init__(self, batch_bytes=DEFAULT_BATCH_BYTES, encoding="utf-8"):
        self.reader = reading.ShardReader(batch_bytes, encoding, running.text_progress("vocab"))

    def create_accumulator(self):
        return [], {}

    def add_input(self, accumulator, shard):
        parts, stats = accumulator
        losscheck.add_totals(stats, {"shards": [shard.name]})
        for batch in self.reader.batches(shard, stats):
            counts, batch_stats = count_words(batch.lines)
            parts.append(counts)
            losscheck.add_totals(stats, vars(batch_stats))
            if sum(t.num_rows for t in parts) > COMPACT_ROWS:
                parts[:] = [sum_word_counts(parts)]
        return parts, stats

    def merge_accumulators(self, accumulators):
        parts, stats = [], {}
        for p, s in accumulators:
            parts += p
            losscheck.add_totals(stats, s)
        return [sum_word_counts(parts)] if parts else [], stats

    def extract_output(self, accumulator):
        parts, stats = accumulator
        if not parts:
            return tables.WORD_COUNTS.empty_table(), stats
        return sum_word_counts(parts), stats


class WordCounts(beam.PTransform):
    """TextShard s -> one ``(word-count table, totals dict)`` element."""

    def __init__(self, batch_bytes=DEFAULT_BATCH_BYTES, encoding="utf-8"):
        super().__init__()
        self.batch_bytes = batch_bytes
        self.encoding = encoding

    def expand(self, shards):
        return shards | "SumWordCounts" >> beam.CombineGlobally(
            CountWordsFn(self.batch_bytes, self.encoding))


def write_vocabulary(result, out, min_count, max_size, sources, shards, encoding="utf-8",
                     skip_invalid=False):
    """Check the totals, write word_counts.parquet, vocab.txt and the manifest (runs
    once, on a worker).  ``shards``: the names of the text shards listed."""
    counts, stats = result
    reading.check_invalid_lines(stats, encoding, skip_invalid)
    with losscheck.Checks("vocab") as checks:
        checks.each_once("text shards", shards, stats.get("shards", []))
        checks.equal("words read", stats.get("tokens", 0), "the sum of the word counts",
                     int(pc.sum(counts["count"]).as_py() or 0))
    counts = counts.sort_by([("count", "descending"), ("word", "ascending")])
    vocab = Vocabulary.from_counts(counts["word"].to_pylist(), counts["count"].to_numpy(),
                                   min_count=min_count, max_size=max_size)
    check_has_vocabulary(vocab, counts, min_count, sources)
    storage.makedirs(out)
    storage.write_parquet(pa.table({"word": counts["word"], "count": counts["count"]},
                                  schema=tables.WORD_COUNTS),
                         storage.join(out, "word_counts.parquet"))
    storage.write_text("".join(w + "\n" for w in vocab.words), storage.join(out, "vocab.txt"))
    return manifests.Vocab(
        files=["vocab.txt", "word_counts.parquet"], min_count=min_count, max_size=max_size,
        vocabulary_size=len(vocab), vocabulary_fingerprint=vocab.fingerprint(),
        distinct_words=counts.num_rows,
        sources=[{"tag": s.tag, "glob": s.glob} for s in sources],
        totals={k: stats.get(k, 0) for k in vars(TokenizeStats())}).write(out)


def check_has_vocabulary(vocab, counts, min_count, sources):
    """Raise :class:`SnmInputError` when no word of the training text made the vocabulary:
    a model of ``<UNK>`` and ``</S>`` alone has nothing to learn (its perplexity is low and
    meaningless).  ``counts``: the word-count table."""
    if len(vocab) > len(SPECIALS):
        return
    words = int(pc.sum(counts["count"]).as_py() or 0)
    raise SnmInputError(
        f"--train {', '.join(s.glob for s in sources)}: too little text to train on: none of "
        f"its {counts.num_rows:,} distinct words ({words:,} in all) occurs --min_count "
        f"{min_count} times, so the vocabulary would hold no word, only <S>, </S> and <UNK>; "
        "give more training text (thousands of sentences), or a lower --min_count")


@dataclasses.dataclass(frozen=True)
class VocabOptions:
    """What ``snm vocab`` does; one field per command-line flag."""

    train: tuple  # [TAG=]GLOB training sources
    out: str
    min_count: int = DEFAULT_MIN_COUNT
    max_size: Optional[int] = None
    batch_bytes: int = DEFAULT_BATCH_BYTES
    encoding: str = "utf-8"
    skip_invalid: bool = False

    def __post_init__(self):
        object.__setattr__(self, "train", tuple(self.train))
        running.absolute_paths(self, "out")
        if self.min_count < 1:
            raise SnmInputError("--min_count must be at least 1")
        check_encoding(self.encoding)


def run(args, beam_args=(), summary=True):
    """Run the vocab pipeline; returns its manifest.  ``summary``: print its totals (and
    Beam metrics) as a table."""
    beam_args = list(beam_args)
    sources, _ = training_sources.spool_stdin(training_sources.parse_sources(args.train),
                                              args.out)
    files = training_sources.expand_sources(sources)
    training_sources.check_has_words(files, args.encoding)
    storage.remove_file(storage.join(args.out, tables.MANIFEST))

    def build(p):
        shards = reading.text_shards(files, p.options)
        _ = (p
             | "ListShards" >> beam.Create(shards)
             | "CountWords" >> WordCounts(args.batch_bytes, args.encoding)
             | "WriteVocabulary" >> beam.Map(write_vocabulary, args.out, args.min_count,
                                             args.max_size, sources, [s.name for s in shards],
                                             args.encoding, args.skip_invalid))

    metrics = running.run_pipeline(beam_args, build, "vocab", shared_paths=[args.out],
                                   text=[path for _, path in files])
    manifest = storage.read_json(storage.join(args.out, tables.MANIFEST))
    if summary:
        running.print_summary(f"snm vocab: {manifest['vocabulary_size']:,} words -> {args.out}",
                              manifest["totals"], metrics)
    return manifest
