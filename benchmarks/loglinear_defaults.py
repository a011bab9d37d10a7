"""The log-linear family's defaults (issue 34, goal 3): `snm train --family loglinear` with no
tuning options, against the best any lambda gives.

    python benchmarks/loglinear_defaults.py defaults [--corpus kernel] [--penalty wt2]
                                                     [--config 5gram] [--time_budget S]
    python benchmarks/loglinear_defaults.py sweep [--corpus kernel] [--penalty wt2]
                                                  [--alpha 1.1] [--lam_scales 0.8,0.4,0.2,0.1]
                                                  [--max_iterations 150] [--every 25]

``defaults``: ``snm train --family loglinear --penalty P --config C`` on ../shared/corpora
CORPUS (train, dev as --heldout, test, its vocab.txt), nothing else: wall seconds of the
whole command and of each stage, peak RSS, the lambda and alpha chosen, every trial,
test perplexity (eval.json).

``sweep``: the reference: the same features (the n-gram model of ``--order``), each lambda
of ``--lam_scales`` (times 1/P) fitted separately from the same start as the defaults
(the interpolated modified Kneser-Ney model, :func:`snm_core.loglinear.path.kneser_ney_start`)
by APG for ``--max_iterations`` iterations, dev and test perplexity every ``--every``
iterations and the certificate at the end: the best test perplexity over the
lambdas and iterates, and where each fit's dev is heading.

Both print a table and append to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import (WORK, corpus, print_table, record,  # noqa: E402
                               run_measured, tokenized_corpus)


def defaults(name, penalty, config, time_budget, work):
    """One ``snm train --family loglinear`` with its defaults; one row."""
    out = os.path.join(work, f"defaults-{name}-{penalty}-{config}")
    train = corpus(name, "train.txt.gz" if name == "kernel" else "train.txt")
    cmd = [sys.executable, "-m", "snm", "train", "--family", "loglinear", "--penalty", penalty,
           "--config", config, "--train", train, "--heldout", corpus(name, "dev.txt"),
           "--test", corpus(name, "test.txt"), "--vocab", corpus(name, "vocab.txt"),
           "--out", out, "--force"]
    if time_budget:
        cmd += ["--time_budget", str(time_budget)]
    seconds, rss = run_measured(cmd, log=out + ".log")

    def load(*parts):
        with open(os.path.join(out, *parts)) as f:
            return json.load(f)

    stages, manifest, report = load("stages.json"), load("loglinear", "manifest.json"), \
        load("eval.json")
    start, *fits = manifest["trials"]
    return [{"corpus": name, "penalty": penalty, "config": config,
             "test_ppl": round(report["loglinear"]["perplexity"], 3),
             "dev_ppl": round(manifest["heldout_perplexity"], 3),
             "lam_scale": round(manifest["lam"] * (fits[0]["lam_scale"] / fits[0]["lam"]), 3),
             "alpha": manifest["alpha"], "start_dev_ppl": round(start["heldout_perplexity"], 3),
             "wall_seconds": round(seconds, 1),
             "stage_seconds": {k: v.get("seconds") for k, v in stages.items()
                               if isinstance(v, dict)},
             "peak_rss_mib": round(rss), "fits": len(fits),
             "iterations": sum(t["iterations"] for t in fits),
             "trials": [{k: t.get(k) for k in ("lam_scale", "alpha", "heldout_perplexity",
                                               "best_iteration", "iterations", "seconds")}
                        for t in fits]}]


def sweep(name, order, penalty, alpha, scales, max_iterations, every):
    """Each lambda from the Kneser-Ney start, dev and test every ``every`` iterations."""
    from snm_core.loglinear import apg, path
    from snm_core.loglinear.model import own_counts, positions, prepare

    began = time.perf_counter()
    vocab, (train, dev, test) = tokenized_corpus(
        name, ("train.txt.gz" if name == "kernel" else "train.txt", "dev.txt", "test.txt"))
    model, active, target = prepare(train, order, len(vocab))
    own = own_counts(model, active, target)
    del active, target, train
    dev, test = positions(model, dev, order), positions(model, test, order)
    start = path.kneser_ney_start(model, own)
    model.weight = start
    print(f"{name} order {order}: {model.num_pairs:,} pairs, loaded in "
          f"{time.perf_counter() - began:.0f} s; Kneser-Ney start dev "
          f"{model.perplexity(*dev):.3f} test {model.perplexity(*test):.3f}", flush=True)
    rows = []
    for scale in scales:
        lam = scale / own.sum()
        fit_began = time.perf_counter()

        def check(iteration, weight, certificate):
            kept, model.weight = model.weight, weight
            rows.append({"corpus": name, "order": order, "penalty": penalty, "alpha": alpha,
                         "lam_scale": scale, "iteration": iteration,
                         "dev_ppl": round(model.perplexity(*dev), 3),
                         "test_ppl": round(model.perplexity(*test), 3),
                         "seconds": round(time.perf_counter() - fit_began, 1)})
            print(rows[-1], flush=True)
            model.weight = kept

        model.weight = start
        result = apg.minimise(model, own, penalty, lam, alpha, tol=1e-3,
                              max_iterations=max_iterations, every=every, callback=check)
        model.weight = result.weight
        rows.append({"corpus": name, "order": order, "penalty": penalty, "alpha": alpha,
                     "lam_scale": scale, "iteration": result.iterations,
                     "dev_ppl": round(model.perplexity(*dev), 3),
                     "test_ppl": round(model.perplexity(*test), 3),
                     "certificate": float(f"{result.certificate:.3g}"),
                     "objective": result.objective, "seconds": round(result.seconds, 1),
                     "ms_per_iteration": round(1e3 * result.seconds / result.iterations),
                     "final": True})
        print(rows[-1], flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("defaults", "sweep"))
    parser.add_argument("--corpus", default="kernel", choices=("kernel", "kernel-100k"))
    parser.add_argument("--penalty", default="wt2")
    parser.add_argument("--config", default="5gram", help="defaults: snm train's --config")
    parser.add_argument("--time_budget", type=float, help="defaults: snm train's")
    parser.add_argument("--order", type=int, default=5, help="sweep: the n-gram order")
    parser.add_argument("--alpha", type=float, default=1.1, help="sweep")
    parser.add_argument("--lam_scales", default="0.8,0.4,0.2,0.1", help="sweep: lambda times P")
    parser.add_argument("--max_iterations", type=int, default=150, help="sweep")
    parser.add_argument("--every", type=int, default=25, help="sweep")
    args = parser.parse_args(argv)
    work = os.path.join(WORK, "loglinear")
    os.makedirs(work, exist_ok=True)
    if args.what == "defaults":
        rows = defaults(args.corpus, args.penalty, args.config, args.time_budget, work)
        print_table(rows, ["corpus", "penalty", "config", "test_ppl", "dev_ppl", "lam_scale",
                           "alpha", "start_dev_ppl", "wall_seconds", "peak_rss_mib", "fits",
                           "iterations"])
        print(json.dumps(rows[0]["stage_seconds"]), json.dumps(rows[0]["trials"]))
        record("loglinear-defaults", rows)
    else:
        rows = sweep(args.corpus, args.order, args.penalty, args.alpha,
                     [float(v) for v in args.lam_scales.split(",")], args.max_iterations,
                     args.every)
        print_table(rows, ["corpus", "order", "penalty", "alpha", "lam_scale", "iteration",
                           "dev_ppl", "test_ppl", "certificate", "seconds"])
        record("loglinear-defaults-sweep", rows)


if __name__ == "__main__":
    main()
