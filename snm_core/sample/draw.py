"""Text sampled from a model (``snm sample``; SRILM's ``ngram -gen``).

Sentences are drawn word by word from P(w | h), each from ``<S>`` until
``</S>`` is drawn, exactly for any configuration, skip-grams and corpus tags
included (:mod:`snm_core.sample.sample_loops`).  The output is ``shards``
files of about ``words / shards`` words each, one sentence a line:
``OUT/sample-KKKKK-of-NNNNN.txt`` (``.txt.gz`` compressed), then
``OUT/manifest.json`` with the totals.  A shard is one random stream of the
seed, so the same seed and shard count give the same files on any number of
threads; shards run on ``threads`` threads (default one per core, the
C loop releases the GIL).

A shard draws :data:`snm_core.sample.sample_loops.LANES` sentences side by
side; once it has its share of words it starts no more and finishes those
under way, so it holds its share plus at most that many sentences.  An empty
sentence (``</S>`` drawn first) is counted, not written: text readers skip
empty lines.
A sentence that reaches ``max_length`` words ends there (counted).  A history
none of whose features is in the model (possible only without the empty
feature) ends its sentence (counted as a dead end).
"""

import concurrent.futures
import dataclasses
import hashlib
import os
import threading
import time

import numpy as np
import pyarrow as pa

from snm_core.io import storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.io.progress import Progress
from snm_core.sample import sample_loops
from snm_core.sample.rows import load_rows
from snm_core.stages import manifests, validation
from snm_core.io.arrays import string_buffers
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor

#: Words drawn per call of the C loop (a few MB of buffers a thread).
CHUNK_WORDS = 1 << 20
#: Seconds between progress lines.
PROGRESS_SECONDS = 5.0
SHARD_PATTERNS = ("sample-*-of-*.txt", "sample-*-of-*.txt.gz")


@dataclasses.dataclass
class SampleOptions:
    """What ``snm sample`` draws, and where.

    Parameters
    ----------
    model : str
        Model directory (``snm apply`` or ``snm prune`` output), local or URL.
    words : int
        Words to draw in all (``</S>`` not counted); each shard finishes its last sentence.
    out : str
        Output directory, local or URL.
    seed : int, default 0
    shards : int, default 1
        Output files, each its own random stream.
    threads : int, optional
        Shards drawn at once (default: one per core, at most ``shards``).
    gzip : bool, default False
        Write ``.txt.gz`` shards.
    max_length : int, default 1000
        Longest sentence, in words; a longer one is cut there and counted.
    """

    model: str
    words: int
    out: str
    seed: int = 0
    shards: int = 1
    threads: int = None
    gzip: bool = False
    max_length: int = 1000

    def check(self):
        if self.words < 0:
            raise SnmInputError(f"--words {self.words}: give a number of words >= 0")
        if not 1 <= self.shards <= 99999:
            raise SnmInputError(f"--shards {self.shards}: give 1 to 99,999 shards")
        if self.threads is not None and self.threads < 1:
            raise SnmInputError(f"--threads {self.threads}: give at least 1")
        if self.max_length < 1:
            raise SnmInputError(f"--max_length {self.max_length}: give at least 1")
        if not 0 <= self.seed < 2 ** 63:
            raise SnmInputError(f"--seed {self.seed}: give a seed in [0, 2**63)")


def shard_name(shard, shards, gzip=False):
    return f"sample-{shard:05d}-of-{shards:05d}.txt" + (".gz" if gzip else "")


def shard_words(words, shards):
    """Each shard's share of ``words``: int64 (shards,), the first ones one more."""
    share = np.full(shards, words // shards, np.int64)
    share[:words % shards] += 1
    return share


def kernel_tables(extractor):
    """``(windows, salts, max_run)`` of :class:`snm_core.sample.sample_loops.Windows`
    for an extractor: its windows by type, a tied type's by increasing skip."""
    by_type = {}
    for type_index, r, s, a in extractor.generators:
        by_type.setdefault(type_index, []).append((r, s, a))
    rows = []
    for type_index, windows in by_type.items():
        first = len(rows)
        rows += [(type_index, r, s, a, first) for r, s, a in sorted(windows, key=lambda w: w[1])]
    windows = np.array(rows, np.int64).reshape(-1, 5)
    max_run = max(max(r, a) for _, r, _, a, _ in rows)
    salts = extractor.type_salts.reshape(len(extractor.tags), len(extractor.feature_types))
    return windows, np.ascontiguousarray(salts), max_run


class _Cancelled(Exception):
    """A shard stopped because the run was interrupted."""


class Stream:
    """One shard's random stream: its lanes' random states and sentences in progress.

    Parameters
    ----------
    seed, shard : int
    quota : int, the shard's words
    max_length : int
    windows : :class:`snm_core.sample.sample_loops.Windows` (the size of the keys' work space)
    """

    def __init__(self, seed, shard, quota, max_length, windows):
        lanes = sample_loops.LANES
        self.rng = np.stack([sample_loops.seed_state(seed, shard * lanes + lane)
                             for lane in range(lanes)])
        self.history = np.zeros((lanes, max_length + 1), np.int32)
        self.position = np.zeros(lanes, np.int64)
        self.hashes = np.zeros((lanes, windows.ring, windows.max_run + 1), np.uint64)
        self.words = np.zeros(1, np.int64)
        self.quota, self.max_length = quota, max_length
        self.finished = quota == 0
        self.state = sample_loops.StreamState.of(self.rng, self.history, self.position,
                                                 self.hashes, self.words, quota, max_length,
                                                 windows)


class Sampler:
    """A model's rows and configuration, ready to draw shards.

    Parameters
    ----------
    model_dir : str
    say : callable, optional: progress messages (building the rows)
    """

    def __init__(self, model_dir, say=lambda message: None):
        self.model_dir = model_dir
        checked = validation.validate_directory(model_dir, "model", parquet=False)
        manifest_bytes = storage.read_bytes(storage.join(model_dir, tables.MANIFEST))
        self.manifest = checked.manifest
        self.identity = hashlib.sha256(manifest_bytes).hexdigest()
        self.vocab = checked.vocabulary
        self.extractor = FeatureExtractor(parse_config(self.manifest["config"]),
                                          self.manifest["tags"])
        self.windows, self.salts, self.max_run = kernel_tables(self.extractor)
        self.rows = load_rows(model_dir, manifest_bytes, self.manifest, say)
        self.tables = sample_loops.Windows.of(self.windows, self.salts, self.max_run)
        self.row_tables = sample_loops.Rows.of(*self.rows.parts)
        self.word_offsets, self.word_data = string_buffers(
            pa.array(self.vocab.words, pa.large_string()))

    def stream(self, seed, shard, quota, max_length):
        return Stream(seed, shard, quota, max_length, self.tables)

    def draw(self, stream, words_wanted):
        """``(ids, stats)``: the next sentences of ``stream``, at least ``words_wanted``
        words unless it ends, each ended by ``</S>`` (see ``sample_sentences``)."""
        out = np.empty(sample_loops.out_length(words_wanted, stream.max_length), np.int32)
        used, stats, stream.finished = sample_loops.sample_sentences(
            self.tables, self.row_tables, stream.state, words_wanted, out)
        return out[:used], stats

    def text(self, ids):
        """UTF-8 bytes of sentences ``ids`` from :meth:`draw`."""
        return sample_loops.render(ids, self.word_offsets, self.word_data)


def sample(options, say=lambda message: None):
    """Draw ``options.words`` words into ``options.out`` (module docstring); returns the
    manifest written.  Progress goes to ``say`` every :data:`PROGRESS_SECONDS`."""
    options.check()
    sampler = Sampler(options.model, say)
    storage.makedirs(options.out)
    manifest_path = storage.join(options.out, tables.MANIFEST)
    if storage.exists(manifest_path):
        storage.remove_file(manifest_path)
    names = [shard_name(k, options.shards, options.gzip) for k in range(options.shards)]
    shares = shard_words(options.words, options.shards)
    stats = np.zeros((options.shards, len(sample_loops.STATS)), np.int64)
    cancel = threading.Event()

    def write_shard(k):
        stream = sampler.stream(options.seed, k, shares[k], options.max_length)
        with storage.atomic_output(storage.join(options.out, names[k])) as raw:
            sink = raw
            if options.gzip:
                from isal.igzip import IGzipFile
                sink = IGzipFile(fileobj=raw, mode="wb", compresslevel=1)
            while not stream.finished:
                if cancel.is_set():
                    raise _Cancelled()
                ids, chunk = sampler.draw(stream, CHUNK_WORDS)
                sink.write(sampler.text(ids))
                stats[k] += chunk
            if options.gzip:
                sink.close()

    threads = options.threads or min(options.shards, os.cpu_count() or 1)
    start, cpu_start = time.perf_counter(), time.process_time()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(write_shard, k) for k in range(options.shards)]
        try:
            _wait(futures, stats, options.words, start, say)
        except BaseException:
            cancel.set()
            concurrent.futures.wait(futures)
            raise
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    storage.remove_stale(options.out, set(names), SHARD_PATTERNS)
    totals = {name: int(v) for name, v in zip(sample_loops.STATS, stats.sum(axis=0))}
    manifest = {
        "kind": "sample", "format_version": tables.FORMAT_VERSION,
        "model": options.model, "model_manifest_sha256": sampler.identity,
        "config": sampler.manifest["config"], "tags": sampler.manifest["tags"],
        "seed": options.seed, "words_requested": options.words, "max_length": options.max_length,
        "files": names, "shard_words": stats[:, 0].tolist(), "totals": totals,
        "seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3),
        "threads": threads,
    }
    return manifests.write_manifest(manifest, options.out)


def _wait(futures, stats, words, start, say):
    """Wait for the shards, with their progress (:class:`snm_core.io.progress.Progress`)."""
    pending = set(futures)
    with Progress("sample", total=words, unit="word") as progress:
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=PROGRESS_SECONDS / 5,
                return_when=concurrent.futures.FIRST_EXCEPTION)
            for future in done:
                error = future.exception()
                if error is not None:
                    raise error
            progress.update(int(stats[:, 0].sum()) - progress.done)


def interrupted_message(out):
    """The one line of a run stopped by Ctrl-C."""
    return (f"interrupted; {out} has no {tables.MANIFEST} (the shards left there are whole, "
            "but the run is not: run it again)")

