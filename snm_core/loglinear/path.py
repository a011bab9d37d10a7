"""The defaults of the log-linear family: λ and α chosen on held-out data within a time budget.

``snm train --family loglinear`` with no ``--lam`` and no ``--optimizer`` runs
:func:`choose`:

1. **Start** at the interpolated modified Kneser-Ney model of the training
   counts (:func:`kneser_ney_start`), which a log-linear n-gram model with
   W >= 0 represents exactly; O(pairs), under a second on full kernel
   (kernel-100k order 5: test perplexity 97.53, lmplz's 97.53), and far closer
   to the penalised optima than W = 0.
2. **Path.** For each α of the grid, λ goes down a grid (in units of 1/P, P the
   training positions: a tree penalty at a leaf is an l1 penalty of λP
   occurrences, so its best value falls like 1/P), each λ warm-started from the
   best held-out weights of the path so far (the start's included), fitted by the full-batch accelerated proximal gradient
   (:mod:`snm_core.loglinear.apg`) for at most ``iterations`` iterations.  The
   held-out perplexity is measured every ``every`` iterations, a λ's fit stops
   after ``patience`` checks without a new best, and the best weights seen
   anywhere are kept (stopping short smooths as well as a larger λ does: the
   best held-out iterate is the choice, not the last one).  A path stops when
   its held-out perplexity turns up from one λ to the next.  The start is a
   trial in the log but not a candidate (unless ``keep_start``): the model kept
   is a fit of the penalty asked for.
3. **Budget.** Every fit checks the clock at its held-out checks; once
   ``seconds`` have passed the search stops and keeps the best weights seen.

Every fit is a trial (α, λ, iterations, held-out perplexity, seconds), for the
manifest and the log.
"""

import time

import numpy as np

from snm_core.loglinear import apg
from snm_core.loglinear.family import ALPHAS, DEFAULT_SECONDS, ITERATIONS, LAM_SCALES

#: APG iterations between held-out checks.
EVERY = 5
#: Held-out checks without a new best before a λ's fit stops (its best iterate kept).
PATIENCE = 2


#: Modified Kneser-Ney discounts D1, D2, D3+ where the count-of-counts give none in range.
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


def adjusted_counts(model, own):
    """Kneser-Ney's adjusted count of every pair: the continuation count N1+(· h y), the
    pairs one word longer (its child pairs), plus the positions whose whole history is h
    (``own``: at the longest order and after ``<S>``, where nothing extends h, the raw
    count N(h, y))."""
    children = np.bincount(model.pair_parent[model.pair_parent >= 0],
                           minlength=model.num_pairs)
    return np.asarray(own, np.float64) + children


def modified_discounts(counts):
    """Chen and Goodman's D1, D2, D3+ from the count-of-counts n1..n4 of ``counts``
    (Y = n1 / (n1 + 2 n2), Dk = k − (k + 1) Y n_{k+1} / n_k); :data:`FALLBACK_DISCOUNTS`
    unless 0 < Dk < k for each."""
    n = [np.count_nonzero(counts == k) for k in (1, 2, 3, 4)]
    if min(n) == 0:
        return FALLBACK_DISCOUNTS
    y = n[0] / (n[0] + 2.0 * n[1])
    discounts = tuple(k - (k + 1) * y * n[k] / n[k - 1] for k in (1, 2, 3))
    if not all(0.0 < d < k for d, k in zip(discounts, (1, 2, 3))):
        return FALLBACK_DISCOUNTS
    return discounts


def kneser_ney_start(model, own):
    """W of the interpolated modified Kneser-Ney model of the training counts, exactly.

    With a(h, y) the adjusted counts (:func:`adjusted_counts`), a(h) their sum over
    y, D(a) the depth's modified discounts (:func:`modified_discounts`) and h' = h
    without its oldest word, p(y | h) = (a(h, y) − D(a(h, y))) / a(h) + γ(h) p(y | h'),
    γ(h) = Σ_y D(a(h, y)) / a(h), the uniform distribution over the outcomes below
    the root.  A log-linear n-gram model with W >= 0 is that model when
    w_(h,y) = log(p(y | h) / (γ(h) p(y | h'))) >= 0: a word unseen after h then gets
    e^{S(h',y)} / Z(h) = p(y | h') Z(h') / Z(h), and both models sum to one at every
    context, so Z(h') / Z(h) = γ(h).  O(pairs).
    """
    adjusted = adjusted_counts(model, own)
    node = model.pair_node
    node_total = np.maximum(np.bincount(node, adjusted, model.tree.size), 1.0)
    prob = np.empty(model.num_pairs)
    weight = np.zeros(model.num_pairs)
    uniform = 1.0 / max(model.vocab_size - 1, 1)
    for depth in range(int(model.pair_depth.max(initial=0)) + 1):  # parents first
        pairs = np.flatnonzero(model.pair_depth == depth)
        counts = adjusted[pairs]
        d1, d2, d3 = modified_discounts(np.rint(counts))
        discount = np.where(counts >= 3, d3, np.where(counts >= 2, d2, d1))
        h = node[pairs]
        gamma = np.bincount(h, discount, model.tree.size)[h] / node_total[h]
        lower = prob[model.pair_parent[pairs]] if depth else np.full(len(pairs), uniform)
        seen = (counts - discount) / node_total[h]
        backoff = gamma * lower
        prob[pairs] = seen + backoff
        weight[pairs] = np.log1p(seen / backoff)
    return weight


def choose(model, own, dev, penalty, alphas=None, lam_scales=LAM_SCALES,
           seconds=DEFAULT_SECONDS, iterations=ITERATIONS, every=EVERY, patience=PATIENCE,
           start=None, keep_start=False, say=print):
    """λ and α on held-out positions within ``seconds``; ``model.weight`` becomes the best.

    Parameters
    ----------
    model : LogLinearModel
    own : ndarray of float64, shape (m,)
        Own counts of the training positions.
    dev : (active, target)
        Held-out positions under the model's trie.
    penalty : str
    alphas : sequence of float, optional
        Default :data:`ALPHAS` of the penalty (1 for the unweighted ones).
    lam_scales : sequence of float
        λ·P, tried strongest first.
    seconds : float
        Budget for the fits; the search stops at the first held-out check after it.
    iterations, every, patience : int
        APG iterations a λ at most; iterations between held-out checks; checks
        without a new best before a λ's fit stops.
    start : ndarray, optional
        Starting weights (default :func:`kneser_ney_start`).
    keep_start : bool
        Whether the start itself may be chosen (default False: the weights kept
        are a penalised fit's, the penalty asked for, even where the start is
        better on held-out; the start is still a trial in the log).

    Returns
    -------
    best : dict
        ``lam``, ``alpha``, ``heldout_perplexity``, ``iterations`` of the kept weights.
    trials : list of dict
        The start (``start`` set, ``lam`` None), then one per (α, λ) fitted, in order.
    """
    began = time.perf_counter()
    deadline = began + float(seconds)
    positions = max(float(own.sum()), 1.0)
    if alphas is None:
        alphas = ALPHAS.get(penalty, (1.0,))
    dev_active = np.ascontiguousarray(dev[0], np.int64)
    dev_target = np.asarray(dev[1], np.int64)

    def perplexity(weight):
        return float(np.exp(-model.log_prob(dev_active, dev_target, weight).mean()))

    if start is None:
        start = kneser_ney_start(model, own)
    start_ppl = perplexity(start)
    say(f"  start: interpolated modified Kneser-Ney, held-out perplexity {start_ppl:.2f} "
        f"({time.perf_counter() - began:.1f} s)")
    trials = [{"lam": None, "alpha": None, "heldout_perplexity": start_ppl,
               "iterations": 0, "start": "kneser-ney"}]
    best, best_weight = (dict(trials[0]), start) if keep_start else (None, None)
    out_of_time = False
    for alpha in alphas:
        weight, previous, path_best = start, np.inf, start_ppl
        for scale in sorted(lam_scales, reverse=True):
            lam = scale / positions
            fit_began = time.perf_counter()
            trial = {"lam": lam, "lam_scale": scale, "alpha": alpha,
                     "heldout_perplexity": np.inf, "best_iteration": 0}
            kept = {"weight": None}

            def check(iteration, w, certificate=None):
                nonlocal out_of_time
                ppl = perplexity(w)
                if ppl < trial["heldout_perplexity"]:
                    trial.update(heldout_perplexity=ppl, best_iteration=iteration)
                    kept["weight"] = w.copy()
                out_of_time = time.perf_counter() > deadline
                rising = iteration - trial["best_iteration"] >= patience * every
                return out_of_time or rising

            model.weight = weight
            result = apg.minimise(model, own, penalty, lam, alpha, tol=1e-3,
                                  max_iterations=iterations, every=every, callback=check)
            if result.iterations % every:
                check(result.iterations, result.weight)
            # the next λ starts from the best held-out weights of this path so far, the
            # start's included, not from this fit's last iterate: the fits stop far short
            # of their optima, and the last iterate has drifted (benchmarks/README.md,
            # "Defaults")
            if trial["heldout_perplexity"] < path_best:
                path_best, weight = trial["heldout_perplexity"], kept["weight"]
            trial.update(iterations=result.iterations, certificate=result.certificate,
                         objective=result.objective,
                         seconds=round(time.perf_counter() - fit_began, 2))
            trials.append(trial)
            say(f"  lambda {lam:.3g} ({scale:g}/P) alpha {alpha:g}: held-out perplexity "
                f"{trial['heldout_perplexity']:.2f} at iteration {trial['best_iteration']} "
                f"of {result.iterations} (certificate {result.certificate:.3g}), "
                f"{trial['seconds']:.1f} s; {time.perf_counter() - began:.0f} s of "
                f"{seconds:.0f}")
            if best is None or trial["heldout_perplexity"] < best["heldout_perplexity"]:
                best = {"lam": lam, "alpha": alpha,
                        "heldout_perplexity": trial["heldout_perplexity"],
                        "iterations": trial["best_iteration"]}
                best_weight = kept["weight"]
            if out_of_time or trial["heldout_perplexity"] > previous:
                break  # the budget is spent, or held-out perplexity turned up
            previous = trial["heldout_perplexity"]
        if out_of_time:
            say(f"  time budget of {seconds:.0f} s spent: keeping the best so far")
            break
    model.weight = best_weight
    best["seconds"] = round(time.perf_counter() - began, 2)
    return best, trials
