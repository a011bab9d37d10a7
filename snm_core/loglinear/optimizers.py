"""Fitting the log-linear model: minimising (1/P) Σ NLL + λ Ω(W) over W >= 0.

:func:`fit` minimises (1/P) Σ NLL + λ Ω(W) over W >= 0 by mini-batch proximal
gradient: W ← prox_{ηλΩ, W>=0}(W − η ∇f_B(W)), with ∇f_B the gradient of the
batch's mean NLL.  The step η is chosen by backtracking on the batch loss (the
standard sufficient-decrease test f_B(W⁺) <= f_B(W) + ⟨∇f_B, W⁺ − W⟩ +
‖W⁺ − W‖²/(2η), halving η on failure) and then grown by ``grow`` for the next
batch, so it tracks the local curvature; ``grow=1`` and ``backtrack=False``
give a constant step.  This is ``optimizer="pgd"``; two more are offered:

``"adagrad"``
    Diagonal AdaGrad: G_i accumulates the squared batch gradient of pair i and
    η_i = η / (ε + √G_i) per pair.  The gradient step is per pair; the prox is
    then the prox in the metric diag(1/η_i).  For the separable penalties (l2,
    l1, wl2, wl1) that is exact, coordinate by coordinate.  The tree penalties
    (t2, tinf, wt2, wtinf) have no closed form for per-coordinate steps, so
    the prox uses one step per *word* (per tree of the pair forest): η̄_y, the
    mean of η_i over the word's pairs, i.e. the exact prox of η̄_y λ Ω_y for
    each word y (group radii λ η̄_y α^depth).  No backtracking.
``"fista"``
    The accelerated stochastic proximal gradient of the paper's Algorithm 1
    (Hu, Kwok & Pan's SAGE): W̄ = (1−τ)W + τZ; W = prox_{λ/ρ}(W̄ − ∇f_B(W̄)/ρ);
    Z = (ρτZ + μW̄ + ρ(W − W̄))/(ρτ + μ) (written so that μ = 0 gives FISTA's
    Z + (W − W̄)/τ and a fixed point stays fixed); ρ = L + μ/δ,
    τ = (√(4δ + δ²) − δ)/2, δ = (1 − τ)δ, from W = Z = 0, τ = δ = 1, ρ = L + μ,
    with L = 1/``step``.  With ``mu = 0`` (default) the step 1/ρ = ``step`` is
    *fixed*; with μ > 0 it *decreases* (ρ grows like μ/δ, δ ~ 4/t²).

Two full-batch optimisers go to the penalised optimum instead: ``"lbfgs"``
(L-BFGS-B, the separable penalties only) and ``"apg"`` (FISTA with
backtracking and restart, every penalty, :mod:`snm_core.loglinear.apg`; it
stops at its optimality certificate, ``tol``, and returns the weights there,
not the best held-out ones: held-out losses are only logged).

Early stopping: with ``dev`` positions given, the held-out loss is computed
after every epoch; the best weights are kept and the fit stops when it has
not improved for ``patience`` epochs.
"""

import numpy as np

from snm_core.loglinear import penalties
from snm_core.loglinear.model import deepest_nodes, totals_from_own_counts

#: L-BFGS-B iterations per "epoch" of ``fit(optimizer="lbfgs")`` (held-out check, callback).
LBFGS_EPOCH = 10
#: APG iterations per "epoch" of ``fit(optimizer="apg")`` (held-out check, callback).
APG_EPOCH = 50


class _EpochLog:
    """What ``fit`` does at the end of an epoch, whatever the optimiser: the held-out
    loss into ``model.fit_log``, the best weights kept, the callback, early stopping."""

    def __init__(self, model, dev, patience, callback, keep_best=True):
        self.model, self.patience, self.callback = model, patience, callback
        self.keep_best = keep_best
        if dev is not None:
            dev = (np.ascontiguousarray(dev[0], np.int64), np.asarray(dev[1], np.int64))
        self.dev = dev
        self.best_loss, self.best_weight, self.since = np.inf, model.weight, 0
        model.fit_log = []

    def end_epoch(self, weight):
        """Record the epoch that ended with ``weight``; True if the fit should stop."""
        model = self.model
        model.weight = weight
        held = None
        if self.dev is not None:
            held = -float(model.log_prob(*self.dev).mean())
            if held < self.best_loss:
                self.best_loss, self.best_weight, self.since = held, weight.copy(), 0
            else:
                self.since += 1
        model.fit_log.append((len(model.fit_log), held))
        if self.callback is not None:
            self.callback(len(model.fit_log) - 1, model)
        return self.dev is not None and self.patience is not None and \
            self.since >= self.patience

    def finish(self):
        """The model with the best held-out weights (the last ones without held-out)."""
        if self.dev is not None and self.keep_best:
            self.model.weight = self.best_weight
        return self.model


def fit(model, active, target, penalty="t2", lam=1e-4, alpha=1.0, epochs=5, batch_size=1000,
        step=10.0, backtrack=True, grow=1.25, seed=0, callback=None, optimizer="pgd",
        eps=1e-8, mu=0.0, dev=None, patience=None, gradient="positions", position_pairs=None,
        tol=1e-2):
    """Mini-batch proximal gradient on (1/P) Σ NLL + λ Ω(W), W >= 0; updates ``model.weight``.

    Parameters
    ----------
    model : LogLinearModel
    active : ndarray of int64, shape (P, N)
    target : ndarray of int, shape (P,)
    penalty : str, one of :data:`snm_core.loglinear.penalties.PENALTIES`
        Applied per word over its tree of pairs (the pair forest).
    lam : float >= 0
        λ.
    alpha : float >= 0
        Depth weight of the weighted penalties (1.0 for the others).
    epochs : int
        Most passes over the positions, shuffled each pass.
    batch_size : int
    step : float
        pgd: initial (or, without backtracking, constant) step size η;
        adagrad: base step η (η_i = η / (ε + √G_i)); fista: 1/L.
    backtrack : bool
        pgd: halve η until the sufficient-decrease test on the batch holds.
    grow : float >= 1
        pgd: η is multiplied by ``grow`` after each batch (1: never grows).
    seed : int
    callback : callable(epoch, model), optional
        Called after each epoch (``model.weight`` the current weights).
    optimizer : {"pgd", "adagrad", "fista", "lbfgs", "apg"}
        See the module docstring.  For lbfgs an epoch is :data:`LBFGS_EPOCH`
        iterations, for apg :data:`APG_EPOCH`.
    eps : float
        adagrad: ε.
    mu : float >= 0
        fista: strong-convexity coefficient μ (0: fixed step).
    dev : (active, target), optional
        Held-out positions for early stopping (best weights kept).
    patience : int, optional
        Epochs without a held-out improvement before stopping (needs ``dev``;
        None: run all epochs, still keeping the best weights).
    gradient : {"positions", "tree"}
        How a batch's loss and gradient are computed: "positions" walks each
        position's active nodes and their pairs (cost: the batch's positions
        times the pairs of their contexts, large for frequent contexts);
        "tree" counts the batch's positions per pair and runs
        :meth:`LogLinearModel.objective` (cost O(pairs) whatever the batch).
        The results agree to rounding; "tree" is faster for batches of more
        than a few thousand positions.
    position_pairs : ndarray of int, shape (P,), optional
        Instead of ``active`` and ``target`` (pass None): each training
        position's deepest pair (``model.pair_of`` of its deepest node and
        target); implies ``gradient="tree"``.

    Returns
    -------
    model : LogLinearModel
        The same object; ``model.fit_log`` lists (epoch, held-out loss or None);
        with apg, ``model.fit_result`` is its :class:`snm_core.loglinear.apg.APGResult`.
    """
    if optimizer not in ("pgd", "adagrad", "fista", "lbfgs", "apg"):
        raise ValueError(f"unknown optimizer {optimizer!r}; choose pgd, adagrad, fista, lbfgs "
                         f"or apg")
    if gradient not in ("positions", "tree"):
        raise ValueError(f"unknown gradient {gradient!r}; choose positions or tree")
    forest = model.forest()
    if position_pairs is not None:
        gradient = "tree"
        position_pair = np.asarray(position_pairs, np.int64)
        num_positions = len(position_pair)
    else:
        active = np.ascontiguousarray(active, np.int64)
        target = np.asarray(target, np.int64)
        num_positions = len(target)
        if gradient == "tree" or optimizer in ("lbfgs", "apg"):
            position_pair = model.pair_of(deepest_nodes(active), target)
    at_optimum = optimizer == "apg"  # held-out only logged: no early stop, no best kept
    log = _EpochLog(model, dev, None if at_optimum else patience, callback,
                    keep_best=not at_optimum)
    if optimizer in ("lbfgs", "apg"):  # full batch: the own counts hold the whole objective
        own = np.bincount(position_pair, minlength=model.num_pairs).astype(np.float64)
        if optimizer == "lbfgs":
            return _fit_lbfgs(model, own, penalty, lam, alpha, epochs, log)
        return _fit_apg(model, own, penalty, lam, alpha, epochs, step, tol, log)

    def batch_loss_grad(rows, weight):
        if gradient == "tree":
            own = np.bincount(position_pair[rows], minlength=model.num_pairs).astype(np.float64)
            loss, grad, _ = model.objective(own, weight, level=1)
            return loss, grad
        return model.loss_grad(active[rows], target[rows], weight)
    rng = np.random.default_rng(seed)
    eta = float(step)
    w = model.weight.copy()
    if optimizer == "adagrad":
        sq = np.zeros_like(w)
        pair_word = model.word.astype(np.int64)
        word_count = np.maximum(np.bincount(pair_word, minlength=model.vocab_size), 1)
    elif optimizer == "fista":
        z = w.copy()
        tau = delta = 1.0
        L = 1.0 / float(step)
        rho = L + mu
    for _ in range(epochs):
        order = rng.permutation(num_positions)
        for start in range(0, len(order), batch_size):
            rows = np.sort(order[start:start + batch_size])
            if optimizer == "adagrad":
                _, grad = batch_loss_grad(rows, w)
                sq += grad * grad
                steps = np.where(sq > 0, eta / (eps + np.sqrt(sq)), 0.0)  # unseen: no move
                word_step = np.bincount(pair_word, steps, model.vocab_size) / word_count
                w = _prox_steps(penalty, forest, w - steps * grad, lam * steps,
                                lam * word_step[pair_word], alpha)
                continue
            if optimizer == "fista":
                w_bar = (1.0 - tau) * w + tau * z
                _, grad = batch_loss_grad(rows, w_bar)
                w = penalties.prox(penalty, forest, w_bar - grad / rho, lam / rho, alpha)
                z = (rho * tau * z + mu * w_bar + rho * (w - w_bar)) / (rho * tau + mu)
                rho = L + mu / delta
                tau = (np.sqrt(4.0 * delta + delta * delta) - delta) / 2.0
                delta = (1.0 - tau) * delta
                continue
            loss, grad = batch_loss_grad(rows, w)
            for _ in range(60):
                new = penalties.prox(penalty, forest, w - eta * grad, eta * lam, alpha)
                if not backtrack:
                    break
                d = new - w
                new_loss, _ = batch_loss_grad(rows, new)
                if new_loss <= loss + grad @ d + (d @ d) / (2 * eta) + 1e-12:
                    break
                eta *= 0.5
            w = new
            eta *= grow
        if log.end_epoch(w):
            break
    return log.finish()


def _fit_lbfgs(model, own, penalty, lam, alpha, epochs, log):
    """Full-batch L-BFGS-B for the separable penalties (``fit``'s ``optimizer="lbfgs"``).

    On W >= 0 the l1 penalty is linear and l2 quadratic, so the objective is
    smooth on the feasible set and L-BFGS-B (bounds W >= 0) reaches its optimum.
    The variables are scaled by s_i = sqrt(N_i / P + λ Ω''_i), N_i the training
    positions under pair i: the Hessian diagonal of the loss near the optimum is
    about N_i p (1 - p) / P, which spans orders of magnitude between frequent and
    rare contexts; unscaled, L-BFGS needs many times the iterations (kernel-100k
    order 3, l2: 136 iterations to the optimum scaled, more than 500 not).
    An "epoch" is :data:`LBFGS_EPOCH` iterations, each one pass over the pairs.
    """
    from scipy.optimize import Bounds, minimize  # only this optimiser needs scipy

    kind, weighted = penalties._check_penalty(penalty, alpha)
    if kind not in ("l2", "l1"):
        raise ValueError(f"optimizer lbfgs takes the separable penalties (l2 l1 wl2 wl1: "
                         f"smooth on W >= 0); {penalty} is not smooth, use apg")
    depth_weight = penalties._depth_weights(model.pair_depth,
                                            float(alpha) if weighted else 1.0)
    curvature = 2.0 * lam * depth_weight if kind == "l2" else 0.0
    scale = np.sqrt(totals_from_own_counts(model, own) / max(float(own.sum()), 1.0)
                    + curvature)

    def loss_and_grad(u):
        w = u / scale
        loss, grad, _ = model.objective(own, w, level=1)
        if kind == "l1":
            return loss + lam * (depth_weight @ w), (grad + lam * depth_weight) / scale
        return (loss + lam * (depth_weight @ (w * w)),
                (grad + 2.0 * lam * depth_weight * w) / scale)

    iterations = 0

    def every_iteration(intermediate_result):
        nonlocal iterations
        iterations += 1
        if iterations % LBFGS_EPOCH == 0 and log.end_epoch(intermediate_result.x / scale):
            raise StopIteration  # scipy ends the minimisation there

    result = minimize(loss_and_grad, np.maximum(model.weight, 0.0) * scale, jac=True,
                      method="L-BFGS-B", bounds=Bounds(0.0, np.inf), callback=every_iteration,
                      options={"maxiter": epochs * LBFGS_EPOCH, "maxcor": 10})
    if iterations % LBFGS_EPOCH:  # converged within an epoch: its end is still recorded
        log.end_epoch(result.x / scale)
    return log.finish()


def _fit_apg(model, own, penalty, lam, alpha, epochs, step, tol, log):
    """Full-batch FISTA to the certificate ``tol`` (``fit``'s ``optimizer="apg"``)."""
    from snm_core.loglinear import apg

    logged = 0

    def every_epoch(iteration, weight, certificate):
        nonlocal logged
        logged = iteration
        return log.end_epoch(weight)

    result = apg.minimise(model, own, penalty, lam, alpha, tol=tol,
                          max_iterations=epochs * APG_EPOCH, step=step,
                          every=APG_EPOCH, callback=every_epoch)
    if logged != result.iterations:
        log.end_epoch(result.weight)
    model.weight = result.weight
    model.fit_result = result
    return log.finish()


def _prox_steps(penalty, forest, v, pair_lam, word_lam, alpha):
    """Prox with a step per pair: exact for l2/l1/wl2/wl1 (``pair_lam`` = λη_i per pair);
    the tree penalties use one step per word (``word_lam`` = λη̄_y on each of its pairs)."""
    kind, weighted = penalties._check_penalty(penalty, alpha)
    depth_weight = penalties._depth_weights(forest.depth, float(alpha) if weighted else 1.0)
    u = np.maximum(v, 0.0)
    if kind == "l2":
        return u / (1.0 + 2.0 * pair_lam * depth_weight)
    if kind == "l1":
        return np.maximum(u - pair_lam * depth_weight, 0.0)
    radius = word_lam * depth_weight
    u = u[:, None]
    out = np.empty_like(u)
    if kind == "t2":
        penalties._prox_t2(forest.parent, radius, u, out)
    else:
        penalties._prox_tinf(forest.parent, np.ones(len(u)), radius, u, out)
    return out[:, 0]


def objective(model, active, target, penalty, lam, alpha=1.0):
    """(1/P) Σ NLL + λ Ω(W) of the current weights."""
    loss, _ = model.loss_grad(active, target)
    return loss + lam * penalties.value(penalty, model.forest(), model.weight, alpha)
