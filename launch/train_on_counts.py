"""``snm train`` going on from counts made by ``snm count --add_to``: the retraining's step.

    python launch/train_on_counts.py SNM-TRAIN-ARGUMENTS

with ``--out RUN`` where ``RUN/counts`` is a complete count directory,
``--vocab RUN/counts/vocab.txt`` and, as ``--train``, the shards that count
added.  Used by ``cron_retrain.sh`` and ``airflow_dag.py`` after::

    snm count --add_to OLD/counts --train 'RUN/shards/*' --out RUN/counts

Why it exists: ``snm train`` has no ``--add_to``: it cannot add new shards to
earlier counts, it always counts its ``--train`` files afresh.  Counts are
additive, and a retraining should read only the new shards, so the count is
the separate ``snm count --add_to`` above.  But ``snm train`` re-runs a stage
unless ``RUN/stages.json`` records it as done from the same inputs, which a
count made outside it is not: run plainly, it would count only the new shards
over the added counts.  So this script

1. runs ``snm train`` in this process (``snm.train_cmd.main``, the same
   arguments) with the count stage's pipeline (``pipelines.count.run``)
   replaced by a check that ``RUN/counts`` is complete, and stops it when it
   reaches join: ``snm train`` itself records its count stage as done, with
   its own signature of the inputs (``--train`` files, config, vocabulary,
   buckets), in ``RUN/stages.json``.  Skipped when ``RUN/stages.json``
   already records a count stage (a retry);
2. runs ``python -m snm train`` with the same arguments: vocab given, count up
   to date, then join, fit, apply, eval, exactly as ``snm train`` does;
3. checks that ``RUN/counts/manifest.json`` is still byte for byte the one
   ``snm count --add_to`` wrote.  If ``snm train`` changed so that step 1 no
   longer takes, it would have counted only the new shards: exit 1 (the
   retraining then keeps the current model) rather than a model missing the
   old counts.

Delete this script, and the separate ``snm count``, once ``snm train`` has
an ``--add_to COUNTS`` option of its own.
"""

import argparse
import json
import os
import subprocess
import sys

from apache_beam.io.filesystems import FileSystems

import pipelines.count
import pipelines.join
from snm import train_cmd
from snm_core import tables


class _CountAdopted(Exception):
    """Raised where ``snm train`` would start join: step 1 is done."""


def _read(path):
    with FileSystems.open(path) as f:
        return f.read()


def _state(out):
    path = FileSystems.join(out, train_cmd.STATE)
    return json.loads(_read(path)) if FileSystems.exists(path) else {}


def _same_path(a, b):
    return a.rstrip("/") == b.rstrip("/") if "://" in a + b else (
        os.path.abspath(a) == os.path.abspath(b))


def _out_of(args, kwargs):
    """The output directory a stage's ``run`` was given: ``--out`` of an argument
    list, or the ``out`` of an options object (None if neither)."""
    first = args[0] if args else kwargs.get("args", kwargs.get("options"))
    if isinstance(first, (list, tuple)) and "--out" in first:
        return first[list(first).index("--out") + 1]
    return getattr(first, "out", None)


def record_counts(argv, counts):
    """Step 1: ``snm train`` records ``counts`` as its finished count stage."""
    adopted = []

    def adopt(*args, **kwargs):  # whatever the stage's signature
        out = _out_of(args, kwargs)
        if out is not None and not _same_path(str(out), counts):
            raise SystemExit(f"train_on_counts.py: snm train counts into {out}, not {counts}")
        adopted.append(counts)  # the counts are there (checked in main): nothing to do

    def stop(*_args, **_kwargs):
        raise _CountAdopted()

    saved = pipelines.count.run, pipelines.join.run
    pipelines.count.run, pipelines.join.run = adopt, stop
    try:
        train_cmd.main(argv)
    except _CountAdopted:
        pass
    finally:
        pipelines.count.run, pipelines.join.run = saved
    return bool(adopted)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="train_on_counts.py", add_help=False,
        description="snm train on a run directory whose counts/ snm count --add_to made")
    parser.add_argument("--out", required=True)
    parser.add_argument("--vocab")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    known, _ = parser.parse_known_args(argv)
    if known.help:
        print(__doc__)
        return 0
    if known.force:
        parser.error("--force would count the new shards afresh over RUN/counts; leave it out")
    counts = FileSystems.join(known.out, "counts")
    manifest = FileSystems.join(counts, tables.MANIFEST)
    if not FileSystems.exists(manifest):
        parser.error(f"{manifest}: no such file (run snm count --add_to ... --out {counts} "
                     "first)")
    if not known.vocab:
        parser.error(f"give --vocab {FileSystems.join(counts, 'vocab.txt')}: the vocabulary "
                     "of the counts")
    before = _read(manifest)

    if "count" in _state(known.out):
        print(f"train_on_counts.py: {known.out}/{train_cmd.STATE} already records a count "
              "stage", flush=True)
    else:
        print(f"train_on_counts.py: recording {counts} as snm train's count stage", flush=True)
        adopted = record_counts(argv, counts)
        if not adopted or "count" not in _state(known.out) or _read(manifest) != before:
            print(f"train_on_counts.py: snm train did not take {counts} as its count stage "
                  "(has snm/train_cmd.py changed?); model not trained", file=sys.stderr)
            return 1

    code = subprocess.call([sys.executable, "-m", "snm", "train"] + argv)
    if code:
        return code
    if _read(manifest) != before:
        print(f"train_on_counts.py: snm train counted afresh into {counts}: the model lacks "
              "the earlier counts; do not use it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
