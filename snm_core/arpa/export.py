"""Exact ARPA export of an n-gram SNM model (``snm export-arpa``), streamed.

An n-gram SNM is a back-off model (:mod:`snm_core.arpa.backoff`): the ARPA entry of
n-gram (h, w) is log10 N(h, w) / Z(h) and its back-off weight, as a context, is
log10 Z(h') / Z(h).  Every context the model has is also an n-gram entry (the
words before its last word were seen followed by it), every suffix of an entry is
an entry, and ``<s>`` gets log10 probability -99 (it is never predicted).

The back-off form is computed by joins on disk within a memory budget
(:class:`snm_core.arpa.backoff.BackoffJob`, run in this process), then each order's
section is written partition by partition: a partition's entries sorted by key, so
that a section lists its n-grams in the order of their 64-bit keys whatever the
budget.  A partition's lines are formatted at once by a compiled loop
(:func:`snm_core.arpa.arpa_loops.format_lines`, numbers in their shortest form) and
written to the output as they are made: ``.gz`` compressed (isal), a local file around
the page cache (:mod:`snm_core.io.direct`), a remote file as one multipart upload.
"""

import concurrent.futures
import os
import tempfile

import numpy as np
import pyarrow as pa

from snm_core.io import storage
from snm_core.io.arrays import stable_argsort, string_buffers
from snm_core.io.errors import SnmInputError
from snm_core.io.memory import PROCESS_BYTES, MemoryBudget, kept_heap
from snm_core.arpa.partitions import partition_of
from snm_core.arpa.arpa_loops import format_lines, gather_words, gram_words, word_cells
from snm_core.io.progress import Progress
from snm_core.io.threads import ordered_map
from snm_core.arpa.backoff import (
    MIN_MEMORY,
    BackoffJob,
    check_totals,
    context_keys,
    lookup,
    plain_extractor,
    run_locally,
)
from snm_core.stages.validation import validate_directory
from snm_core.text.config import parse_config
from snm_core.text.hashing import link_key
from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID, Vocabulary

ARPA_MARKERS = {BOS_ID: "<s>", EOS_ID: "</s>", UNK_ID: "<unk>"}
#: log10 "probability" of <s>, which is never predicted (the SRILM convention).
NEVER = -99.0


def export_arpa(model_dir, out_path, memory=None, scratch=None, threads=None, say=print):
    """Write the ARPA file of an n-gram model; returns the n-gram count of each order.

    Parameters
    ----------
    model_dir : str, a model directory (``snm apply`` or ``snm prune --criterion backoff``)
    out_path : str, local or remote; ``.gz`` is compressed
    memory : str, optional: the process's memory budget (``--memory``: ``"512M"``,
        ``"4G"``, ``"50%"``; default :class:`~snm_core.io.memory.MemoryBudget`'s); the
        model's size sets only the scratch disk and the time
    scratch : str, optional: a local directory for the joins' files (default: the
        system's temporary directory), about 60 bytes a link at the peak
    threads : int, optional: partitions computed at once, sharing ``memory`` (default:
        the cores, at most 4)
    """
    if threads is not None and threads < 1:
        raise SnmInputError(f"--threads {threads}: give at least 1")
    threads = threads or min(os.cpu_count() or 1, 4)
    budget = MemoryBudget.of(memory)
    budget.require("export-arpa", {"the process": PROCESS_BYTES,
                                   "a partition a thread": threads * MIN_MEMORY})
    with kept_heap("single"):  # the partitions' arrays reused, not zeroed afresh
        return _export(model_dir, out_path, budget.working(), scratch, threads, say)


def _export(model_dir, out_path, working, scratch, threads, say):
    manifest = validate_directory(model_dir, "model").manifest
    config = parse_config(manifest["config"])
    if config.ngram_order is None:
        raise SnmInputError(
            f"{model_dir}: ARPA holds only n-gram models; this configuration "
            f"({', '.join(manifest['feature_types'])}) is not the n-grams of lengths 0..N "
            "without skip-grams, so it has no exact back-off form")
    vocab = Vocabulary.load(storage.join(model_dir, "vocab.txt"))
    check_vocabulary(vocab)
    with tempfile.TemporaryDirectory(prefix="snm-arpa-", dir=scratch) as work:
        job = ArpaJob.plan(model_dir, manifest, work, working, threads)
        say(f"export-arpa: {manifest['totals']['links']:,} links, {job.order}-grams, in "
            f"{job.partitions} partition(s) of the back-off form")
        facts = run_locally(job, stage="export-arpa: back-off form", threads=threads)
        check_totals("export-arpa", manifest, facts, job.order)
        extras = _unigram_extras(job)
        counts = {n: facts[f"entries{n}"] + (len(extras[1]) if n == 1 else 0)
                  for n in range(1, job.order + 1)}
        parts = [(n, partition) for n in range(1, job.order + 1)
                 for partition in range(job.partitions)]
        with ArpaWriter(out_path, vocab, counts) as arpa, \
                concurrent.futures.ThreadPoolExecutor(threads) as pool, \
                Progress("export-arpa: writing", total=sum(counts.values()),
                         unit="n-gram") as progress:
            arpa.write(*arpa.lines(*extras))
            for n, lines, text in ordered_map(
                    pool, lambda part: arpa.lines(*_section_part(job, *part)), parts,
                    threads):
                arpa.write(n, lines, text)
                progress.update(lines)
    say(f"wrote {out_path}: " + ", ".join(f"{n}-grams {c:,}" for n, c in counts.items()))
    return counts


class ArpaJob(BackoffJob):
    """The back-off form with each entry's log10 probability, and its words: the scan
    writes them (``words{n}``, by the entry's key) for the section's lines."""

    def scan_tables(self):
        return super().scan_tables() + [f"words{n}" for n in range(1, self.order + 1)]

    def scan_links(self, out, links, words):
        grams = gram_words(words, links["of"], links["length"], links["word"], self.order)
        self._write_by_length(out, "words", 1, links["length"], links["key"], {
            "key": links["key"], **{f"w{j}": grams[j] for j in range(self.order)}})

    def entry_columns(self, n, entries, contexts, facts):
        return {"key": entries["key"],  # float32, as the line has it
                "log_prob": np.log10(entries["n"] / contexts["z"]).astype(np.float32),
                **({"n": entries["n"]} if n < self.order else {})}


def _section_part(job, n, partition):
    """``(n, words, log10 probabilities, back-offs or None)`` of the n-grams of one
    partition, in key order (``words`` int32 (k, n))."""
    entries = job.read(f"entry{n}", partition, ["key", "log_prob"])
    order, keys = stable_argsort(entries["key"], return_sorted=True)
    grams = job.read(f"words{n}", partition, scanned=True)  # tag copies: any, they agree
    rows = lookup(grams["key"], keys)
    if np.any(rows < 0):
        raise AssertionError(f"{n}-grams without their words in partition {partition}")
    words = gather_words(tuple(grams[f"w{j}"] for j in range(n)), rows)
    backoff = None
    if n < job.order:
        weights = job.read(f"bo{n}", partition)
        found = lookup(weights["key"], keys)
        values = weights["backoff"]
        # a partition may hold no context of this order with longer n-grams (all pruned)
        backoff = (np.where(found >= 0, values[np.maximum(found, 0)], 0) if len(values)
                   else np.zeros(len(keys), values.dtype))
    return n, words, entries["log_prob"][order], backoff


def _unigram_extras(job):
    """The unigram lines written before the model's: ``<s>`` (never predicted, with
    the back-off weight of its context) and ``<unk>`` if training never predicted it."""
    empty = context_keys(plain_extractor(job.config), np.zeros(1, np.int64),
                         np.zeros((1, 1), np.int64))
    bos, unk = (link_key(empty, np.array([w])) for w in (BOS_ID, UNK_ID))
    words, backoffs = [BOS_ID], []
    if job.order > 1:
        weights = job.read("bo1", int(partition_of(bos, job.partitions)[0]))
        found = lookup(weights["key"], bos)[0]
        backoffs.append(weights["backoff"][found] if found >= 0 else 0.0)
    unigrams = job.read("entry1", int(partition_of(unk, job.partitions)[0]), ["key"])
    if lookup(unigrams["key"], unk)[0] < 0:
        words.append(UNK_ID)
        backoffs.append(0.0)
    return (1, np.array(words, np.int64)[:, None], np.full(len(words), NEVER),
            np.array(backoffs) if job.order > 1 else None)


def check_vocabulary(vocab):
    """ARPA reserves ``<s>``, ``</s>`` and ``<unk>``: a vocabulary word spelt so is refused."""
    for word in vocab.words[3:]:
        if word in ("<s>", "</s>", "<unk>"):
            raise SnmInputError(f"the vocabulary has the word {word!r}, which ARPA reserves")


class ArpaWriter:
    """An ARPA file written as it is made: the header, then each order's lines in
    :meth:`write` calls (orders ascending), then ``\\end\\``.

    Parameters
    ----------
    out_path : str, local or remote; ``.gz`` is gzip-compressed (isal, deterministic:
        no name, no time in its header)
    vocab : Vocabulary
    counts : dict {order: n-grams}, the header's counts; each section must hold
        exactly that many lines

    Locally the file appears under its name when complete; a remote one is a
    multipart upload (:func:`snm_core.io.storage.atomic_output`).
    """

    def __init__(self, out_path, vocab, counts):
        self.out_path, self.counts = out_path, dict(counts)
        names = [ARPA_MARKERS.get(i, w) for i, w in enumerate(vocab.words)]
        self.vocab_text = vocabulary_text(names)
        self.order = self.written = 0

    def __enter__(self):
        self._output = storage.atomic_output(self.out_path, direct=True)
        self._raw = self._file = self._output.__enter__()
        if self.out_path.endswith(".gz"):
            from isal import igzip
            self._file = igzip.IGzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0,
                                         compresslevel=1)
        self._file.write(("\\data\\\n" + "".join(f"ngram {n}={c}\n" for n, c in
                                                  self.counts.items()) + "\n").encode())
        return self

    def lines(self, n, words, log_prob, backoff):
        """``(n, k, text)``: k lines of order ``n`` formatted (any thread may call it):
        ``words`` int (k, n) (oldest first), ``log_prob`` (k,), ``backoff`` (k,) or None
        (the highest order)."""
        text = format_lines(self.vocab_text, words, log_prob, backoff) if len(words) else b""
        return n, len(words), text

    def write(self, n, lines, text):
        """Write ``lines`` lines of order ``n`` formatted by :meth:`lines` (orders
        ascending)."""
        if n != self.order:
            self._end_section()
            self.order = n
            self._file.write(f"\\{n}-grams:\n".encode())
        self._file.write(text)
        self.written += lines

    def _end_section(self):
        if self.order:
            if self.written != self.counts[self.order]:
                raise AssertionError(f"{self.order}-grams: {self.written} lines written, "
                                     f"{self.counts[self.order]} in the header")
            self._file.write(b"\n")
        self.written = 0

    def __exit__(self, kind, value, traceback):
        try:
            if kind is None:
                self._end_section()
                if set(self.counts) != set(range(1, self.order + 1)):
                    raise AssertionError(f"sections 1..{self.order} written, the header "
                                         f"has {sorted(self.counts)}")
                self._file.write(b"\\end\\\n")
                if self._file is not self._raw:
                    self._file.close()  # the gzip trailer; the stream stays open
        finally:
            self._output.__exit__(kind, value, traceback)
        return False


def vocabulary_text(names):
    """The words' text for :func:`format_lines`: their UTF-8 offsets (int64) and bytes,
    and their :func:`~snm_core.arpa.arpa_loops.word_cells`."""
    start, data = string_buffers(pa.array(names, pa.string()))
    start = start.astype(np.int64)
    return start, data, word_cells(data, start)


def write_sections(out_path, vocab, sections):
    """Write an ARPA file of sections held in memory; returns the n-gram count of each
    order.

    ``sections``: per order n, ``(n, words, log10_prob, backoff)`` with ``words``
    int (k, n) (oldest word first), ``log10_prob`` (k,) and ``backoff`` (k,) or
    None (the highest order).
    """
    counts = {n: len(words) for n, words, _, _ in sections}
    with ArpaWriter(out_path, vocab, counts) as arpa:
        for section in sections:
            arpa.write(*arpa.lines(*section))
    return counts
