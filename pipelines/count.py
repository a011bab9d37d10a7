"""snm count: counts C(f,w) of every link and C(f,*) of every feature over sharded text.

    snm count --config 5gram --train 'corpus/*.txt.gz' --vocab vocab.txt --out counts/
    snm count --config skip10gram --train web='web/*.gz' --train news='news/*.gz' \\
        --min_count 2 --out counts/ --runner=FnApiRunner --direct_num_workers=2 \\
        --direct_running_mode=multi_processing

Reads: the training sources (``[TAG=]GLOB``), the extraction config, the
vocabulary (``--vocab FILE``, or built first with ``--min_count N`` into
``OUT/vocab/``).  Writes the count directory described in
:mod:`snm_core.io.tables`: ``links-*.parquet``, ``features-*.parquet``,
``vocab.txt`` and ``manifest.json`` (last).

How it is fast (DESIGN.md, "Speed"): lines are read in 4 MiB batches; each batch
is tokenised, its features extracted and its links summed with numpy, one
feature type at a time (no Python work per token or per link); a worker holds
the sums until
``--flush_links`` links are pending, then cuts them into ``--num_buckets`` key
ranges and sends one part per bucket (all of a flush's parts in one scratch
file, or through Beam's shuffle: ``--shuffle``, see :mod:`pipelines.shuffle`).
Each bucket is merged, sorted and written as one file.  Memory is bounded by
those two settings: a worker's pending sums and one bucket's merge.
``--reference`` runs the same count with one Beam element per (feature, word)
occurrence and ``CombinePerKey(sum)`` (:mod:`pipelines.count_reference`): slow,
and written the plain way.
"""

import dataclasses
import logging
import pickle
from typing import Optional

import apache_beam as beam

from pipelines import count_directory, reading, runners, running, training_sources
from pipelines.count_links import (
    BELOW_THRESHOLD,
    SCRATCH_PART_BYTES,
    STAT_NAMES,
    CountLinks,
    WriteCountedLinks,
    _Extractor,
)
from pipelines.count_sketch import count_sketches
from pipelines.shuffle import MODES, ArrayShuffle, scratch_directory
from snm_core.count import continuation, counting, thresholds
from snm_core.count.budget import (
    COUNT_BATCH_BYTES,
    passes_for_disk,
    passes_for_rest,
    plan_memory,
)
from snm_core.io import losscheck, progress, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import MemoryBudget, format_bytes
from snm_core.io.textfile import check_encoding
from snm_core.stages import manifests
from snm_core.text.config import load_config, parse_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.vocab import Vocabulary


#: ``--compress_scratch``: what each choice asks of budget.passes_for_disk (None: decide).
SCRATCH_COMPRESSION = {"auto": None, "always": True, "never": False}


def bucket_passes(num_buckets, passes):
    """The buckets of each of ``passes`` passes over the text: ``[(first, end), ...]``,
    equal shares of the key ranges (at most one pass a bucket)."""
    passes = max(1, min(passes, num_buckets))
    cuts = [num_buckets * i // passes for i in range(passes + 1)]
    return list(zip(cuts, cuts[1:]))


def _ranges_measured(ranges, number, part_bytes, scratch):
    """``ranges`` after pass ``number``, its later passes planned again from the scratch
    bytes the passes so far wrote (``part_bytes``; None: unmeasured, the plan stays)."""
    done, total = ranges[number][1], ranges[-1][1]
    passes = passes_for_rest(part_bytes, done, total - done, storage.free_bytes(scratch))
    if passes is None or passes == len(ranges) - number - 1:
        return ranges
    progress.LOGGER.info("count: %d buckets' scratch took %s, so the other %d go in %d "
                         "more pass(es), not %d", done, format_bytes(part_bytes),
                         total - done, passes, len(ranges) - number - 1)
    return ranges[:number + 1] + [(done + lo, done + hi)
                                  for lo, hi in bucket_passes(total - done, passes)]


def _keep_merged(elements, path):
    """A pass's merged buckets' elements (paths and row counts of scratch parts, and
    totals), written to ``path`` for the step that writes the links files."""
    storage.write_bytes(pickle.dumps(elements, protocol=pickle.HIGHEST_PROTOCOL), path)


def _read_merged(path):
    return pickle.loads(storage.read_bytes(path))


def _previous_counts(args, config, tags):
    """Check that ``--add_to`` can be extended by this run; its manifest, vocabulary and tags."""
    settings = count_directory.CountDirectory.load(args.add_to)
    previous = settings.manifest
    if parse_config(previous.config).to_text() != config.to_text():
        raise SnmInputError(f"--config differs from the configuration of {args.add_to}")
    if previous.min_feature_count or previous.min_link_count:
        raise SnmInputError(
            f"--add_to {args.add_to}: its counts left out features or links below "
            f"{thresholds.OPTION} or {thresholds.LINK_OPTION}, so they cannot be added to (a "
            "feature left out there may reach the threshold with the new text); count all "
            "the text again")
    if (tags == [""]) != (previous.tags == [""]):
        raise SnmInputError(f"{args.add_to} is {'pooled' if previous.tags == [''] else 'tagged'}"
                            "; give the new sources the same kind of tags")
    merged_tags = previous.tags + [t for t in tags if t not in previous.tags]
    return previous, settings.vocabulary(), merged_tags


def write_manifest(written, out, num_buckets, config, tags, vocab_size, vocab_fingerprint, sources,
                   shards, scratch, previous=None, encoding="utf-8", skip_invalid=False,
                   min_feature_count=None, min_link_count=None):
    """Check the totals, write empty files for buckets that got no data, then the
    manifest (last).

    ``written`` holds WriteLinks' ``{"totals": ..., "buckets": [...], "checksums":
    {file: hex}}`` of every bucket (the checksums taken as its files were written);
    ``shards`` the names of the text shards listed (each must have been read once).
    """
    counted, written_buckets, known = {}, set(), {}
    for part in written:
        losscheck.add_totals(counted, part["totals"])
        written_buckets.update(part["buckets"])
        known.update(part.get("checksums", {}))
    check_counts(counted, shards, previous)
    reading.check_invalid_lines(counted, encoding, skip_invalid)
    check_has_vocabulary_words(counted, previous, sources)
    ArrayShuffle("files", scratch).cleanup()
    num_types = len(config.feature_types())
    for bucket in sorted(set(range(num_buckets)) - written_buckets):
        _, features, _ = counting.merge_bucket([], [], num_types)
        storage.write_parquet(tables.LINKS.empty_table(),
                             storage.join(out, tables.bucket_file("links", bucket, num_buckets)))
        storage.write_parquet(features, storage.join(out, tables.bucket_file("features", bucket,
                                                                           num_buckets)))
    files = [tables.bucket_file(prefix, b, num_buckets)
             for prefix in ("features", "links") for b in range(num_buckets)] + ["vocab.txt"]
    totals = {name: counted.get(name, 0)
              for name in STAT_NAMES + ("links", "features", "key_collisions", "link_count_sum")
              + (BELOW_THRESHOLD if min_feature_count or min_link_count else ())}
    if previous:  # the new data's statistics plus the old ones (links, features are merged)
        for name in STAT_NAMES:
            totals[name] += previous.totals.get(name, 0)
    manifest = manifests.Count(
        config=config.to_text(), tags=list(tags),
        feature_types=[t.name for t in config.feature_types()], vocabulary_size=vocab_size,
        vocabulary_fingerprint=vocab_fingerprint, num_buckets=num_buckets,
        sources=(previous.sources if previous else [])
        + [{"tag": s.tag, "glob": s.glob} for s in sources],
        files=sorted(files), totals=totals, min_feature_count=dict(min_feature_count or {}),
        min_link_count=dict(min_link_count or {}))
    storage.remove_stale(out, set(files), ["links-*.parquet", "features-*.parquet"])
    return manifest.write(out, known=manifests.taken_checksums(known))


def check_counts(counted, shards, previous=None):
    """What the count read against what it wrote (:mod:`snm_core.io.losscheck`)."""
    occurrences = counted.get("feature_occurrences", 0)
    if previous:
        occurrences += previous.totals["feature_occurrences"]
    with losscheck.Checks("count") as checks:
        checks.each_once("text shards", shards, counted.get("shards", []))
        left_out = counted.get("below_threshold_occurrences")
        checks.equal("feature occurrences extracted", occurrences,
                      "the sum of the link counts written" + (
                          " and of the occurrences left out below a threshold"
                          if left_out is not None else ""),
                      counted.get("link_count_sum", 0) + (left_out or 0))
        checks.equal("words and sentence ends read",
                     counted.get("tokens", 0) + counted.get("sentences", 0),
                     "events extracted", counted.get("events", 0))


def check_has_vocabulary_words(counted, previous, sources):
    """Raise :class:`SnmInputError` when the training text (with ``--add_to``, and the
    previous count's) holds no word of the vocabulary: a model of ``<UNK>`` and ``</S>``
    alone has nothing to learn (its perplexity is low and meaningless)."""
    totals = [counted] + ([previous.totals] if previous else [])
    words = sum(t.get("tokens", 0) for t in totals)
    outside = sum(t.get("oov_tokens", 0) + t.get("marker_tokens", 0) for t in totals)
    if words > outside:
        return
    raise SnmInputError(
        f"--train {', '.join(s.glob for s in sources)}: too little text to train on: none of "
        f"its {words:,} words is in the vocabulary, so the model could predict nothing but "
        "<UNK> and </S>; give more training text, or a vocabulary of its words (--min_count "
        "N builds one)")


def vocab_file(path):
    """The vocabulary file ``--vocab`` names: the file itself, or a vocab directory's
    ``vocab.txt`` (its manifest checked); one line for anything else."""
    if storage.isdir(path):
        manifests.Vocab.read(path)
        return storage.join(path, "vocab.txt")
    if not storage.isfile(path):
        raise SnmInputError(f"--vocab {path}: no such file or vocab directory")
    return path


def load_vocabulary(args, beam_args, sources):
    """The vocabulary from ``--vocab`` or, with ``--min_count``, from a vocab run into OUT/vocab."""
    if args.vocab:
        path = vocab_file(args.vocab)
        try:
            text = storage.read_bytes(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SnmInputError(f"--vocab {path}: cannot read ({e})") from None
        return Vocabulary.parse(text, path)
    from pipelines import vocab as vocab_stage
    vocab_dir = storage.join(args.out, "vocab")
    vocab_stage.run(vocab_stage.VocabOptions(
        train=[f"{s.tag}={s.glob}" if s.tag else s.glob for s in sources], out=vocab_dir,
        min_count=args.min_count, batch_bytes=args.batch_bytes, encoding=args.encoding,
        skip_invalid=args.skip_invalid), beam_args)
    return Vocabulary.parse(storage.read_bytes(storage.join(vocab_dir, "vocab.txt")).decode(),
                            storage.join(vocab_dir, "vocab.txt"))


@dataclasses.dataclass(frozen=True)
class CountOptions:
    """What ``snm count`` does; one field per command-line flag."""

    config: str  # preset name or configuration file
    train: tuple  # [TAG=]GLOB training sources
    out: str
    vocab: Optional[str] = None
    min_count: Optional[int] = None
    add_to: Optional[str] = None
    num_buckets: Optional[int] = None  # None: from the memory budget (plan_memory)
    flush_links: Optional[int] = None  # None: from the buckets (plan_memory)
    shuffle: str = "files"
    scratch: Optional[str] = None
    reference: bool = False
    batch_bytes: int = COUNT_BATCH_BYTES
    memory: Optional[MemoryBudget] = None  # --memory (a text is parsed); None: the default
    encoding: str = "utf-8"
    skip_invalid: bool = False
    min_feature_count: tuple = ()  # [TYPES=]N specs (snm_core.count.thresholds)
    min_link_count: tuple = ()  # [TYPES=]N specs
    passes: Optional[int] = None  # passes over the text, each a share of the buckets; None:
    # as many as the scratch's free disk needs (budget.passes_for_disk)
    compress_scratch: str = "auto"  # "always", "never", or "auto": where raw parts would
    # need more than one pass (budget.passes_for_disk)

    def __post_init__(self):
        object.__setattr__(self, "train", tuple(self.train))
        object.__setattr__(self, "min_feature_count", tuple(self.min_feature_count or ()))
        object.__setattr__(self, "min_link_count", tuple(self.min_link_count or ()))
        running.absolute_paths(self, "out", "vocab", "add_to", "scratch")
        check_encoding(self.encoding)
        if self.num_buckets is not None and not 1 <= self.num_buckets <= 65536:
            raise SnmInputError("--num_buckets must be between 1 and 65536")
        if self.flush_links is not None and self.flush_links < 1:
            raise SnmInputError("--flush_links must be at least 1")
        object.__setattr__(self, "memory", MemoryBudget.of(self.memory))
        if self.min_count is not None and self.min_count < 1:
            raise SnmInputError("--min_count must be at least 1")
        if self.vocab is not None and self.min_count is not None:
            raise SnmInputError("give --vocab or --min_count, not both")
        if self.add_to is None and self.vocab is None and self.min_count is None:
            raise SnmInputError("give --vocab FILE or --min_count N (or --add_to COUNT_DIR)")
        if self.add_to is not None:
            if self.vocab is not None or self.min_count is not None:
                raise SnmInputError("--add_to uses the existing count's vocabulary; drop "
                                    "--vocab and --min_count")
            if self.reference:
                raise SnmInputError("--add_to works with the fast path only; drop --reference")
            if self.out == self.add_to:
                raise SnmInputError("--out must differ from --add_to: the old counts stay "
                                    "intact until the new ones are complete")
        if self.shuffle not in MODES:
            raise SnmInputError(f"--shuffle must be one of {', '.join(MODES)}")
        if self.passes is not None and self.passes < 1:
            raise SnmInputError("--passes must be at least 1")
        if self.compress_scratch not in SCRATCH_COMPRESSION:
            raise SnmInputError("--compress_scratch must be one of "
                                + ", ".join(SCRATCH_COMPRESSION))
        if (self.passes or 1) > 1 and (self.add_to or self.reference):
            raise SnmInputError("--passes counts the text in several passes on the fast "
                                "path only: drop --passes, or --add_to and --reference")


def run(args, beam_args=(), summary=True):
    """Run the count pipeline; returns its manifest.  ``summary``: print its totals (and
    Beam metrics) as a table."""
    beam_args = list(beam_args)
    config = load_config(args.config)
    min_feature_count = thresholds.parse(args.min_feature_count, config.feature_types(),
                                         continuation.parent_types(config))
    min_link_count = thresholds.parse(args.min_link_count, config.feature_types(),
                                      continuation.parent_types(config), thresholds.LINK_OPTION)
    sources, _ = training_sources.spool_stdin(training_sources.parse_sources(args.train),
                                              args.out)
    tags = training_sources.source_tags(sources)
    previous = None
    if args.add_to:
        previous, vocab, tags = _previous_counts(args, config, tags)
        args = dataclasses.replace(args, num_buckets=previous.num_buckets)
    files = training_sources.expand_sources(sources, tags)
    training_sources.check_has_words(files, args.encoding)
    budget, workers = args.memory, running.workers_per_process(beam_args)
    words, per_event = (training_sources.estimate_words(files),
                        FeatureExtractor(config).occurrences_per_event)
    plan = plan_memory(budget, workers, words, per_event, args.flush_links, args.num_buckets,
                       fixed_buckets=bool(args.add_to))
    args = dataclasses.replace(args, num_buckets=plan.num_buckets, flush_links=plan.flush_links)
    if not args.add_to:
        vocab = load_vocabulary(args, beam_args, sources)

    storage.makedirs(args.out)
    storage.remove_file(storage.join(args.out, tables.MANIFEST))
    vocab_path = storage.join(args.out, "vocab.txt")
    storage.write_text("".join(w + "\n" for w in vocab.words), vocab_path)
    fingerprint = count_directory.share_vocabulary(vocab_path, vocab)
    settings = _Extractor(config.to_text(), tags, vocab_path, fingerprint)

    scratch = scratch_directory(args.out, args.scratch, running.workers_are_local(beam_args))
    sketch_files = ()
    thresholded = bool(min_feature_count or min_link_count)
    compress = SCRATCH_COMPRESSION[args.compress_scratch]
    planned, compressed = (1, bool(compress)) if args.add_to or args.reference else \
        passes_for_disk(words * per_event, thresholded, storage.free_bytes(scratch), compress)
    passes = args.passes or planned
    ranges = bucket_passes(args.num_buckets, passes)

    def shuffle(p):
        return ArrayShuffle(args.shuffle, scratch, release=runners.kind(p.options) == "local",
                            compress=compressed)

    def manifest_step(shards):
        return running.CallOnce(write_manifest, args.out, args.num_buckets, config, tags,
                                len(vocab), fingerprint, sources, [s.name for s in shards],
                                scratch, previous, args.encoding, args.skip_invalid,
                                min_feature_count, min_link_count)

    def count_links(p, buckets=None, stage="count"):
        return CountLinks(settings, args.out, args.num_buckets, args.flush_links,
                          args.batch_bytes, shuffle(p), args.reference, args.add_to,
                          plan.merge_rows, args.encoding, min_feature_count, sketch_files,
                          min_link_count, buckets, stage)

    def build(p):
        shards = reading.text_shards(files, p.options)
        _ = (p
             | "ListShards" >> beam.Create(shards)
             | "Count" >> count_links(p)
             | "WriteManifest" >> manifest_step(shards))

    def build_pass(p, number, buckets, merged_path):
        """Pass ``number`` of several: its buckets merged, their elements kept in scratch."""
        stage = f"count: pass {number + 1} of {len(ranges)}"
        _ = (p
             | "ListShards" >> beam.Create(reading.text_shards(files, p.options))
             | "Count" >> count_links(p, buckets, stage)
             | "KeepMerged" >> running.CallOnce(_keep_merged, merged_path))

    def build_written(p, merged_paths):
        """After the passes: every bucket's links file with its continuation counts (the
        passes' kept elements read by the workers: a bucket's continuation names come
        from every bucket, hundreds of thousands of elements at 100M words)."""
        _ = (p
             | "MergedFiles" >> beam.Create(merged_paths)
             | "Merged" >> beam.FlatMap(_read_merged)
             | "Write" >> WriteCountedLinks(args.out, args.num_buckets, shuffle(p),
                                            plan.merge_rows)
             | "WriteManifest" >> manifest_step(reading.text_shards(files, p.options)))

    try:
        # With --add_to the old counts' features are not in a sketch of the new text:
        # the exact filter after the merge alone applies.
        if (min_feature_count or min_link_count) and not args.add_to:
            sketch_files = count_sketches(args, beam_args, settings, files, scratch,
                                          min_feature_count, min_link_count, budget, workers,
                                          words * per_event)
        text = [path for _, path in files]
        if len(ranges) == 1:
            metrics = running.run_pipeline(beam_args, build, "count",
                                           shared_paths=[args.out, scratch], text=text)
        else:
            merged_paths, part_bytes, number = [], 0, 0
            while number < len(ranges):
                buckets = ranges[number]
                merged_paths.append(storage.join(scratch, f"merged-{number:03d}.pickle"))
                pass_metrics = running.run_pipeline(
                    beam_args, lambda p: build_pass(p, number, buckets, merged_paths[-1]),
                    f"count: pass {number + 1} of {len(ranges)}",
                    shared_paths=[args.out, scratch], text=text)
                if number == 0:  # the text's statistics: the first pass reports them
                    metrics = pass_metrics
                if args.passes is None:  # passes the plan chose: planned again, measured
                    written = (pass_metrics or {}).get(SCRATCH_PART_BYTES)
                    part_bytes = None if written is None or part_bytes is None \
                        else part_bytes + written
                    ranges = _ranges_measured(ranges, number, part_bytes, scratch)
                number += 1
            running.run_pipeline(beam_args, lambda p: build_written(p, merged_paths),
                                 "count: links", shared_paths=[args.out, scratch])
    except BaseException:
        ArrayShuffle("files", scratch).cleanup()  # a failed count's parts are of no use
        raise
    manifest = storage.read_json(storage.join(args.out, tables.MANIFEST))
    if manifest["totals"]["key_collisions"]:
        logging.warning("%d feature keys are shared by two different features (64-bit hash "
                        "collisions, about n**2 / 2**65 expected among n features); their "
                        "counts are merged", manifest["totals"]["key_collisions"])
    if summary:
        running.print_summary(f"snm count: {manifest['totals']['links']:,} links -> {args.out}",
                              manifest["totals"], metrics)
    return manifest
