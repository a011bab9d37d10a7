"""The fit race's probe: how each variant ranks after a share of an epoch, and what the
probe saves.

    python benchmarks/race_probe.py JOIN_DIR [JOIN_DIR ...] [--shares 0.0625,0.125,0.25,1]
        [--repeats 2]

For each join directory (an `snm join` output: kernel's is made by
benchmarks/fit.py, the scale corpora's by `snm train`), one row per variant: the
validation perplexity (the held-back share `snm fit` chooses on) after one epoch on
each share of the training events, the draw the probe makes.  Then `snm fit` with
its defaults and with `--race_probe 0`, alternating `--repeats` times: wall seconds,
peak RSS, and whether theta.npy is byte-identical.  Appends to
benchmarks/results.jsonl.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import print_table, record, run_measured  # noqa: E402


def rank_rows(join_dir, shares):
    """Validation perplexity of every variant after one epoch on each share."""
    from snm_core.fit import selection, trainer
    from snm_core.fit.heldout import load_join

    options = selection.FitOptions()
    rows = []
    for spec in options.candidates():
        problem = load_join(join_dir, spec, None)[0]
        train_events, valid_events = problem.split_events(options.validation_fraction)
        row = {"run": "rank", "join": join_dir, "variant": spec.variant}
        for share in shares:
            events = selection.probe_events(train_events, share, options.seed)
            state = trainer.TrainState.start(problem, options.settings(1))
            started = time.perf_counter()
            history = trainer.run_epochs(problem, options.settings(1), state, 1, events,
                                         valid_events, train_metrics=False,
                                         evaluate_start=False)
            row[f"ppl@{share:g}"] = round(history[-1]["valid_perplexity"], 3)
            row[f"s@{share:g}"] = round(time.perf_counter() - started, 2)
        problem.close()
        rows.append(row)
        print(row, flush=True)
    return rows


def timing_rows(join_dir, repeats):
    """`snm fit` with and without the probe, alternating."""
    rows, thetas = [], {}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(repeats):
            for probe in (None, "0"):
                out = os.path.join(work, f"fit-{probe}")
                shutil.rmtree(out, ignore_errors=True)
                cmd = [sys.executable, "-m", "snm", "fit", "--join", join_dir, "--out", out]
                if probe is not None:
                    cmd += ["--race_probe", probe]
                seconds, rss = run_measured(cmd, log=out + ".log")
                with open(os.path.join(out, "theta.npy"), "rb") as f:
                    thetas[probe] = f.read()
                rows.append({"run": "fit", "join": join_dir,
                             "race_probe": "default" if probe is None else probe,
                             "wall_s": round(seconds, 2), "peak_rss_mib": round(rss, 1)})
                print(rows[-1], flush=True)
    for row in rows:
        row["same_theta"] = thetas[None] == thetas["0"]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("joins", nargs="+", help="snm join output directories")
    parser.add_argument("--shares", default="0.0625,0.125,0.25,1")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    shares = [float(s) for s in args.shares.split(",")]
    rows = []
    for join_dir in args.joins:
        rows += rank_rows(join_dir, shares)
        rows += timing_rows(join_dir, args.repeats)
    columns = ["join", "run", "variant", *[f"ppl@{s:g}" for s in shares],
               "race_probe", "wall_s", "peak_rss_mib", "same_theta"]
    print_table(rows, columns)
    record("race_probe", rows)


if __name__ == "__main__":
    main()
