"""`snm count` on a two-worker Dask cluster against the FnApiRunner's worker processes.

    python benchmarks/dask_count.py                 # kernel 5-gram, 3 turns each
    python benchmarks/dask_count.py --repeats 5 --config skip10gram

Both runs use two worker processes on this 2-core machine: the FnApiRunner in
``multi_processing`` mode with ``--direct_num_workers=2``, and Beam's
DaskRunner against a ``dask scheduler`` with ``dask worker --nworkers 2
--nthreads 1`` (started once, before the turns; its start-up is not timed).
The two take turns ``--repeats`` times; the best wall time of each is kept
and their ratio printed.  The counts of the two runs are compared byte for
byte.  Peak RSS is not reported: the Dask workers are not children of the
timed command.  Appends to benchmarks/results.jsonl.
"""

import argparse
import filecmp
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import WORK, corpus, print_table, record, run_measured  # noqa: E402
from snm.dask_cluster import LocalDaskCluster  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--setup", default="kernel", choices=["kernel"])
    parser.add_argument("--config", default="5gram")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    snm = [sys.executable, "-m", "snm", "count", "--config", args.config,
           "--train", corpus(args.setup, "train.txt.gz"),
           "--vocab", corpus(args.setup, "vocab.txt")]
    work = os.path.join(WORK, "dask")
    os.makedirs(work, exist_ok=True)
    local_out = os.path.join(work, f"{args.setup}-{args.config}-local")
    dask_out = os.path.join(work, f"{args.setup}-{args.config}-dask")
    local = ["--runner=FnApiRunner", "--direct_running_mode=multi_processing",
             "--direct_num_workers=2"]
    times = {"FnApiRunner multi_processing": [], "DaskRunner": []}
    with tempfile.TemporaryDirectory() as tmp, LocalDaskCluster(tmp, workers=2, threads=1) as c:
        for turn in range(args.repeats):
            for name, out, extra in (("FnApiRunner multi_processing", local_out, local),
                                     ("DaskRunner", dask_out, c.runner_options())):
                seconds, _ = run_measured(snm + ["--out", out] + extra,
                                          log=os.path.join(work, "logs", f"{name}-{turn}.log"))
                times[name].append(seconds)
                print(f"turn {turn + 1}: {name}: {seconds:.2f} s", flush=True)
    same = sorted(os.listdir(local_out)) == sorted(os.listdir(dask_out)) and all(
        filecmp.cmp(os.path.join(local_out, n), os.path.join(dask_out, n), shallow=False)
        for n in os.listdir(local_out) if os.path.isfile(os.path.join(local_out, n)))
    best_local = min(times["FnApiRunner multi_processing"])
    rows = [{"setup": args.setup, "config": args.config, "runner": name,
             "best_seconds": round(min(t), 2), "median_seconds": round(sorted(t)[len(t) // 2], 2),
             "runs": len(t), "ratio_to_local": round(min(t) / best_local, 2),
             "same_bytes": same} for name, t in times.items()]
    print_table(rows, ["setup", "config", "runner", "best_seconds", "median_seconds", "runs",
                       "ratio_to_local", "same_bytes"])
    record("dask_count", rows)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
