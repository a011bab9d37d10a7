"""``snm prune --criterion backoff`` as a Beam pipeline: the back-off form's joins by
suffix key over key-range partitions on scratch storage (:mod:`snm_core.arpa.backoff`),
passes over the partitions that find the cut keeping the target
(:mod:`snm_core.prune.backoff`), then each model bucket rewritten with the rows its
partitions keep.  A worker holds one partition (``--memory``) or one model bucket.
"""

import io
import math
import time

import apache_beam as beam
import numpy as np

from pipelines import running, shuffle
from pipelines.prune_output import finish, write_manifest
from snm_core.arpa import backoff
from snm_core.io import model_files, storage
from snm_core.io.memory import PROCESS_BYTES
from snm_core.prune import criteria as prune_lib
from snm_core.prune.backoff import KeepRule, PruneJob, select_cut


class ScanBuckets(beam.DoFn):
    """A group of model buckets -> their contexts and entries cut into partitions;
    messages to every partition."""

    def __init__(self, job):
        self.job = job
        self.progress = running.worker_progress("prune", "reading the model", "bucket group",
                                                job.scans)

    def setup(self):
        running.configure_allocators()

    def process(self, group):
        yield from backoff.send(group, {}, self.job.scan(group), self.job.partitions)
        self.progress.update()


class RunStep(beam.DoFn):
    """``(partition, messages from every producer)`` -> the step on that partition;
    messages to ``destinations`` partitions.

    Every producer of the step before (``previous``) is done, so the tables it was the
    last to read are deleted (by partition 0): the scratch peaks at about half what
    keeping every table to the end took.  (A runner that recomputes a finished step,
    as Dask does for results a lost worker held, then fails on a missing file
    instead of writing anything wrong.)
    """

    def __init__(self, job, step, producers, destinations, previous=None):
        self.job, self.step, self.previous = job, step, previous
        self.producers, self.destinations = producers, destinations
        self.progress = running.worker_progress(
            "prune", f"{step[0]} join of order {step[1]}", "partition", job.partitions)

    def setup(self):
        running.configure_allocators()

    def process(self, element):
        partition, messages = element
        facts = backoff.receive("prune", self.producers, list(messages))
        if partition == 0 and self.previous is not None:
            for table in self.job.consumed(self.previous):
                self.job.remove(table)
        partial = self.job.run_step(self.step, partition, facts)
        self.progress.update()
        yield from backoff.send(partition, facts, partial, self.destinations)


class KeepPartition(beam.DoFn):
    """Partition -> the model rows its kept entries own, cut by model bucket."""

    def __init__(self, job, rule):
        self.job, self.rule = job, rule

    def setup(self):
        running.configure_allocators()

    def process(self, partition):
        yield from backoff.send(partition, {}, self.job.keep(partition, self.rule),
                                self.job.num_buckets)


class PruneBackoffBucket(beam.DoFn):
    """``(bucket, messages of every partition)`` -> writes the bucket's kept rows,
    renormalised; yields what it read and kept."""

    def __init__(self, job, out):
        self.job, self.out = job, out
        self.progress = running.worker_progress("prune", "writing", "bucket", job.num_buckets)

    def setup(self):
        running.configure_allocators()

    def process(self, element):
        bucket, messages = element
        self.progress.update()
        facts = backoff.receive("prune", range(self.job.partitions), list(messages))
        features, matrix = (model_files.read_bucket(self.job.model, table, bucket,
                                                    self.job.num_buckets)
                            for table in ("features", "matrix"))
        keep = np.zeros(matrix.num_rows, bool)
        keep[self.job.kept_rows(bucket)] = True
        kept_features, kept_matrix = prune_lib.pruned_tables(features, matrix, keep)
        prune_lib.write_bucket(self.out, bucket, self.job.num_buckets, kept_features,
                               kept_matrix)
        yield {"bucket": bucket, "links_read": matrix.num_rows,
               "features_read": features.num_rows, "links": kept_matrix.num_rows,
               "features": kept_features.num_rows, "lowest_kept": facts["lowest_kept"]}


def _save_arrays(arrays, path):
    buffer = io.BytesIO()
    np.savez(buffer, *arrays)
    storage.write_bytes(buffer.getvalue(), path)


def _load_arrays(path):
    with np.load(io.BytesIO(storage.read_bytes(path))) as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def _sum_histograms(results):
    return [sum(r[i] for r in results) for i in range(2)]


def _concatenate_gathered(results):
    return [np.concatenate([r[0] for r in results], axis=1),
            np.concatenate([r[1] for r in results])]


def _save_totals(elements, partitions, path):
    facts = backoff.receive("prune", range(partitions), [m for _, m in elements])
    storage.write_json(facts, path)


def prune_backoff(options, manifest, beam_args=(), summary=True):
    """The ``backoff`` pipelines (see the module docstring); returns the pruned
    manifest (``summary``: see :func:`run`)."""
    scratch = shuffle.scratch_directory(options.out)
    budget = options.memory
    workers = running.workers_per_process(beam_args)
    budget.require("prune", {"the process": PROCESS_BYTES,
                             "a partition a worker": workers * backoff.MIN_MEMORY})
    working = budget.working()
    job = PruneJob.plan(options.model, manifest, scratch, working, workers)
    runs = []

    def run(build):
        runs.append(running.run_pipeline(beam_args, build, "prune", shared_paths=[options.out]))

    def collect(name, step, combine):
        """``step(partition)`` on every partition, the results combined in this process.

        Each partition's arrays go to a scratch file of their own, never through the
        runner: a runner buffers, pickles and groups elements, several copies of
        what the selection gathers."""
        directory = storage.join(scratch, name)

        def path(partition):
            return storage.join(directory, f"{partition:05d}.npz")

        run(lambda p: (
            p | "Partitions" >> beam.Create(range(job.partitions))
            | name.capitalize() >> beam.Map(lambda q: _save_arrays(step(q), path(q)))))
        results = [_load_arrays(path(q)) for q in range(job.partitions)]
        storage.remove_tree(directory)
        return combine(results)

    prune_lib.start_output(options.model, options.out)
    if storage.exists(scratch):  # a killed run's: the run lock says none is live
        print(f"snm prune: removing {scratch}, left by a run that did not finish")
        storage.remove_tree(scratch)
    started = time.monotonic()
    try:
        totals_path = storage.join(scratch, "totals.json")

        def form(p):
            messages = (p | "Buckets" >> beam.Create(range(job.scans))
                        | "Scan" >> beam.ParDo(ScanBuckets(job)))
            producers, steps = range(job.scans), job.steps()
            for i, step in enumerate(steps):
                label = f"{step[0].capitalize()}{step[1]}"
                messages = (messages | f"To{label}" >> beam.GroupByKey()
                            | label >> beam.ParDo(RunStep(
                                job, step, producers, job.partitions if i + 1 < len(steps)
                                else 1, steps[i - 1] if i else None)))
                producers = range(job.partitions)
            _ = messages | "Totals" >> running.CallOnce(_save_totals, job.partitions,
                                                        totals_path)

        run(form)
        facts = storage.read_json(totals_path)
        backoff.check_totals("prune", manifest, facts, job.order)
        if summary:
            print(f"snm prune: back-off form and scores of {facts['links']:,} links in "
                  f"{job.partitions} partition(s) ({time.monotonic() - started:.1f} s)")
        if options.target_links is not None:
            rule = KeepRule(cut=select_cut(
                lambda level, prefix: collect("histogram", lambda q: job.histogram(
                    q, level, prefix), _sum_histograms),
                lambda prefix: collect("gather", lambda q: job.gather(q, prefix),
                                       _concatenate_gathered),
                options.target_links, max(1, working // 128)))
        else:
            rule = KeepRule(threshold=options.threshold)
        pruning = {"criterion": "relative entropy in the back-off form "
                                "(snm_core/prune/backoff.py)",
                   "suffix_closed": True, "target_links": options.target_links,
                   "threshold": options.threshold,
                   "links_before": manifest["totals"]["links"],
                   "features_before": manifest["totals"]["features"], "source": options.model}

        def write(totals):
            if options.target_links is not None:
                lowest = totals[0]["lowest_kept"] if totals else []
                pruning["threshold"] = min(lowest) if lowest else math.inf
            return write_manifest(totals, options.out, manifest, pruning)

        run(lambda p: (
            p | "Partitions" >> beam.Create(range(job.partitions))
            | "Keep" >> beam.ParDo(KeepPartition(job, rule))
            | "ToBuckets" >> beam.GroupByKey()
            | "Prune" >> beam.ParDo(PruneBackoffBucket(job, options.out))
            | "WriteManifest" >> running.CallOnce(write)))
    finally:
        storage.remove_tree(scratch)
    return finish(options, manifest, runs[-1], summary)
