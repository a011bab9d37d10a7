"""The full-batch accelerated proximal gradient (snm_core.loglinear.apg) reaches the optimum.

Oracles: L-BFGS-B (scipy, a different method) for the separable penalties; for
every penalty, the penalised objective recomputed independently (the loss by
the per-position walk ``loss_grad``, not the O(pairs) objective the fit uses;
the penalty from its groups, found by walking parent pointers here) must not
fall under random feasible perturbations of the fitted weights, while it does
fall for weights stopped short of the optimum.
"""

import numpy as np
import pytest

from snm_core.loglinear import apg
from snm_core.loglinear.model import own_counts, prepare
from snm_core.loglinear.optimizers import fit
from snm_core.text import synthetic
from snm_core.text.tokenize import count_words, tokenize
from snm_core.text.vocab import Vocabulary


def _small(order=3, sentences=150):
    train = synthetic.generate(sentences, seed=1)
    counts, _ = count_words(train)
    vocab = Vocabulary.from_counts(counts["word"].to_pylist(), counts["count"].to_pylist())
    model, active, target = prepare(tokenize(train, vocab)[0], order, len(vocab))
    return model, active, target


def _brute_penalty(penalty, model, w, alpha):
    """Ω(w) from its definition: per pair j, its group is j and every pair below it."""
    kind = penalty.lstrip("w")
    weighted = penalty.startswith("w")
    depth_weight = (alpha if weighted else 1.0) ** model.pair_depth.astype(float)
    if kind == "l2":
        return float(depth_weight @ (w * w))
    if kind == "l1":
        return float(depth_weight @ np.abs(w))
    group_sq, group_max = (w * w).copy(), np.abs(w).copy()
    for q in range(model.num_pairs):  # add each pair to all its ancestors
        a = model.pair_parent[q]
        while a >= 0:
            group_sq[a] += w[q] * w[q]
            group_max[a] = max(group_max[a], abs(w[q]))
            a = model.pair_parent[a]
    norms = np.sqrt(group_sq) if kind == "t2" else group_max
    return float(depth_weight @ norms)


def _objective(model, active, target, penalty, lam, alpha, w):
    loss, _ = model.loss_grad(active, target, w)
    return loss + lam * _brute_penalty(penalty, model, w, alpha)


@pytest.mark.parametrize("penalty,alpha,lam", [("l2", 1.0, 3e-3), ("wl2", 1.4, 1e-3),
                                               ("l1", 1.0, 3e-3), ("wl1", 1.4, 3e-3)])
def test_apg_reaches_the_lbfgs_optimum(penalty, alpha, lam):
    model, active, target = _small()
    own = own_counts(model, active, target)
    result = apg.minimise(model, own, penalty, lam, alpha, tol=1e-5)
    assert result.converged and result.certificate < 1e-5
    fit(model, active, target, penalty, lam=lam, alpha=alpha, epochs=200, optimizer="lbfgs")
    reference = _objective(model, active, target, penalty, lam, alpha, model.weight)
    mine = _objective(model, active, target, penalty, lam, alpha, result.weight)
    assert abs(mine - reference) <= 1e-6 * abs(reference)
    assert mine <= reference + 1e-9  # and no worse than L-BFGS-B's


@pytest.mark.parametrize("penalty,alpha,lam", [("t2", 1.0, 3e-3), ("tinf", 1.0, 3e-3),
                                               ("wt2", 1.1, 2e-3), ("wtinf", 0.85, 2e-3)])
def test_tree_penalty_fit_is_optimal_under_feasible_perturbations(penalty, alpha, lam):
    model, active, target = _small()
    own = own_counts(model, active, target)
    result = apg.minimise(model, own, penalty, lam, alpha, tol=1e-6)
    assert result.converged and result.certificate < 1e-6
    w = result.weight
    assert (w >= 0).all() and (w == 0).any() and (w > 0).any()
    # an independent recomputation of F at the fit ...
    F = _objective(model, active, target, penalty, lam, alpha, w)
    assert F == pytest.approx(result.objective, rel=1e-10)
    # ... is not lowered by random feasible moves: single pairs up and down, sparse
    # directions, and moves inside the support (every pair of the fit scaled).
    rng = np.random.default_rng(0)
    moves = []
    for q in rng.choice(model.num_pairs, 30, replace=False):
        for sign in (1.0, -1.0):
            d = np.zeros(model.num_pairs)
            d[q] = sign
            moves.append(d)
    for _ in range(30):
        d = np.zeros(model.num_pairs)
        idx = rng.choice(model.num_pairs, 20, replace=False)
        d[idx] = rng.standard_normal(20)
        moves.append(d)
    moves += [w, -w]
    worse_short = 0
    short = apg.minimise(model, own, penalty, lam, alpha, tol=1e-6, max_iterations=15).weight
    F_short = _objective(model, active, target, penalty, lam, alpha, short)
    for d in moves:
        for eps in (1e-2, 1e-3):
            moved = np.maximum(w + eps * d, 0.0)
            assert _objective(model, active, target, penalty, lam, alpha, moved) >= F - 1e-12
            # the same moves from weights stopped short do find lower values
            moved = np.maximum(short + eps * d, 0.0)
            if _objective(model, active, target, penalty, lam, alpha, moved) < F_short - 1e-12:
                worse_short += 1
    assert worse_short > 0 and F_short > F + 1e-6
    # the certificate, measured independently of the fit's steps, is small too
    assert apg.certificate(model, own, penalty, lam, alpha, weight=w) < 1e-5
    assert apg.certificate(model, own, penalty, lam, alpha, weight=short) > 1e-3


def test_fit_with_apg_runs_to_the_certificate_and_keeps_its_weights():
    model, active, target = _small(sentences=100)
    fit(model, active, target, "wt2", lam=2e-3, alpha=1.1, epochs=40, optimizer="apg",
        tol=1e-4, dev=(active, target), patience=1)
    result = model.fit_result
    assert result.converged and result.certificate < 1e-4
    np.testing.assert_array_equal(model.weight, result.weight)  # not the best held-out
    assert len(model.fit_log) >= 1


@pytest.mark.parametrize("penalty,alpha", [("wl2", 1.4), ("tinf", 1.0)])
def test_the_per_word_metric_and_the_scalar_step_reach_the_same_optimum(penalty, alpha):
    model, active, target = _small(sentences=100)
    own = own_counts(model, active, target)
    word = apg.minimise(model, own, penalty, 2e-3, alpha, tol=1e-6, metric="word")
    scalar = apg.minimise(model, own, penalty, 2e-3, alpha, tol=1e-6, metric="scalar")
    assert word.converged and scalar.converged
    assert word.objective == pytest.approx(scalar.objective, rel=1e-9)
    np.testing.assert_allclose(word.weight, scalar.weight, atol=1e-3)
