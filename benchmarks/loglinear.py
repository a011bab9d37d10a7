"""Log-linear LMs with structured penalties beside Kneser-Ney and SNM (issue 20).

    python benchmarks/loglinear.py figure2 [--orders 2,3,4] [--penalties t2,wt2]
                                           [--optimizer lbfgs --penalties l2,l1,wl2,wl1]
    python benchmarks/loglinear.py kernel [--penalty t2] [--lam 1e-7] [--alpha 1.4]
                                          [--optimizer adagrad]
    python benchmarks/loglinear.py prox-speed [--orders 3,5,8,12] [--lam 8e-6]
                                              [--iterations 50] [--repeats 5]

``figure2``: the paper's Figure 2 on ../shared/corpora/kernel-100k (100K-word train,
dev.txt for lambda and alpha, 20K-word test, its 5,224-word vocab.txt).  For each order
and penalty a grid of lambda (and alpha for the weighted penalties) is fitted in this
process with :func:`snm_core.loglinear.optimizers.fit` (AdaGrad proximal steps, the O(pairs) tree
gradient, 25 batches an epoch, early stopping on dev, each lambda warm-started from the
next larger: :func:`snm_core.loglinear.directory.select`, as ``snm train --family loglinear``
does) and the best on dev kept; reported: test perplexity, parameters (pairs,
non-zero pairs, nodes of the collapsed pair forest: the paper's Figure 2c), seconds.
KenLM's interpolated KN (``lmplz --discount_fallback``) is from
../shared/benchmarks/reference.md; SNM with the same n-gram features runs here
(``snm train --config`` an n-gram file of that order).  Writes
benchmarks/plots/loglinear_kernel100k.png.

``optimum``: Figure 2 (a) and (b) at the penalised optimum: each penalty fitted by the
full-batch accelerated proximal gradient (:mod:`snm_core.loglinear.apg`, FISTA with
backtracking and restart, the exact O(pairs) objective, the exact prox) until its
certificate (P times the largest proximal-gradient residual, in training occurrences) is
below ``--tol`` or ``--max_iterations``; per order, penalty and alpha a lambda path,
strongest first, each warm-started from the last; lambda and alpha chosen on dev.  Every
fit is a row (its certificate, iterations, seconds an iteration, the prox's share);
writes benchmarks/plots/loglinear_optimum_kernel100k.png.  KN by order from
reference.md (lmplz is not installed here).

``long``: one penalty's lambda path as in ``optimum`` (``--orders`` one order,
``--penalty``, ``--alpha``, ``--lam`` the path), its last lambda run for ``--max_iterations``
with dev and test perplexity every 250 iterations.

``prox-speed``: one T-inf prox of the pair forest by the k-best heap (Algorithm 4) and by
the plain random pivot (Algorithm 3), on a real APG step's input, orders 3, 5, 8, 12
(:mod:`benchmarks.loglinear_prox`).

``kernel``: full kernel 5-gram, ``snm train --family loglinear`` against ``snm train``
(SNM) on the same files: test perplexity, fit seconds, seconds an epoch (one pass over
the 3.3M training words), peak RSS and bytes per parameter, model size on disk.

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

ORDERS = (2, 3, 4, 5, 6, 7, 8, 9, 10, 12)
#: The kernel-100k files every mode reads (vocab.txt beside them).
SPLITS = ("train.txt", "dev.txt", "test.txt")
#: ../shared/benchmarks/reference.md, "kernel-100k": lmplz -o N --discount_fallback;
#: order 11 the same lmplz, scored by benchmarks/arpa_perplexity.py (benchmarks/README.md).
KN = {2: 115.44, 3: 100.06, 4: 98.03, 5: 97.53, 6: 97.49, 7: 97.50, 8: 97.51, 9: 97.52,
      10: 97.40, 11: 97.40, 12: 97.39}
#: KenLM KN5 on full kernel (reference.md), the goal of the kernel run.
KN5_KERNEL = 73.43
PENALTIES = ("l2", "l1", "t2", "tinf", "wl2", "wl1", "wt2", "wtinf")
#: lambda grids (mean-loss units) on kernel-100k, from a calibration at order 3.
LAMS = {"l2": (1e-6, 2e-6, 4e-6), "l1": (1e-6, 3e-6, 6e-6), "t2": (2e-6, 4e-6, 8e-6),
        "tinf": (2e-6, 4e-6, 8e-6)}
ALPHAS = (0.7, 1.4)
#: --optimizer lbfgs (the penalised optimum, no early stopping): the separable penalties
#: want a larger lambda than early-stopped AdaGrad, and alpha 0.7 is far behind there.
LAMS_LBFGS = {"l2": (2.5e-7, 5e-7, 1e-6, 2e-6, 4e-6, 8e-6),
              "l1": (2e-6, 4e-6, 8e-6, 1.6e-5, 3.2e-5)}
ALPHAS_LBFGS = (1.4, 2.0)


def snm(*args):
    return [sys.executable, "-m", "snm", *args]


def ngram_config(order, directory):
    path = os.path.join(directory, f"{order}gram.txt")
    with open(path, "w") as f:
        f.write(f"ngram_extractor {{\n  min_n: 0\n  max_n: {order - 1}\n}}\n")
    return path


def figure2(orders, penalties, optimizer, work):
    import numpy as np

    from snm_core.loglinear.directory import LogLinearOptions, select
    from snm_core.loglinear.model import deepest_nodes, positions, prepare

    vocab, (train, dev, test) = tokenized_corpus("kernel-100k", SPLITS)
    rows = []
    for order in orders:
        model, active, target = prepare(train, order, len(vocab))
        pairs = model.pair_of(deepest_nodes(active), target)
        dev_pos = positions(model, dev, order)
        test_pos = positions(model, test, order)
        collapsed = model.forest().collapse().size
        for penalty in penalties:
            kind = penalty.lstrip("w")
            if optimizer == "lbfgs":
                options = LogLinearOptions(
                    penalty=penalty, lams=LAMS_LBFGS[kind], optimizer="lbfgs", epochs=100,
                    patience=None, alphas=ALPHAS_LBFGS if penalty.startswith("w") else (1.0,))
            else:
                options = LogLinearOptions(
                    penalty=penalty, lams=LAMS[kind], optimizer="adagrad",
                    alphas=ALPHAS if penalty.startswith("w") else (1.0,), epochs=20)
            start = time.perf_counter()
            best, _ = select(model, pairs, dev_pos, options, say=lambda line: None)
            row = {"order": order, "penalty": penalty, "optimizer": optimizer,
                   "lam": best["lam"],
                   "alpha": best["alpha"], "dev_ppl": round(best["heldout_perplexity"], 2),
                   "test_ppl": round(model.perplexity(*test_pos), 2),
                   "kn_test_ppl": KN.get(order), "pairs": model.num_pairs,
                   "nonzero": int(np.count_nonzero(model.weight)),
                   "collapsed_nodes": collapsed,
                   "seconds": round(time.perf_counter() - start, 1)}
            rows.append(row)
            print(row, flush=True)
        if optimizer != "lbfgs":  # the SNM rows do not depend on it
            rows.append(snm_row(order, work))
            print(rows[-1], flush=True)
    return rows


#: --what optimum: lambda paths (strongest first) and alphas; the paper's best alphas
#: are 1.1 (wt2) and 0.85 (wtinf), 2 is the best of wl2 at its L-BFGS-B optimum.
LAMS_OPTIMUM = {"l2": (2e-6, 1e-6, 5e-7), "l1": (1.6e-5, 8e-6, 4e-6),
                "t2": (1.6e-5, 8e-6, 4e-6), "tinf": (1.6e-5, 8e-6, 4e-6)}
ALPHAS_OPTIMUM = {"wl2": (2.0,), "wl1": (1.4,), "wt2": (1.1, 1.4), "wtinf": (0.85, 1.1)}
#: Where every lambda path starts: the wl2 optimum (lambda 5e-7, alpha 2; L-BFGS-B, seconds),
#: close to the others' optima for the rare pairs that a first-order method moves slowly.
#: The problems are convex: the start changes the iterations, not the optimum.
START = ("wl2", 5e-7, 2.0)


def optimum(orders, penalties, tol, max_iterations, work, lams=None, alphas=None):
    """Every penalty at its optimum by APG; one row per fit, ``best`` marking dev's choice."""
    import numpy as np

    from snm_core.loglinear import apg
    from snm_core.loglinear.model import own_counts, positions, prepare
    from snm_core.loglinear.optimizers import fit

    vocab, (train, dev, test) = tokenized_corpus("kernel-100k", SPLITS)
    rows = []
    progress_path = os.path.join(work, "optimum-progress.jsonl")
    for order in orders:
        model, active, target = prepare(train, order, len(vocab))
        own = own_counts(model, active, target)
        dev_pos, test_pos = positions(model, dev, order), positions(model, test, order)
        began = time.perf_counter()
        fit(model, active, target, START[0], lam=START[1], alpha=START[2], epochs=100,
            optimizer="lbfgs")
        start = model.weight.copy()
        print(f"order {order}: start {START} dev {model.perplexity(*dev_pos):.3f} in "
              f"{time.perf_counter() - began:.1f} s", flush=True)
        del active, target
        for penalty, alpha in [(p, a) for a_index in range(2) for p in penalties
                               for a in (alphas if alphas and p.startswith("w") else
                                         ALPHAS_OPTIMUM.get(p, (1.0,)))[a_index:a_index + 1]]:
            # every penalty's first alpha, then the second ones
            model.weight = start.copy()
            for lam in lams or LAMS_OPTIMUM[penalty.lstrip("w")]:
                result = apg.minimise(model, own, penalty, lam, alpha, tol=tol,
                                      max_iterations=max_iterations)
                model.weight = result.weight
                row = {"order": order, "penalty": penalty, "lam": lam, "alpha": alpha, "metric": "word",
                       "dev_ppl": round(model.perplexity(*dev_pos), 3),
                       "test_ppl": round(model.perplexity(*test_pos), 3),
                       "kn_test_ppl": KN.get(order), "objective": result.objective,
                       "certificate": float(f"{result.certificate:.3g}"),
                       "converged": bool(result.converged),
                       "iterations": result.iterations, "restarts": result.restarts,
                       "evaluations": result.evaluations,
                       "seconds": round(result.seconds, 1),
                       "ms_per_iteration": round(
                           1e3 * result.seconds / max(result.iterations, 1), 1),
                       "prox_share": round(result.prox_seconds / result.seconds, 3),
                       "pairs": model.num_pairs,
                       "nonzero": int(np.count_nonzero(result.weight)), "best": False}
                rows.append(row)
                print(row, flush=True)
                with open(progress_path, "a") as f:
                    f.write(json.dumps(row) + "\n")
        for penalty in penalties:  # dev's choice of lambda and alpha
            mine = [r for r in rows if r["order"] == order and r["penalty"] == penalty]
            min(mine, key=lambda r: r["dev_ppl"])["best"] = True
    return rows


def long_fit(order, penalty, alpha, lams, max_iterations, work):
    """One lambda path from the wl2 start (as ``optimum``), the last lambda run for
    ``max_iterations`` with dev and test perplexity every 250 iterations: how far the
    600-iteration rows of ``optimum`` are from where APG goes."""
    from snm_core.loglinear import apg
    from snm_core.loglinear.model import own_counts, positions, prepare
    from snm_core.loglinear.optimizers import fit

    vocab, (train, dev, test) = tokenized_corpus("kernel-100k", SPLITS)
    model, active, target = prepare(train, order, len(vocab))
    own = own_counts(model, active, target)
    dev_pos, test_pos = positions(model, dev, order), positions(model, test, order)
    fit(model, active, target, START[0], lam=START[1], alpha=START[2], epochs=100,
        optimizer="lbfgs")
    rows = []
    for index, lam in enumerate(lams):
        last = index == len(lams) - 1

        def every(iteration, weight, certificate):
            kept, model.weight = model.weight, weight
            rows.append({"order": order, "penalty": penalty, "alpha": alpha, "lam": lam,
                         "iteration": iteration, "certificate_at_y": round(certificate, 4),
                         "dev_ppl": round(model.perplexity(*dev_pos), 3),
                         "test_ppl": round(model.perplexity(*test_pos), 3)})
            print(rows[-1], flush=True)
            model.weight = kept

        result = apg.minimise(model, own, penalty, lam, alpha, tol=0.01,
                              max_iterations=max_iterations if last else 600,
                              every=250 if last else None, callback=every)
        model.weight = result.weight
        rows.append({"order": order, "penalty": penalty, "alpha": alpha, "lam": lam,
                     "iteration": result.iterations, "certificate": result.certificate,
                     "objective": result.objective, "seconds": round(result.seconds, 1),
                     "dev_ppl": round(model.perplexity(*dev_pos), 3),
                     "test_ppl": round(model.perplexity(*test_pos), 3), "final": True})
        print(rows[-1], flush=True)
    return rows


def plot_optimum(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
    chosen = {}  # dev's choice per order and penalty, over all the runs given
    for r in rows:
        key = (r["order"], r["penalty"])
        if r["penalty"] == "snm":  # no dev figure: the latest run of that order
            chosen[key] = r
        elif key not in chosen or r["dev_ppl"] < chosen[key]["dev_ppl"]:
            chosen[key] = r
    for name in PENALTIES:
        best = sorted((order, r["test_ppl"]) for (order, p), r in chosen.items() if p == name)
        if best:
            axis = bx if name.startswith("w") else ax
            axis.plot(*zip(*best), "o-", label=name, markersize=4)
    snm_points = sorted((order, r["test_ppl"]) for (order, p), r in chosen.items()
                        if p == "snm")
    for axis, title in ((ax, "(a) unweighted"), (bx, "(b) weighted")):
        kn = sorted((o, p) for o, p in KN.items() if any(r["order"] == o for r in rows))
        axis.plot(*zip(*kn), "k--", label="KN (lmplz)")
        if snm_points:
            axis.plot(*zip(*snm_points), "k:", label="SNM")
        axis.set_xlabel("order")
        axis.set_ylabel("test perplexity")
        axis.set_title(f"kernel-100k at the penalised optimum: {title}")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def snm_row(order, work):
    """SNM with the n-gram features of this order on kernel-100k."""
    out = os.path.join(work, f"snm-{order}gram")
    seconds, _ = run_measured(snm("train", "--config", ngram_config(order, work),
                                  "--train", corpus("kernel-100k", "train.txt"),
                                  "--heldout", corpus("kernel-100k", "dev.txt"),
                                  "--test", corpus("kernel-100k", "test.txt"),
                                  "--vocab", corpus("kernel-100k", "vocab.txt"),
                                  "--out", out, "--force"), log=out + ".log")
    with open(os.path.join(out, "eval.json")) as f:
        ppl = json.load(f)["adjusted"]["perplexity"]
    return {"order": order, "penalty": "snm", "test_ppl": round(ppl, 2),
            "kn_test_ppl": KN.get(order), "seconds": round(seconds, 1)}


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in PENALTIES + ("snm",):
        points = sorted((r["order"], r["test_ppl"]) for r in rows if r["penalty"] == name)
        if points:
            ax.plot(*zip(*points), "o-" if name != "snm" else "s-", label=name, markersize=3)
    kn = sorted((o, p) for o, p in KN.items() if any(r["order"] == o for r in rows))
    ax.plot(*zip(*kn), "k--", label="KN (lmplz)")
    ax.set_xlabel("order")
    ax.set_ylabel("test perplexity")
    ax.set_title("kernel-100k: log-linear penalties, SNM, KN")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    for name in ("tinf", "wtinf", "t2"):
        points = sorted((r["order"], r["collapsed_nodes"], r["pairs"]) for r in rows
                        if r["penalty"] == name)
        if points:
            orders, collapsed, pairs = zip(*points)
            bx.plot(orders, pairs, "o-", color="gray", label="pairs (trie parameters)")
            bx.plot(orders, collapsed, "o-", label="collapsed suffix-tree nodes (tinf)")
            break
    bx.set_xlabel("order")
    bx.set_ylabel("parameters")
    bx.set_title("parameters against order (Figure 2c)")
    bx.grid(alpha=0.3)
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def kernel(penalty, lams, alpha, optimizer, work):
    """Full kernel 5-gram: the log-linear family against SNM, each with `snm train`."""
    common = ["--config", "5gram", "--train", corpus("kernel", "train.txt.gz"),
              "--heldout", corpus("kernel", "dev.txt"), "--test", corpus("kernel", "test.txt"),
              "--vocab", corpus("kernel", "vocab.txt")]
    rows = []
    out = os.path.join(work, f"kernel-{penalty}-{optimizer}")
    seconds, rss = run_measured(snm("train", *common, "--out", out, "--family", "loglinear",
                                    "--penalty", penalty, "--lam", lams,
                                    "--optimizer", optimizer,
                                    *(["--alpha", alpha] if alpha else [])), log=out + ".log")
    with open(os.path.join(out, "loglinear", "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(out, "eval.json")) as f:
        ppl = json.load(f)["loglinear"]["perplexity"]
    with open(os.path.join(out, "stages.json")) as f:
        stages = json.load(f)
    trials = manifest["trials"]
    epochs = sum(t["epochs"] for t in trials)
    pairs = manifest["totals"]["pairs"]
    rows.append({"model": f"loglinear {penalty} {optimizer} (lambda {manifest['lam']:g}, "
                          f"alpha {manifest['alpha']:g})",
                 "test_ppl": round(ppl, 2), "kn5_test_ppl": KN5_KERNEL,
                 "fit_seconds": stages["fit"]["seconds"],
                 "seconds_per_epoch": round(sum(t["seconds"] for t in trials) / epochs, 1),
                 "train_seconds": round(seconds, 1), "peak_rss_mib": round(rss),
                 "bytes_per_parameter": round(rss * 2 ** 20 / pairs),
                 "parameters": pairs, "model_mb": round(_size(os.path.join(out, "loglinear"))
                                                        / 1e6)})
    out = os.path.join(work, "kernel-snm")
    seconds, rss = run_measured(snm("train", *common, "--out", out), log=out + ".log")
    with open(os.path.join(out, "eval.json")) as f:
        ppl = json.load(f)["adjusted"]["perplexity"]
    with open(os.path.join(out, "stages.json")) as f:
        stages = json.load(f)
    rows.append({"model": "snm 5-gram", "test_ppl": round(ppl, 2), "kn5_test_ppl": KN5_KERNEL,
                 "fit_seconds": stages["fit"]["seconds"], "train_seconds": round(seconds, 1),
                 "peak_rss_mib": round(rss), "model_mb": round(_size(os.path.join(out, "model"))
                                                               / 1e6)})
    return rows


def _size(directory):
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(directory) for name in names)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("figure2", "optimum", "long", "kernel", "prox-speed"))
    parser.add_argument("--tol", type=float, default=0.1,
                        help="optimum: the APG certificate to reach")
    parser.add_argument("--max_iterations", type=int, default=600,
                        help="optimum: most APG iterations a fit")
    parser.add_argument("--replot", action="store_true",
                        help="optimum: only redraw its plot from every optimum row in "
                             "benchmarks/results.jsonl (the orders run one at a time), with "
                             "the separable penalties' figure2 --optimizer lbfgs rows and SNM")
    parser.add_argument("--orders", help="default 2-12; prox-speed: 3,5,8,12")
    parser.add_argument("--iterations", type=int, default=50,
                        help="prox-speed: APG iterations before the prox input is taken")
    parser.add_argument("--repeats", type=int, default=5,
                        help="prox-speed: timings of each method, the best kept")
    parser.add_argument("--penalties", default=",".join(PENALTIES))
    parser.add_argument("--penalty", default="t2", help="kernel: the log-linear penalty")
    parser.add_argument("--lam", help="prox-speed: the tinf lambda (default 8e-6); "
                        "kernel: the lambda grid (comma-separated, default "
                        "1e-7); optimum: the lambda path of every penalty instead of its own")
    parser.add_argument("--alpha", help="kernel: the alpha grid of a weighted penalty; "
                        "optimum: the alphas of every weighted penalty instead of its own")
    parser.add_argument("--optimizer", default="adagrad",
                        help="snm train's --optimizer; figure2 with lbfgs: the separable "
                             "penalties at their penalised optimum (wider lambda grids)")
    args = parser.parse_args(argv)
    if args.orders is None:
        args.orders = "3,5,8,12" if args.what == "prox-speed" else ",".join(map(str, ORDERS))
    work = os.path.join(WORK, "loglinear")
    os.makedirs(work, exist_ok=True)
    if args.what == "figure2":
        rows = figure2([int(o) for o in args.orders.split(",")], args.penalties.split(","),
                       args.optimizer, work)
        print_table(rows, ["order", "penalty", "optimizer", "lam", "alpha", "dev_ppl",
                           "test_ppl", "kn_test_ppl", "pairs", "nonzero", "collapsed_nodes",
                           "seconds"])
        record("loglinear-figure2", rows)
        if args.optimizer != "lbfgs":
            plot(rows, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots",
                                    "loglinear_kernel100k.png"))
    elif args.what == "long":
        rows = long_fit(int(args.orders), args.penalty, float(args.alpha or 1.0),
                        [float(v) for v in args.lam.split(",")], args.max_iterations, work)
        record("loglinear-optimum-long", rows)
    elif args.what == "optimum" and args.replot:
        from benchmarks.common import RESULTS
        with open(RESULTS, encoding="utf-8") as f:
            # the tree penalties by APG, the separable ones at their L-BFGS-B optimum
            # (figure2 --optimizer lbfgs), SNM by order (figure2's AdaGrad runs)
            rows = [row for row in map(json.loads, f)
                    if row["benchmark"] == "loglinear-optimum"
                    or (row["benchmark"] == "loglinear-figure2"
                        and (row.get("optimizer") == "lbfgs" or row["penalty"] == "snm"))]
        plot_optimum(rows, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots",
                                        "loglinear_optimum_kernel100k.png"))
    elif args.what == "optimum":
        rows = optimum([int(o) for o in args.orders.split(",")], args.penalties.split(","),
                       args.tol, args.max_iterations, work,
                       lams=[float(v) for v in args.lam.split(",")] if args.lam else None,
                       alphas=[float(v) for v in args.alpha.split(",")] if args.alpha else None)
        print_table(rows, ["order", "penalty", "lam", "alpha", "dev_ppl", "test_ppl",
                           "kn_test_ppl", "certificate", "iterations", "seconds",
                           "ms_per_iteration", "prox_share", "best"])
        record("loglinear-optimum", rows)
        plot_optimum(rows, os.path.join(os.path.dirname(os.path.abspath(__file__)), "plots",
                                        "loglinear_optimum_kernel100k.png"))
    elif args.what == "prox-speed":
        from benchmarks.loglinear_prox import prox_speed
        rows = prox_speed([int(o) for o in args.orders.split(",")], float(args.lam or 8e-6),
                          args.iterations, args.repeats, SPLITS, START)
        print_table(rows, ["order", "tree", "nodes", "subtree_sum", "heap_ms", "pivot_ms",
                           "pivot_over_heap", "t2_ms", "input_nonzero", "output_nonzero",
                           "apg_ms_heap", "apg_ms_pivot"])
        record("loglinear-prox", rows)
    else:
        rows = kernel(args.penalty, args.lam or "1e-7", args.alpha, args.optimizer, work)
        print_table(rows, ["model", "test_ppl", "kn5_test_ppl", "fit_seconds",
                           "seconds_per_epoch", "train_seconds", "peak_rss_mib",
                           "bytes_per_parameter", "parameters", "model_mb"])
        record("loglinear-kernel", rows)


if __name__ == "__main__":
    main()
