"""Full-batch accelerated proximal gradient (FISTA) to the penalised optimum, any penalty.

Minimises F(W) = f(W) + λΩ(W) over W >= 0, f the mean NLL of all training
positions (:meth:`LogLinearModel.objective`, exact, O(pairs) a call) and Ω one
of :data:`snm_core.loglinear.penalties.PENALTIES` through its exact proximal
operator (the tree ones too: Algorithms 2 and 4), which also enforces W >= 0.

Iteration (Beck & Teboulle 2009, FISTA with backtracking)::

    x⁺ = prox_{ηλΩ, W>=0}(y − η ∇f(y)),  η halved until
         f(x⁺) <= f(y) + ⟨∇f(y), x⁺ − y⟩ + ‖x⁺ − y‖² / (2η)
    t⁺ = (1 + √(1 + 4t²)) / 2,  y⁺ = x⁺ + ((t − 1) / t⁺)(x⁺ − x)

with two safeguards: η grows by ``grow`` after each iteration (the local
curvature is far below the global bound away from the start), and adaptive
restart (O'Donoghue & Candès 2015, the gradient scheme: no extra evaluation of
Ω): the momentum is dropped (t = 1, y⁺ = x⁺) when it points uphill,
⟨y − x⁺, x⁺ − x⟩ > 0.

Certificate.  The proximal-gradient mapping G_η(y) = (y − x⁺)/η is zero
exactly at the optimum (y = prox(y − η∇f(y)) is the optimality condition of
the constrained, penalised problem).  Its largest entry times P, the number
of training positions, is in units of one training event: a certificate of
1e-3 says no pair's stationarity residual exceeds a thousandth of one
occurrence.  The fit stops when it falls below ``tol``; the reported value is
measured afresh at the returned weights.
"""

import time

import numpy as np

from snm_core.loglinear import penalties

#: Relative size of f's rounding error (a sum over all pairs), below which the
#: backtracking test compares gradients instead of values.
ROUNDOFF = 1e-11


class APGResult:
    """What :func:`minimise` did: ``weight``, ``objective`` F, ``certificate``
    (P · max |G_η| at ``weight``), ``iterations``, ``evaluations`` (objective
    passes), ``restarts``, ``seconds``, ``prox_seconds``, ``converged``."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def summary(self):
        return (f"{self.iterations} iterations, certificate {self.certificate:.2g} "
                f"({'reached' if self.converged else 'NOT reached'}), objective "
                f"{self.objective:.10g}, {self.seconds:.1f} s "
                f"({self.seconds / max(self.iterations, 1) * 1e3:.0f} ms an iteration, "
                f"prox {self.prox_seconds / max(self.seconds, 1e-12):.0%})")


def minimise(model, own, penalty, lam, alpha=1.0, tol=1e-3, max_iterations=5000, step=10.0,
             grow=1.1, every=None, callback=None, metric="word"):
    """FISTA with backtracking and restart from ``model.weight`` (projected on W >= 0).

    Parameters
    ----------
    model : LogLinearModel
        Its weight is the starting point; not modified (the caller stores the result).
    own : ndarray of float64, shape (m,)
        Own counts of the training positions (:func:`snm_core.loglinear.model.own_counts`).
    penalty, lam, alpha
        As in :func:`snm_core.loglinear.penalties.prox`; l2 is Σ w² (no ½).
    tol : float
        Stop when P · max |G_η(y)| < tol (see the module docstring).
    max_iterations : int
    step : float
        Initial step η (mean-loss units; the backtracking corrects it).
    grow : float >= 1
        η is multiplied by this after each iteration.
    every : int, optional
        Call ``callback(iteration, weight, certificate)`` every ``every`` iterations;
        a true return value stops the fit.
    metric : {"word", "scalar"}
        "scalar": one step η for all pairs.  "word" (default): the step of word
        y's pairs is η · N_max / (N_y + 1), N_y the training occurrences of y:
        the curvature of f along a word's pairs is at most about N_y / P, so a
        rare word's tree can take steps thousands of times longer than "the"'s.
        The penalties are sums over the words' trees, so the prox with one step
        per word is still exact; FISTA in this fixed diagonal metric converges
        as in the Euclidean one.

    Returns
    -------
    APGResult
    """
    start = time.perf_counter()
    forest = model.forest()
    own = np.asarray(own, np.float64)
    positions = max(float(own.sum()), 1.0)
    lam, alpha = float(lam), float(alpha)
    prox_seconds = 0.0
    evaluations = 0
    if metric == "word":
        word_count = np.bincount(model.word, own, model.vocab_size)
        scale = (word_count.max(initial=0.0) + 1.0) / (word_count + 1.0)
        scale = scale[model.word]
    elif metric == "scalar":
        scale = np.ones(model.num_pairs)
    else:
        raise ValueError(f"unknown metric {metric!r}; choose word or scalar")
    kind, weighted = penalties._check_penalty(penalty, alpha)
    depth_weight = penalties._depth_weights(forest.depth, alpha if weighted else 1.0)
    parent, ones = forest.parent, np.ones(model.num_pairs)

    def smooth(w, level):
        nonlocal evaluations
        evaluations += 1
        loss, grad, _ = model.objective(own, w, level=level)
        return loss, grad

    def prox_step(point, grad, eta):
        nonlocal prox_seconds
        began = time.perf_counter()
        steps = eta * scale
        u = np.maximum(point - steps * grad, 0.0)
        radius = (lam * steps) * depth_weight  # one value per word's tree: the exact prox
        if kind == "l2":
            out = u / (1.0 + 2.0 * radius)
        elif kind == "l1":
            out = np.maximum(u - radius, 0.0)
        else:
            out = np.empty((len(u), 1))
            if kind == "t2":
                penalties._prox_t2(parent, radius, u[:, None], out)
            else:
                penalties._prox_tinf(parent, ones, radius, u[:, None], out)
            out = out[:, 0]
        prox_seconds += time.perf_counter() - began
        return out

    def total(w, f_w):
        return f_w + lam * penalties.value(penalty, forest, w, alpha)

    def step_from(point, f_point, grad, eta):
        """x⁺ from ``point`` by backtracking: (x⁺, f(x⁺), η)."""
        for _ in range(100):
            new = prox_step(point, grad, eta)
            d = new - point
            f_new, _ = smooth(new, 0)
            excess = f_new - f_point - grad @ d  # <= ‖d‖²/(2η) if η is short enough
            quadratic = (d @ (d / scale)) / (2.0 * eta)
            if excess <= quadratic:
                return new, f_new, eta
            if abs(excess) < ROUNDOFF * abs(f_point):
                # Near the optimum the test drowns in the rounding of f; the same
                # curvature bound on the gradients, ⟨∇f(x⁺) − ∇f(y), d⟩ <= ‖d‖²/η, does not.
                _, grad_new = smooth(new, 1)
                if (grad_new - grad) @ d <= 2.0 * quadratic:
                    return new, f_new, eta
            eta *= 0.5
        raise FloatingPointError("APG backtracking found no step: the objective is not "
                                 "finite near the current weights")

    x = np.maximum(np.asarray(model.weight, np.float64), 0.0)
    f_x = None
    y, t, eta = x, 1.0, float(step)
    f_y, g_y = smooth(y, 1)
    restarts, iterations, certificate = 0, 0, np.inf

    def certify(w):
        """(P · max |G_η(w)|, f(w), ∇f(w)): the certificate at ``w`` itself."""
        nonlocal eta
        f_w, g_w = smooth(w, 1)
        new, _, eta = step_from(w, f_w, g_w, eta)
        return positions * float(np.abs((w - new) / scale).max(initial=0.0)) / eta, f_w, g_w

    while iterations < max_iterations:
        iterations += 1
        new, f_new, eta = step_from(y, f_y, g_y, eta)
        at_y = positions * float(np.abs((y - new) / scale).max(initial=0.0)) / eta
        if ((y - new) / scale) @ (new - x) > 0:
            restarts += 1
            t, y = 1.0, new
        else:
            t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
            y = new + ((t - 1.0) / t_new) * (new - x)
            t = t_new
        x, f_x = new, f_new
        if at_y < tol:  # the loop's certificate is at y: confirm it at x
            certificate, f_x, g_x = certify(x)
            if certificate < tol:
                break
            t, y, f_y, g_y = 1.0, x, f_x, g_x  # not yet: go on from x, no momentum
            continue
        if every and callback is not None and iterations % every == 0 and \
                callback(iterations, x, at_y):
            break
        f_y, g_y = smooth(y, 1)
        eta *= grow
    if not certificate < tol:  # stopped by the iteration limit or the callback
        certificate, f_x, _ = certify(x)
    return APGResult(weight=x, objective=total(x, f_x), certificate=certificate,
                     iterations=iterations, evaluations=evaluations, restarts=restarts,
                     seconds=time.perf_counter() - start, prox_seconds=prox_seconds,
                     converged=certificate < tol, step=eta)


def certificate(model, own, penalty, lam, alpha=1.0, weight=None, step=1.0):
    """P · max |G_η(W)| at ``weight`` (default the model's) with step η = ``step``,
    no backtracking: the optimality residual of any weights, for tests and reports."""
    w = np.asarray(model.weight if weight is None else weight, np.float64)
    own = np.asarray(own, np.float64)
    _, grad, _ = model.objective(own, w, level=1)
    new = penalties.prox(penalty, model.forest(), w - step * grad, step * lam, alpha)
    return max(float(own.sum()), 1.0) * float(np.abs(w - new).max(initial=0.0)) / step
