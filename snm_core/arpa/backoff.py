"""The back-off form of an n-gram model at any size: joins by suffix key on disk.

For a configuration whose features are the n-grams of lengths 0..N-1 the SNM is a
back-off model.  With, for a context h (summed over corpus tags),

    S(h) = M_h*,  Z(h) = S(h) + Z(h'),  N(h, w) = M_hw + N(h', w),

where h' drops the oldest word of h (Z and N of the empty context are its own S and
M), the model gives P(w | h) = N(h, w) / Z(h) for an entry (h, w) it has, and
otherwise [Z(h') / Z(h)] P(w | h').  ``snm export-arpa`` writes these numbers and
``snm prune --criterion backoff`` scores links with them.

Each value needs another row's: the suffix's.  So the form is computed order by
order as joins on hashed keys (contexts and entries are named by 64-bit keys of
their words, untagged: :func:`context_keys`, :func:`snm_core.text.hashing.link_key`),
and every table is cut into ``partitions`` key ranges on scratch storage
(:mod:`snm_core.arpa.partitions`), so that a step holds one partition of one order.
The steps, for entry order n = 1..N (contexts of length k = n - 1):

``scan`` (per group of model buckets, in chunks of ``chunk_links`` links)
    every feature row is a context (K = its key, K' = its suffix's, the key of the
    entry that is its own n-gram, M_h*, C(h,*)); every link an entry (its key, its
    context's, its suffix entry's, M_hw).  Contexts go to the partition of K',
    entries to that of their suffix entry: beside what they join with.
``suffix n`` (per partition)
    tag copies summed (in the model's row order, so every partitioning gives the
    same floating-point sums); Z(h) = S(h) + Z(h') for the contexts of length n - 1,
    with the context's back-off weight log10 Z(h') / Z(h) sent to the partition of
    its n-gram's entry; N(h, w) = M_hw + N(h', w) for the entries of order n, sent
    to their context's partition.  A missing suffix means the model is not a
    complete n-gram model: one line says so.
``context n`` (per partition)
    each entry of order n meets its context, and is written to the partition of its
    own key, where ``suffix n + 1`` finds N(h', w).

Subclasses add what their use needs: :class:`snm_core.arpa.export.ArpaJob` each
entry's log10 N / Z(h) and words, :class:`snm_core.prune.backoff.PruneJob`
each entry's score, its effective score (``backward`` steps) and each model row's
entry.

:func:`run_locally` runs the steps in this process (``snm export-arpa``);
``pipelines/prune.py`` runs the same steps as a Beam pipeline, one element per
model bucket or partition, a ``GroupByKey`` on the partition between steps.  Steps
pass small messages (:func:`send`, :func:`receive`) carrying totals, and each
checks that every producer of its input reported once.
"""

import concurrent.futures
import contextlib
import dataclasses
import math
import os

import numpy as np

from snm_core.io import losscheck, model_files, storage
from snm_core.io.errors import SnmInputError
from snm_core.io.file_pool import FilePool
from snm_core.arpa.partitions import PartitionedWriter, by_group, partition_of, read_partition
from snm_core.io.progress import Progress
from snm_core.arpa import arpa_loops
from snm_core.text import hashing
from snm_core.text.config import parse_config
from snm_core.text.features import FeatureExtractor

#: Working memory of a step, bytes per row of its partition (the largest order's
#: entries, the joins' and the writes' temporaries), and of the scan, per link of a
#: chunk (with the n-grams' words); with a margin (benchmarks/README.md, "The
#: back-off form at any size").
STEP_BYTES_PER_ROW = 320
SCAN_BYTES_PER_LINK = 400
#: A smaller budget is refused (any budget works, in more partitions the smaller).
MIN_MEMORY = 1 << 20

#: Why a model lacks an ARPA file's suffixes, most often.
CLOSURE_HINT = (" (snm prune --criterion mass keeps no suffixes for the links it keeps; "
                "prune with --criterion backoff to export ARPA)")

def context_keys(plain, lengths, words):
    """Untagged n-gram keys of word rows (``words`` padded, ``lengths`` words each)."""
    keys = np.empty(len(lengths), dtype=np.uint64)
    for n in np.unique(lengths) if len(lengths) else []:
        rows = np.flatnonzero(lengths == n)
        keys[rows] = plain.keys_for(int(n), words[rows][:, :n])
    return keys


_EXTRACTORS = {}


def plain_extractor(config_text):
    """The untagged extractor of a configuration (cached: a worker builds it once)."""
    if config_text not in _EXTRACTORS:
        _EXTRACTORS[config_text] = FeatureExtractor(parse_config(config_text))
    return _EXTRACTORS[config_text]


def lookup(keys, queries):
    """Position of each query in ``keys`` (distinct, any order); -1 where absent."""
    return arpa_loops.find(np.ascontiguousarray(keys, np.uint64),
                                np.ascontiguousarray(queries, np.uint64))


def group_sums(keys, *values):
    """Rows of equal keys summed in their input order: ``(first row of each group, rows
    in it, sums...)``, groups in the order of their first rows.  A partition's rows come
    in the model's row order (producers in bucket order, each cut stably), so tag copies
    add up the same whatever the partitioning."""
    group, first = arpa_loops.group_rows(np.ascontiguousarray(keys, np.uint64))
    if len(first) == len(keys):  # no copies (a pooled model): nothing to add
        return (first, np.ones(len(keys), np.int64),
                *(np.asarray(v, np.float64)[first] for v in values))
    return (first, np.bincount(group, minlength=len(first)),
            *(np.bincount(group, weights=np.asarray(v, np.float64), minlength=len(first))
              for v in values))


@dataclasses.dataclass(frozen=True)
class BackoffJob:
    """The back-off form of one model, as steps over partitions on scratch storage.

    Parameters
    ----------
    model : str, the model directory
    scratch : str, where the steps' files go (every worker must read it)
    config : str, the model's configuration text (an n-gram configuration)
    order : int, N: the longest n-gram
    num_buckets : int, the model's buckets
    partitions : int, key ranges a step is cut into
    chunk_links : int, links the scan holds at once
    buckets_per_scan : int, model buckets a scan reads in turn into one file (fewer,
        larger files for the steps to open)
    pooled : bool, consumed tables are pooled to be written over (set by
        :func:`run_locally`, whose steps run in this process)
    """

    model: str
    scratch: str
    config: str
    order: int
    num_buckets: int
    partitions: int
    chunk_links: int
    buckets_per_scan: int = 1
    pooled: bool = False

    #: What ``suffix n`` keeps of each entry and each context for ``context n``, and
    #: whether it writes the contexts' back-off weights (``bo{k}``, by their own entry).
    carried = ("key", "context", "n")
    context_carried = ("key", "z")
    backoffs = True

    @classmethod
    def plan(cls, model_dir, manifest, scratch, memory, threads=1):
        """A job for ``model_dir`` (its ``manifest``) within ``memory`` bytes of working
        memory a process, ``threads`` partitions at once."""
        config = parse_config(manifest["config"])
        if config.ngram_order is None:
            raise SnmInputError(
                f"{model_dir}: the back-off form needs an n-gram model (the n-grams of "
                f"lengths 0..N-1 without skip-grams); this configuration "
                f"({', '.join(manifest['feature_types'])}) has none")
        if memory < MIN_MEMORY:
            raise SnmInputError(f"a memory budget of {memory:,} bytes is too small: give at "
                                f"least {MIN_MEMORY >> 20} MiB (e.g. --memory 512M)")
        links, num_buckets = int(manifest["totals"]["links"]), int(manifest["num_buckets"])
        share = memory // threads
        partitions = min(max(1, math.ceil(links * STEP_BYTES_PER_ROW / share)), 1 << 16)
        chunk_links = max(1 << 10, share // SCAN_BYTES_PER_LINK)
        return cls(model_dir, scratch, manifest["config"], config.ngram_order, num_buckets,
                   partitions, chunk_links,
                   max(1, min(num_buckets, chunk_links * num_buckets // max(links, 1))))

    # --- files -------------------------------------------------------------------

    @property
    def pool(self):
        """The local scratch's pool of consumed files, written over by the next step's
        tables when the steps run in this process (:func:`run_locally`,
        :mod:`snm_core.io.file_pool`); else, and for a remote scratch, None."""
        return (FilePool(self.scratch) if self.pooled and not storage.is_remote(self.scratch)
                else None)

    def path(self, table, producer):
        """The file of ``table`` (e.g. ``"z2"``) written by ``producer``."""
        return storage.join(self.scratch, table, f"{producer:05d}.arrow")

    @property
    def scans(self):
        """The scan's producers: groups of ``buckets_per_scan`` model buckets."""
        return -(-self.num_buckets // self.buckets_per_scan)

    def scan_files(self, table):
        return [self.path(table, s) for s in range(self.scans)]

    def step_files(self, table):
        return [self.path(table, p) for p in range(self.partitions)]

    def read(self, table, partition, columns=None, scanned=False):
        """Partition ``partition`` of ``table`` from every producer (the model buckets
        for the scan's tables, else the partitions)."""
        files = self.scan_files(table) if scanned else self.step_files(table)
        return read_partition(files, partition, self.partitions, columns)

    def write(self, table, producer, columns, keys, partitions=None, by=None):
        """``columns`` cut by the partition of ``keys`` (or by ``by``, each row's
        partition) into ``table``'s file of ``producer``."""
        partitions = partitions or self.partitions
        with PartitionedWriter(self.path(table, producer), partitions, pool=self.pool) as out:
            out.write(columns, partition_of(keys, partitions) if by is None else by)

    # --- steps -------------------------------------------------------------------

    def steps(self):
        """The steps after the scan, in order: ``(name, n)``."""
        return [(name, n) for n in range(1, self.order + 1) for name in ("suffix", "context")]

    def run_step(self, step, partition, facts):
        """Run one step on one partition; returns its totals (added to ``facts``)."""
        name, n = step
        return getattr(self, name)(n, partition, facts)

    def scan(self, group):
        """Cut the contexts and entries of a group of model buckets into the partitions
        of their suffixes; returns the group's totals."""
        plain = plain_extractor(self.config)
        width = max(self.order - 1, 1)
        totals = {"features": 0, "links": 0, "context_count": 0}
        with contextlib.ExitStack() as stack:
            out = {name: stack.enter_context(PartitionedWriter(
                self.path(name, group), self.partitions, pool=self.pool))
                   for name in self.scan_tables()}
            first = group * self.buckets_per_scan
            for bucket, first_feature, first_link, features, matrix in (
                    (bucket, *chunk) for bucket in range(
                        first, min(first + self.buckets_per_scan, self.num_buckets))
                    for chunk in _bucket_chunks(self.model, bucket, self.num_buckets,
                                                self.chunk_links)):
                words, lengths = arpa_loops.padded_words(
                    features["words"].offsets.to_numpy(), features["words"].values.to_numpy(),
                    width)
                if np.any(lengths >= self.order):
                    raise SnmInputError(f"{self.model}: a feature of {lengths.max()} words "
                                        f"in a {self.order}-gram model; re-run snm apply")
                keys, suffix, own_entry = arpa_loops.ngram_keys(
                    words, lengths, plain.type_salts, hashing.SEQUENCE_SEED)
                self._write_by_length(out, "ctx", 0, lengths, suffix, {
                    "key": keys, "suffix": suffix, "entry": own_entry, "s": features["m_star"],
                    **({"c": features["count"]} if "c" in self.context_carried else {})})
                of_link = np.repeat(np.arange(len(lengths)), features["diversity"])
                word = matrix["word"]
                link_lengths = lengths[of_link]
                entry, entry_suffix = arpa_loops.link_keys(keys, suffix, lengths, of_link,
                                                                word)
                self._write_by_length(out, "ent", 1, link_lengths, entry_suffix, {
                    "key": entry, "context": keys[of_link], "suffix": entry_suffix,
                    "m": matrix["m"]})
                self.scan_links(out, {
                    "key": entry, "row": (np.int64(bucket) << 32) + first_link
                    + np.arange(len(word)), "length": link_lengths, "word": word,
                    "of": of_link}, words)
                totals["features"] += len(lengths)
                totals["links"] += len(word)
                totals["context_count"] += int(features["count"].sum())
        return totals

    def _write_by_length(self, out, table, offset, lengths, keys, columns):
        """Rows of every length k into ``table{k + offset}``, cut by the partition of
        ``keys``: one stable cut by (length, partition) for all of them."""
        group = (lengths * self.partitions + partition_of(keys, self.partitions)).astype(
            np.uint16 if self.order * self.partitions < 1 << 16 else np.int64)
        ordered, bounds = by_group(columns, group, self.order * self.partitions)
        for k in range(self.order):
            rows = slice(bounds[k * self.partitions], bounds[(k + 1) * self.partitions])
            n = k + offset
            out[f"{table}{n}"].write_sorted(
                {name: values[rows] for name, values in ordered.items()
                 if not name.startswith("w") or int(name[1:]) < n},  # w{j}: words
                bounds[k * self.partitions:(k + 1) * self.partitions + 1] - rows.start)

    def scan_tables(self):
        """The tables the scan writes: contexts by length, entries by order."""
        return ([f"ctx{k}" for k in range(self.order)]
                + [f"ent{n}" for n in range(1, self.order + 1)])

    def scan_links(self, out, links, words):
        """Write what a subclass keeps of each link (nothing here): ``links`` a dict of
        arrays by link (``key`` of its entry, model ``row``, context ``length``, ``word``,
        ``of``: its feature's row), ``words`` the features' words (padded)."""

    def suffix(self, n, partition, facts):
        """Z of the contexts of length n - 1 and N of the entries of order n."""
        k = n - 1
        ctx = self.read(f"ctx{k}", partition, scanned=True)
        first, copies, s, *c = group_sums(ctx["key"], ctx["s"], *(
            [ctx["c"]] if "c" in ctx else []))  # C(h,*) only where it is carried
        keys, own_entry, suffix = (ctx[name][first] for name in ("key", "entry", "suffix"))
        del ctx
        if k == 0:
            z = s
        else:
            lower = self.read(f"z{k - 1}", partition, ["key", "z"])
            found = lookup(lower["key"], suffix)
            if np.any(found < 0):
                raise SnmInputError(f"{self.model}: a context's suffix is missing; the model "
                                    f"is not a complete n-gram model{CLOSURE_HINT}")
            z_suffix = lower["z"][found]
            del lower, found
            z = s + z_suffix
            if self.backoffs:
                self.write(f"bo{k}", partition,
                           {"key": own_entry,  # float32, as the ARPA file has it
                            "backoff": np.log10(z_suffix / z).astype(np.float32)}, own_entry)
        self.write(f"z{k}", partition, {name: values for name, values in (
            ("key", keys), ("z", z), ("c", c[0] if c else None), ("entry", own_entry))
            if name in self.context_carried}, keys)
        contexts = {f"contexts{k}": len(keys), f"context_rows{k}": int(copies.sum())}
        del keys, own_entry, suffix, z, s, c

        ent = self.read(f"ent{n}", partition, scanned=True)
        first, copies, m = group_sums(ent["key"], ent["m"])
        columns = {name: values[first] for name, values in ent.items() if name != "m"}
        del ent
        columns["m"], columns["rows"] = m, copies
        if n == 1:
            columns["n"] = m
        else:
            lower = self.read(f"entry{n - 1}", partition, ["key", "n"])
            found = lookup(lower["key"], columns["suffix"])
            if np.any(found < 0):
                raise SnmInputError(f"{self.model}: an n-gram's suffix is missing; the model "
                                    f"is not a complete n-gram model{CLOSURE_HINT}")
            columns["n"] = m + lower["n"][found]
        totals = {**contexts, f"entries{n}": len(columns["key"]),
                  f"rows{n}": int(columns["rows"].sum())}
        self.write(f"nent{n}", partition, {name: values for name, values in columns.items()
                                           if name in self.carried}, columns["context"])
        return totals

    def context(self, n, partition, facts):
        """Each entry of order n with its context's Z (and C, and the context's own
        entry), written to the partition of its key."""
        ent = self.read(f"nent{n}", partition)
        ctx = self.read(f"z{n - 1}", partition)
        found = lookup(ctx["key"], ent["context"])
        if np.any(found < 0):
            raise SnmInputError(f"{self.model}: an n-gram's context is missing; re-run snm "
                                "apply")
        columns = self.entry_columns(n, ent, {name: v[found] for name, v in ctx.items()},
                                     facts)
        self.write(f"entry{n}", partition, columns, ent["key"])
        return {}

    def consumed(self, step):
        """The tables no step after ``step`` reads (the back-off form's own; the
        entries' final tables are the caller's)."""
        name, n = step
        if name == "suffix":
            return [f"ctx{n - 1}", f"ent{n}"] + ([f"z{n - 2}"] if n >= 2 else [])
        return [f"nent{n}"] + ([f"z{n - 1}"] if n == self.order else [])

    def remove(self, table):
        storage.remove_tree(storage.join(self.scratch, table))

    def recycle(self, tables):
        """After a step run in this process: the pooled files it did not write over
        deleted, and ``tables`` (read for the last time) pooled for the next step to
        write over; a remote scratch's tables deleted."""
        pool = self.pool
        if pool is None:
            for table in tables:
                self.remove(table)
            return
        pool.clear()
        for table in tables:
            pool.release(os.path.join(self.scratch, table))

    def entry_columns(self, n, entries, contexts, facts):
        """What ``entry{n}`` keeps of each entry (here its key and N, which ``suffix n + 1``
        reads); ``contexts``: its context's row of ``z{n - 1}``."""
        return {"key": entries["key"], "n": entries["n"]}


def _bucket_chunks(model, bucket, num_buckets, chunk_links):
    """``(first feature row, first link row, features, matrix)`` of one model bucket
    (:func:`snm_core.io.model_files.bucket_chunks`)."""
    first_feature = first_link = 0
    for features, matrix in model_files.bucket_chunks(
            model, bucket, num_buckets, ["words", "count", "diversity", "m_star"],
            ["word", "m"], chunk_links):
        yield first_feature, first_link, features, matrix
        first_feature += len(features["count"])
        first_link += len(matrix["word"])


# --- messages between steps, and the steps run in this process --------------------------

def send(producer, known, partial, destinations):
    """The messages a producer sends each destination partition: ``(destination,
    message)``; ``known`` the totals it was given, ``partial`` its own."""
    message = {"from": producer, "known": known, "partial": partial}
    return [(d, message) for d in range(destinations)]


def receive(stage, producers, messages):
    """The totals a step starts from: what its producers knew plus what each added.
    Every producer must have reported once (or the runner lost or repeated work)."""
    losscheck.check_each_once(stage, "producers", producers, [m["from"] for m in messages])
    known = dict(messages[0]["known"]) if messages else {}
    for message in messages:
        if message["known"] != messages[0]["known"]:
            raise AssertionError(f"{stage}: producers disagree on the totals")
        losscheck.add_totals(known, message["partial"])
    return known


def check_totals(stage, manifest, facts, order):
    """What the steps saw of the model against its manifest: every link and feature
    once."""
    links = sum(facts.get(f"rows{n}", 0) for n in range(1, order + 1))
    contexts = sum(facts.get(f"context_rows{k}", 0) for k in range(order))
    with losscheck.Checks(stage) as checks:
        checks.equal("links in the model", manifest["totals"]["links"], "links read",
                     facts["links"])
        checks.equal("links read", facts["links"], "entries' links", links)
        checks.equal("features in the model", manifest["totals"]["features"], "features read",
                     facts["features"])
        checks.equal("features read", facts["features"], "contexts' features", contexts)


def run_locally(job, steps=None, stage="back-off form", threads=1):
    """Run ``job``'s scan and ``steps`` (default all) in this process, ``threads``
    partitions at once, with progress as ``stage``; returns the totals.  Each step's
    input files go to the scratch's pool once no later step reads them, and what the
    next step does not write over is deleted when it ends."""
    steps = job.steps() if steps is None else steps
    job = dataclasses.replace(job, pooled=True)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool, \
            Progress(stage, total=job.scans + len(steps) * job.partitions,
                     unit="part") as progress:
        inbox = {}
        results = pool.map(job.scan, range(job.scans))
        for group, partial in enumerate(results):
            progress.update()
            for d, message in send(group, {}, partial, job.partitions):
                inbox.setdefault(d, []).append(message)
        producers = range(job.scans)
        for step in steps:
            facts = [receive(f"{step[0]} {step[1]}", producers, inbox.get(p, []))
                     for p in range(job.partitions)]
            results = pool.map(job.run_step, [step] * job.partitions, range(job.partitions),
                               facts)
            outbox = {}
            for partition, partial in enumerate(results):
                progress.update()
                for d, message in send(partition, facts[partition], partial, job.partitions):
                    outbox.setdefault(d, []).append(message)
            inbox, producers = outbox, range(job.partitions)
            job.recycle(job.consumed(step))
        job.recycle([])
    return receive("back-off form", producers, inbox.get(0, []))
