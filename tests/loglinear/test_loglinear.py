"""Tests of snm_core.loglinear: positions, sparse normalisation, gradient, pair forest, fit.

Oracles: hand-written positions, Python-set suffix tries, dense brute-force
softmax over the whole vocabulary from a dict of pair weights, central finite
differences.
"""

import numpy as np
import pytest

from snm_core.loglinear.contexts import ContextTree, histories
from snm_core.loglinear.model import (
    own_counts,
    own_counts_from_totals,
    positions,
    prepare,
    totals_from_own_counts,
)
from snm_core.loglinear.optimizers import _prox_steps, fit, objective
from snm_core.loglinear.trees import SuffixTree
from snm_core.text import synthetic
from snm_core.text.tokenize import SentenceBatch, count_words, tokenize
from snm_core.text.vocab import BOS_ID, EOS_ID, Vocabulary


def _corpus(num_train=300, num_dev=100):
    train, dev = synthetic.generate(num_train, seed=1), synthetic.generate(num_dev, seed=2)
    counts, _ = count_words(train)
    vocab = Vocabulary.from_counts(counts["word"].to_pylist(), counts["count"].to_pylist())
    return vocab, tokenize(train, vocab)[0], tokenize(dev, vocab)[0]


def _random_model(order=3, seed=0, scale=1.5):
    vocab, train, dev = _corpus(60, 30)
    model, active, target = prepare(train, order, len(vocab))
    rng = np.random.default_rng(seed)
    model.weight = rng.random(model.num_pairs) * scale
    return model, active, target, positions(model, dev, order)


def _pair_dict(model):
    pairs = {}
    for j in range(model.tree.size):
        for q in range(model.ptr[j], model.ptr[j + 1]):
            pairs[(j, int(model.word[q]))] = model.weight[q]
    return pairs


def _dense_log_probs(model, active_row):
    """log p(y|x) for every id y (−inf for <S>), by a dense softmax over the vocabulary."""
    pairs = _pair_dict(model)
    scores = np.zeros(model.vocab_size)
    for y in range(model.vocab_size):
        scores[y] = sum(pairs.get((int(j), y), 0.0) for j in active_row if j >= 0)
    scores[BOS_ID] = -np.inf
    top = scores.max()
    return scores - top - np.log(np.exp(scores - top).sum())


def test_histories_by_hand():
    batch = SentenceBatch.from_lists([[5, 6, 7], [8]])
    history, target = histories(batch, 3)
    assert target.tolist() == [5, 6, 7, EOS_ID, 8, EOS_ID]
    B = BOS_ID
    assert history.tolist() == [[B, -1], [5, B], [6, 5], [7, 6], [B, -1], [8, B]]


def test_context_tree_is_the_suffix_trie():
    vocab, train, _ = _corpus(50, 1)
    history, _ = histories(train, 4)
    tree = ContextTree.build(history, len(vocab))
    contexts = []  # text order, oldest first, as SuffixTree.from_contexts wants
    for row in history:
        words = [int(w) for w in row if w >= 0]
        contexts.append(tuple(reversed(words)))
    expected = SuffixTree.from_contexts(contexts)
    assert tree.size == expected.size
    # rebuild each node's context from (word, parent) and compare as sets
    context = [()]
    for i in range(1, tree.size):
        assert tree.parent[i] < i and tree.depth[i] == tree.depth[tree.parent[i]] + 1
        context.append((int(tree.word[i]),) + context[tree.parent[i]])
    assert set(context) == set(expected.contexts)
    active = tree.active(history)
    for row, act in zip(contexts, active):
        for k in range(len(act)):
            if k <= len(row):
                assert context[act[k]] == tuple(row[len(row) - k:])
            else:
                assert act[k] == -1


def test_active_stops_at_unseen_suffix():
    # column 0 is the most recent word: contexts "4 3" and "4 5" (text order)
    tree = ContextTree.build(np.array([[3, 4], [5, 4]]), 10)
    active = tree.active(np.array([[3, 4], [9, 4], [3, 9], [-1, -1], [5, -1]]))
    assert active[0, 0] == 0 and (active[0, 1:] > 0).all()
    assert active[1].tolist() == [0, -1, -1]  # "9" unseen, so "4 9" is not looked up
    assert active[2, 1] == active[0, 1] and active[2, 2] == -1
    assert active[3].tolist() == [0, -1, -1]
    assert active[4, 1] > 0 and active[4, 1] != active[0, 1] and active[4, 2] == -1


def test_probabilities_sum_to_one_against_dense_softmax():
    model, _, _, (active, target) = _random_model()
    rng = np.random.default_rng(1)
    for p in rng.choice(len(target), 12, replace=False):
        dense = _dense_log_probs(model, active[p])
        assert np.isclose(np.exp(dense).sum(), 1.0)
        outcomes = np.array([y for y in range(model.vocab_size) if y != BOS_ID])
        rows = np.repeat(active[p:p + 1], len(outcomes), axis=0)
        sparse = model.log_prob(rows, outcomes)
        np.testing.assert_allclose(sparse, dense[outcomes], rtol=1e-10, atol=1e-10)
        assert np.isclose(np.exp(sparse).sum(), 1.0)


def test_loss_matches_dense_softmax():
    model, active, target, _ = _random_model(order=4, seed=3)
    idx = np.arange(0, len(target), 7)
    expected = -np.mean([_dense_log_probs(model, active[p])[target[p]] for p in idx])
    loss, _ = model.loss_grad(active[idx], target[idx])
    assert np.isclose(loss, expected, rtol=1e-12)


def test_gradient_matches_finite_differences():
    model, active, target, _ = _random_model(order=3, seed=5, scale=1.0)
    idx = np.arange(0, len(target), 3)
    active, target = active[idx], target[idx]
    _, grad = model.loss_grad(active, target)
    rng = np.random.default_rng(2)
    root_pairs = np.arange(model.ptr[0], model.ptr[1])
    deep = np.flatnonzero(model.pair_depth >= 1)
    check = np.concatenate([rng.choice(root_pairs, 10, replace=False),
                            rng.choice(deep, 25, replace=False)])
    h = 1e-6
    for q in check:
        plus, minus = model.weight.copy(), model.weight.copy()
        plus[q] += h
        minus[q] -= h
        numeric = (model.loss_grad(active, target, plus)[0]
                   - model.loss_grad(active, target, minus)[0]) / (2 * h)
        assert np.isclose(grad[q], numeric, rtol=1e-5, atol=1e-8), q
    # a random direction over all pairs at once
    d = rng.standard_normal(model.num_pairs)
    numeric = (model.loss_grad(active, target, model.weight + h * d)[0]
               - model.loss_grad(active, target, model.weight - h * d)[0]) / (2 * h)
    assert np.isclose(grad @ d, numeric, rtol=1e-5)


def test_pair_forest_parents_present():
    vocab, train, _ = _corpus(80, 1)
    model, active, target = prepare(train, 4, len(vocab))
    node_of = np.repeat(np.arange(model.tree.size), np.diff(model.ptr))
    seen = {(int(j), int(y)) for row, y in zip(active, target) for j in row if j >= 0}
    pairs = list(zip(node_of.tolist(), model.word.tolist()))
    assert len(pairs) == len(set(pairs)) and set(pairs) == seen
    index = {pair: q for q, pair in enumerate(pairs)}
    for q, (j, y) in enumerate(pairs):
        parent = model.tree.parent[j]
        if parent < 0:
            assert model.pair_parent[q] == -1
        else:
            assert (int(parent), y) in index
            assert model.pair_parent[q] == index[(int(parent), y)] < q
            assert model.pair_depth[q] == model.tree.depth[j]
    forest = model.forest()
    assert (forest.parent == model.pair_parent).all()
    assert int((forest.parent < 0).sum()) == len({y for _, y in pairs})  # one tree per word


@pytest.mark.parametrize("penalty,alpha", [("l2", 1.0), ("t2", 1.0), ("wt2", 0.8),
                                           ("tinf", 1.0)])
def test_training_lowers_heldout_loss(penalty, alpha):
    vocab, train, dev = _corpus(300, 100)
    model, active, target = prepare(train, 3, len(vocab))
    dev_active, dev_target = positions(model, dev, 3)
    uniform = model.loss_grad(dev_active, dev_target)[0]
    assert np.isclose(uniform, np.log(len(vocab) - 1))
    start = objective(model, active, target, penalty, 1e-4, alpha)
    fit(model, active, target, penalty, lam=1e-4, alpha=alpha, epochs=6,
                  batch_size=200)
    assert (model.weight >= 0).all()
    assert objective(model, active, target, penalty, 1e-4, alpha) < start - 1.0
    assert model.loss_grad(dev_active, dev_target)[0] < uniform - 1.0


def test_strong_tree_penalty_zeroes_subtrees():
    vocab, train, _ = _corpus(200, 1)
    model, active, target = prepare(train, 3, len(vocab))
    fit(model, active, target, "t2", lam=3e-3, epochs=3, batch_size=200)
    zero = model.weight == 0
    assert zero.any() and not zero.all()
    child = model.pair_parent >= 0
    # a zero pair has zero children (groups are subtrees of a word's tree)
    assert not (zero[model.pair_parent[child]] & ~zero[child]).any()


@pytest.mark.parametrize("optimizer,penalty,step", [("adagrad", "t2", 1.0), ("adagrad", "l2", 1.0),
                                                    ("adagrad", "wt2", 1.0), ("fista", "t2", 1.0)])
def test_new_optimizers_lower_heldout_loss(optimizer, penalty, step):
    vocab, train, dev = _corpus(300, 100)
    model, active, target = prepare(train, 3, len(vocab))
    dev_active, dev_target = positions(model, dev, 3)
    uniform = model.loss_grad(dev_active, dev_target)[0]
    alpha = 0.8 if penalty == "wt2" else 1.0
    start = objective(model, active, target, penalty, 1e-4, alpha)
    fit(model, active, target, penalty, lam=1e-4, alpha=alpha, epochs=6,
                  batch_size=200, optimizer=optimizer, step=step)
    assert (model.weight >= 0).all() and np.isfinite(model.weight).all()
    assert objective(model, active, target, penalty, 1e-4, alpha) < start - 1.0
    assert model.loss_grad(dev_active, dev_target)[0] < uniform - 1.0


def test_adagrad_separable_prox_is_exact_per_coordinate():
    forest = SuffixTree(np.array([-1, 0, 0]), np.array([0, 1, 1]))
    v = np.array([1.0, -0.5, 2.0])
    steps = np.array([0.1, 0.2, 0.4])
    got = _prox_steps("l1", forest, v, 0.5 * steps, None, 1.0)
    np.testing.assert_allclose(got, [0.95, 0.0, 1.8])
    got = _prox_steps("l2", forest, v, 0.5 * steps, None, 1.0)
    np.testing.assert_allclose(got, [1.0 / 1.1, 0.0, 2.0 / 1.4])
    # the tree penalties with one step for the whole tree are the usual prox
    from snm_core.loglinear import penalties
    got = _prox_steps("t2", forest, v, None, np.full(3, 0.3), 1.0)
    np.testing.assert_allclose(got, penalties.prox("t2", forest, v, 0.3))


@pytest.mark.parametrize("penalty,alpha,lam", [("l2", 1.0, 3e-3), ("wl1", 1.4, 3e-3)])
def test_lbfgs_meets_the_optimality_conditions(penalty, alpha, lam):
    # KKT of min f(W) + λΩ(W) s.t. W >= 0, with f's gradient from the per-position walk
    # (not the O(pairs) objective the fit uses): zero gradient where w > 0, >= 0 at w = 0.
    vocab, train, _ = _corpus(300, 1)
    model, active, target = prepare(train, 3, len(vocab))
    fit(model, active, target, penalty, lam=lam, alpha=alpha, epochs=100,
                  optimizer="lbfgs")
    w = model.weight
    _, grad = model.loss_grad(active, target)
    depth_weight = alpha ** model.pair_depth.astype(float)
    if penalty.endswith("l2"):
        grad = grad + 2 * lam * depth_weight * w
    else:
        grad = grad + lam * depth_weight
    positive = w > 1e-6
    assert positive.any() and (w >= 0).all()
    assert np.abs(grad[positive]).max() < 2e-5
    if penalty.endswith("l1"):
        assert (~positive).any()  # l1 zeroes some pairs
        assert grad[~positive].min() > -2e-5


def test_lbfgs_refuses_tree_penalties():
    vocab, train, _ = _corpus(50, 1)
    model, active, target = prepare(train, 2, len(vocab))
    with pytest.raises(ValueError, match="separable penalties"):
        fit(model, active, target, "t2", lam=1e-3, optimizer="lbfgs")


def test_early_stopping_keeps_best_weights():
    vocab, train, dev = _corpus(300, 100)
    model, active, target = prepare(train, 3, len(vocab))
    dev_active, dev_target = positions(model, dev, 3)
    fit(model, active, target, "t2", lam=1e-6, epochs=12, batch_size=100,
                  optimizer="adagrad", step=3.0, dev=(dev_active, dev_target), patience=2)
    held = [h for _, h in model.fit_log]
    assert len(held) <= 12 and min(held) == pytest.approx(
        model.loss_grad(dev_active, dev_target)[0])
    if len(held) < 12:  # stopped: the last `patience` epochs did not improve
        assert min(held[-2:]) >= min(held)


def _brute_own_counts(model, active, target):
    """{(deepest node, target): positions} by a Python dict over the positions."""
    counts = {}
    for row, y in zip(active.tolist(), target.tolist()):
        deepest = [j for j in row if j >= 0][-1]
        counts[(deepest, y)] = counts.get((deepest, y), 0) + 1
    return counts


def test_own_counts_count_each_positions_whole_history():
    model, active, target, _ = _random_model(order=4, seed=3)
    own = own_counts(model, active, target)
    pair_node = model.pair_node
    got = {(int(pair_node[q]), int(model.word[q])): own[q] for q in np.flatnonzero(own)}
    assert got == _brute_own_counts(model, active, target)
    # N-gram totals (positions whose history *ends* with the context) give them back
    totals = np.zeros(model.num_pairs)
    for row, y in zip(active.tolist(), target.tolist()):
        for j in row:
            if j >= 0:
                totals[model.pair_of([j], [y])[0]] += 1
    np.testing.assert_array_equal(own_counts_from_totals(model, totals), own)
    # ... and the totals are the own counts summed up the pair forest
    np.testing.assert_array_equal(totals_from_own_counts(model, own), totals)


def test_full_objective_matches_dense_softmax_and_finite_differences():
    model, active, target, _ = _random_model(order=4, seed=3)
    own = own_counts(model, active, target)
    loss, grad, hess = model.objective(own, level=2)
    expected = -np.mean([_dense_log_probs(model, active[p])[target[p]]
                         for p in range(len(target))])
    assert np.isclose(loss, expected, rtol=1e-12)
    rng = np.random.default_rng(4)
    check = np.concatenate([np.arange(model.ptr[0], model.ptr[1])[:8],
                            rng.choice(np.flatnonzero(model.pair_depth >= 1), 25,
                                       replace=False)])
    h = 1e-5
    for q in check:
        plus, minus = model.weight.copy(), model.weight.copy()
        plus[q] += h
        minus[q] -= h
        f_plus, g_plus, _ = model.objective(own, plus)
        f_minus, g_minus, _ = model.objective(own, minus)
        assert np.isclose(grad[q], (f_plus - f_minus) / (2 * h), rtol=1e-5, atol=1e-9), q
        assert np.isclose(hess[q], (g_plus[q] - g_minus[q]) / (2 * h), rtol=1e-4,
                          atol=1e-9), q


def test_tree_gradient_fit_follows_the_position_gradient_fit():
    vocab, train, dev = _corpus(200, 60)
    runs = []
    for gradient in ("positions", "tree"):
        model, active, target = prepare(train, 3, len(vocab))
        fit(model, active, target, "wt2", 1e-4, 0.8, epochs=2, batch_size=300,
                      optimizer="adagrad", step=1.0, gradient=gradient)
        runs.append(model.weight)
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-9, atol=1e-12)
