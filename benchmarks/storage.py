"""Requests to object storage per `snm train` run, per stage (issue 32).

    python benchmarks/storage.py                          # kernel-100k and kernel, 5-gram
    python benchmarks/storage.py --setups kernel-100k --detail
    python benchmarks/storage.py --inputs bucket          # the text read from the bucket too

An S3-protocol server on loopback (moto's, behind a handler that logs every
request: ``tests/support/s3server.py``) and ``snm train --config 5gram --out
s3://bench/<setup>`` with the local inputs (train, dev, test and the setup's
vocab.txt; with ``--inputs bucket``, copies of them in the bucket), run in
this process so that each request is given to the stage that made it (the
run's set-up before the first stage, each stage of ``snm.chain`` including
its skip check, and the end).  Then the same command again, which finds
every stage current.  Requests are counted by the server, by S3 operation: HEAD (HeadObject/HeadBucket), LIST, GET, PUT (PutObject), MPU
(CreateMultipartUpload, UploadPart, CompleteMultipartUpload), COPY
(CopyObject) and DEL (DeleteObject(s), AbortMultipartUpload).  ``--detail``
prints, per stage, the most frequent (operation, path with digits as ``#``).

Prints a table; appends one row per (setup, run, stage) to results.jsonl.
"""

import argparse
import collections
import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))

from benchmarks.common import MODE, WORK, corpus, print_table, record  # noqa: E402
from s3server import operations, running  # noqa: E402

BUCKET = "bench"
KINDS = {"HeadObject": "head", "HeadBucket": "head", "ListObjects": "list",
         "GetObject": "get", "PutObject": "put", "CreateMultipartUpload": "mpu",
         "UploadPart": "mpu", "CompleteMultipartUpload": "mpu", "CopyObject": "copy",
         "UploadPartCopy": "copy", "DeleteObject": "del", "DeleteObjects": "del",
         "AbortMultipartUpload": "del"}
COLUMNS = ("head", "list", "get", "put", "mpu", "copy", "del")


def train_files(setup):
    train = corpus(setup, "train.txt.gz" if setup == "kernel" else "train.txt")
    return train, corpus(setup, "dev.txt"), corpus(setup, "test.txt"), corpus(setup, "vocab.txt")


def upload_inputs(setup, paths):
    """Copies of the local ``paths`` in the bucket (made with pyarrow, not snm's code)."""
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(endpoint_override=os.environ["AWS_ENDPOINT_URL"])
    remote = []
    for path in paths:
        key = f"{BUCKET}/inputs/{setup}/{os.path.basename(path)}"
        pafs.copy_files(path, key, destination_filesystem=fs)
        remote.append(f"s3://{key}")
    return remote


def run_train(argv, log_path):
    """``snm train argv`` in this process: ``[(part, requests)]`` in order, where a part is
    "setup", a stage's name or "end"."""
    from snm import chain
    from snm.cli import main as snm_main

    parts, offset = [], [os.path.getsize(log_path)]

    def take(name):  # the server logs a request before it answers: the log is complete
        ops, offset[0] = operations(log_path, offset[0])
        parts.append((name, ops))

    original = chain.Runner._stage

    def stage(self, number, total, stage):
        take(parts[-1][0] if parts else "setup")  # between stages: the previous one's
        original(self, number, total, stage)
        take(stage.name)

    chain.Runner._stage = stage
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            status = snm_main(["train", *argv])
        if status:
            raise SystemExit(f"snm train failed ({status}):\n{out.getvalue()[-3000:]}")
    finally:
        chain.Runner._stage = original
    take("end")
    merged = {}
    for name, ops in parts:
        merged.setdefault(name, []).extend(ops)
    return list(merged.items())


def pattern(op, path):
    return f"{op} {re.sub(r'[0-9]+', '#', path.split('/', 3)[-1])}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setups", nargs="+", default=["kernel-100k", "kernel"])
    parser.add_argument("--config", default="5gram")
    parser.add_argument("--inputs", choices=("local", "bucket"), default="local",
                        help="where the text and vocabulary are read from")
    parser.add_argument("--label", default="", help="a name for this code in results.jsonl")
    parser.add_argument("--detail", action="store_true")
    options = parser.parse_args()

    work = os.path.join(WORK, "storage")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    log_path = os.path.join(work, "requests.tsv")
    rows = []
    with running(log_path, bucket=BUCKET) as env:
        os.environ.update(env)
        os.environ["SNM_CACHE"] = tempfile.mkdtemp(dir=work)
        for setup in options.setups:
            train, dev, test, vocab = train_files(setup)
            if options.inputs == "bucket":
                train, dev, test, vocab = upload_inputs(setup, (train, dev, test, vocab))
            argv = ["--config", options.config, "--train", train, "--vocab", vocab,
                    "--heldout", dev, "--test", test, "--out", f"s3://{BUCKET}/{setup}",
                    *MODE]
            for run in ("first", "again"):
                start = time.perf_counter()
                parts = run_train(argv, log_path)
                seconds = time.perf_counter() - start
                for name, ops in parts + [("total", [o for _, p in parts for o in p])]:
                    kinds = collections.Counter(KINDS.get(op, "other") for op, *_ in ops)
                    rows.append({"setup": setup, "config": options.config, "run": run,
                                 "inputs": options.inputs,
                                 "stage": name, "requests": len(ops),
                                 **{k: kinds.get(k, 0) for k in COLUMNS},
                                 "mib_up": round(sum(o[3] for o in ops) / 2**20, 1),
                                 **({"wall_s": round(seconds, 1)} if name == "total" else {}),
                                 **({"code": options.label} if options.label else {})})
                    if options.detail and run == "first" and name != "total":
                        common = collections.Counter(pattern(op, path) for op, path, *_ in ops)
                        print(f"--- {setup} {name}: {len(ops)} requests")
                        for text, n in common.most_common(12):
                            print(f"{n:>7}  {text}")
    print_table(rows, ("setup", "run", "stage", "requests", *COLUMNS, "mib_up", "wall_s"))
    record("storage", rows)


if __name__ == "__main__":
    main()
