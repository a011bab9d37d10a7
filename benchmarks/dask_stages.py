"""count, apply and backoff pruning on a two-worker Dask cluster against the local runner.

    python benchmarks/dask_stages.py --train '/data/scale/corpus-100M/train/*' \\
        --heldout DEV --vocab VOCAB --work /data/dask-stages

Each Beam stage runs twice on the same inputs: the local runner (the FnApiRunner,
two threads) and Beam's DaskRunner against a ``dask scheduler`` and two ``dask
worker`` processes of one thread (started once, not timed).  The two outputs are
compared byte for byte (every Parquet file); the fit, which runs on one worker, runs
once, locally, between count and apply.  Prints a table (seconds, same bytes) and
appends to benchmarks/results.jsonl.
"""

import argparse
import filecmp
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import print_table, record, run_measured  # noqa: E402
from snm.dask_cluster import LocalDaskCluster  # noqa: E402

LOCAL = ["--direct_num_workers=2"]


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def same_files(a, b):
    names = sorted(n for n in os.listdir(a) if n.endswith(".parquet"))
    return names == sorted(n for n in os.listdir(b) if n.endswith(".parquet")) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", required=True, help="training text (a glob)")
    parser.add_argument("--heldout", required=True)
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--work", required=True, help="a directory every worker reads")
    parser.add_argument("--memory", default="8G")
    parser.add_argument("--stages", default="count,apply,prune")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    stages = args.stages.split(",")
    rows = []

    def run(stage, runner, out, cmd):
        seconds, rss = run_measured(cmd, log=out + ".log")
        print(f"{stage} {runner}: {seconds:.1f} s", flush=True)
        return {"stage": stage, "runner": runner, "seconds": round(seconds, 2),
                "peak_rss_mib": round(rss, 1)}

    w = args.work
    with tempfile.TemporaryDirectory(dir=w) as tmp, \
            LocalDaskCluster(tmp, workers=2, threads=1) as cluster:
        runners = {"local": LOCAL, "dask": cluster.runner_options()}
        for runner, options in runners.items():
            if "count" in stages or not os.path.exists(os.path.join(w, "count-local")):
                rows.append(run("count", runner, os.path.join(w, f"count-{runner}"), snm(
                    "count", "--config", "5gram", "--train", args.train, "--vocab",
                    args.vocab, "--out", os.path.join(w, f"count-{runner}"), "--memory",
                    args.memory, *options)))
        if "count" in stages:
            same = same_files(os.path.join(w, "count-local"), os.path.join(w, "count-dask"))
            for row in rows[-2:]:
                row["same_bytes"] = same
        count = os.path.join(w, "count-local")
        if not os.path.exists(os.path.join(w, "fit", "manifest.json")):
            run_measured(snm("join", "--count", count, "--heldout", args.heldout, "--out",
                             os.path.join(w, "join"), *LOCAL), log=os.path.join(w, "join.log"))
            run_measured(snm("fit", "--join", os.path.join(w, "join"), "--out",
                             os.path.join(w, "fit"), "--variants", "unlexicalized"),
                         log=os.path.join(w, "fit.log"))
        for stage in ("apply", "prune"):
            if stage not in stages:
                continue
            for runner, options in runners.items():
                out = os.path.join(w, f"{stage}-{runner}")
                if stage == "apply":
                    cmd = snm("apply", "--count", count, "--fit", os.path.join(w, "fit"),
                              "--out", out, "--memory", args.memory, *options)
                else:
                    model = os.path.join(w, "apply-local")
                    with open(os.path.join(model, "manifest.json")) as f:
                        links = json.load(f)["totals"]["links"]
                    cmd = snm("prune", "--model", model, "--out", out, "--target_links",
                              str(links // 10), "--memory", args.memory, *options)
                rows.append(run(stage, runner, out, cmd))
            same = same_files(os.path.join(w, f"{stage}-local"), os.path.join(w, f"{stage}-dask"))
            for row in rows[-2:]:
                row["same_bytes"] = same
    print_table(rows, ["stage", "runner", "seconds", "peak_rss_mib", "same_bytes"])
    record("dask_stages", rows)
    return 0 if all(r.get("same_bytes", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
