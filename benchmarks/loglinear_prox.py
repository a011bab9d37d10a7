"""The T-inf prox: the k-best heap (Algorithm 4) against the plain random pivot (Algorithm 3).

    python benchmarks/loglinear.py prox-speed [--orders 3,5,8,12] [--repeats 5]
                                              [--iterations 50]

On kernel-100k at each order: the pair forest of the log-linear model (one suffix trie
of contexts per target word, :meth:`snm_core.loglinear.model.LogLinearModel.forest`),
the prox input of a real APG step: the fit of ``benchmarks/loglinear.py optimum`` (the
wl2 start by L-BFGS-B, then tinf at lambda ``--lam`` by
:func:`snm_core.loglinear.apg.minimise`, ``--iterations`` iterations), the input of
its last prox call (u = max(w − η∇f, 0) and the per-pair radii λη·scale) captured.
On that input, one tinf prox of the whole forest (one column of ``pairs`` entries)
by each method, alternating, best of ``--repeats``: on the trie (what APG runs), and
on the collapsed forest (the paper's suffix tree, counts > 1) with the input's value
at each path's top; the t2 prox (Algorithm 2) of the same input beside them.  The
two methods must agree to 1e-9.  And the APG run itself with each method (its
milliseconds an iteration and the prox's share; the objectives it reaches differ
by rounding).  Prints a table and appends ``loglinear-prox`` rows
to benchmarks/results.jsonl.
"""

import time

import numpy as np


def _best(calls, repeats):
    """Best wall seconds of each call, the calls run in turn ``repeats`` times."""
    best = [np.inf] * len(calls)
    for _ in range(repeats):
        for index, call in enumerate(calls):
            began = time.perf_counter()
            call()
            best[index] = min(best[index], time.perf_counter() - began)
    return best


def apg_with(model, own, lam, iterations, tinf):
    """``iterations`` APG iterations of tinf with ``tinf`` as the prox kernel: (the
    APGResult, (parent, radius, u) of its last prox call)."""
    from snm_core.loglinear import apg, penalties

    real = penalties._prox_tinf, penalties.prox_tinf_pivot
    seen = {}

    def capture(parent, count, radius, u, out):  # APG makes radius and u afresh each call
        seen.update(parent=parent, radius=radius, u=u)
        return tinf(parent, count, radius, u, out)

    # both kernels replaced: whichever prox's method="auto" picks, ``tinf`` runs
    penalties._prox_tinf = penalties.prox_tinf_pivot = capture
    try:
        result = apg.minimise(model, own, "tinf", lam, tol=0.0, max_iterations=iterations)
    finally:
        penalties._prox_tinf, penalties.prox_tinf_pivot = real
    return result, (seen["parent"], seen["radius"], seen["u"])


def time_one(parent, count, radius, u, repeats):
    """Seconds of the heap, the pivot and the t2 prox on one input, and their difference."""
    from snm_core.loglinear import penalties
    from snm_core.loglinear.tinf_pivot import prox_tinf_pivot

    heap, pivot, t2 = (np.empty_like(u) for _ in range(3))
    runs = [lambda: penalties._prox_tinf(parent, count, radius, u, heap),
            lambda: prox_tinf_pivot(parent, count, radius, u, pivot),
            lambda: penalties._prox_t2(parent, radius, u, t2)]
    for run in runs:  # compile (or load the cache) outside the timing
        run()
    seconds = _best(runs, repeats)
    difference = float(np.abs(heap - pivot).max(initial=0.0))
    if difference > 1e-9:
        raise AssertionError(f"the pivot and heap T-inf proxes differ by {difference}")
    return seconds, difference, int(np.count_nonzero(heap))


def prox_speed(orders, lam, iterations, repeats, splits, start):
    """One row per order and tree (trie, collapsed); ``splits`` the kernel-100k files,
    ``start`` the (penalty, lambda, alpha) of the L-BFGS-B start."""
    from benchmarks.common import tokenized_corpus
    from snm_core.loglinear.model import own_counts, prepare
    from snm_core.loglinear import penalties
    from snm_core.loglinear.optimizers import fit
    from snm_core.loglinear.penalties import SuffixTree
    from snm_core.loglinear.tinf_pivot import preorder, prox_tinf_pivot

    vocab, (train, *_) = tokenized_corpus("kernel-100k", splits)
    rows = []
    for order in orders:
        model, active, target = prepare(train, order, len(vocab))
        own = own_counts(model, active, target)
        fit(model, active, target, start[0], lam=start[1], alpha=start[2], epochs=100,
            optimizer="lbfgs")
        del active, target
        start_weight = model.weight.copy()
        by_heap, (parent, radius, u) = apg_with(model, own, lam, iterations,
                                                penalties._prox_tinf)
        model.weight = start_weight
        by_pivot, _ = apg_with(model, own, lam, iterations, prox_tinf_pivot)
        apg_ms = {name: round(1e3 * result.seconds / result.iterations, 1)
                  for name, result in (("heap", by_heap), ("pivot", by_pivot))}
        apg_share = {name: round(result.prox_seconds / result.seconds, 3)
                     for name, result in (("heap", by_heap), ("pivot", by_pivot))}
        forest = SuffixTree(parent, model.forest().depth)
        collapsed = forest.collapse()
        top = collapsed.top
        # the collapsed forest's radii: the path's summed radii (alpha = 1)
        path_radius = np.bincount(collapsed.node_of, radius, collapsed.size)
        cases = [("trie", parent, np.ones(len(parent)), radius, u),
                 ("collapsed", collapsed.parent, collapsed.size_of.astype(np.float64),
                  path_radius, np.ascontiguousarray(u[top]))]
        for tree, tree_parent, count, tree_radius, tree_u in cases:
            (heap_s, pivot_s, t2_s), difference, nonzero = time_one(
                tree_parent, count, tree_radius, tree_u, repeats)
            _, size = preorder(tree_parent)
            rows.append({"order": order, "tree": tree, "nodes": len(tree_parent),
                         "subtree_sum": int(size.sum()), "lam": lam,
                         "apg_iterations": iterations,
                         "input_nonzero": int(np.count_nonzero(tree_u)),
                         "output_nonzero": nonzero,
                         "heap_ms": round(heap_s * 1e3, 2), "pivot_ms": round(pivot_s * 1e3, 2),
                         "t2_ms": round(t2_s * 1e3, 2),
                         "pivot_over_heap": round(pivot_s / heap_s, 2),
                         "max_difference": difference, "repeats": repeats})
            if tree == "trie":  # APG runs on the trie
                rows[-1].update(apg_ms_heap=apg_ms["heap"], apg_ms_pivot=apg_ms["pivot"],
                                apg_prox_share_heap=apg_share["heap"],
                                apg_prox_share_pivot=apg_share["pivot"],
                                apg_objective_difference=abs(by_heap.objective
                                                             - by_pivot.objective))
            print(rows[-1], flush=True)
    return rows
