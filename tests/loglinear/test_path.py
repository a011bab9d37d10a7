"""The defaults of the log-linear family (snm_core.loglinear.path): the Kneser-Ney start,
the warm-started λ path, the time budget.

Oracles: interpolated modified Kneser-Ney recomputed here from n-gram
counts in dictionaries (not the pair arrays the code uses); λ chosen by the path
against λs fitted separately, each from W = 0 to a tight certificate.
"""

import collections
import time

import numpy as np
import pytest

from snm_core.loglinear import apg, path
from snm_core.loglinear.contexts import histories
from snm_core.loglinear.model import own_counts, positions, prepare
from snm_core.text import synthetic
from snm_core.text.tokenize import count_words, tokenize
from snm_core.text.vocab import BOS_ID, Vocabulary


def _corpus(order=3, sentences=150):
    train = synthetic.generate(sentences, seed=1)
    counts, _ = count_words(train)
    vocab = Vocabulary.from_counts(counts["word"].to_pylist(), counts["count"].to_pylist())
    batch = tokenize(train, vocab)[0]
    model, active, target = prepare(batch, order, len(vocab))
    dev = tokenize(synthetic.generate(60, seed=2), vocab)[0]
    return model, own_counts(model, active, target), batch, positions(model, dev, order), dev


def _contexts(history_row):
    """The contexts of one position, newest word first, shortest (the root) first."""
    out = [()]
    for word in history_row:
        if word < 0:
            break
        out.append(out[-1] + (int(word),))
    return out


def _kneser_ney(counts, order, outcomes):
    """p(y | context) of interpolated modified Kneser-Ney from raw n-gram counts
    {context (newest word first): Counter of next words}, as in Chen and Goodman."""
    adjusted = {}
    for context, following in counts.items():
        if len(context) == order - 1 or (context and context[-1] == BOS_ID):
            adjusted[context] = collections.Counter(following)  # nothing extends it
        else:  # continuation counts: the distinct words seen before context y
            adjusted[context] = collections.Counter()
            for longer, after in counts.items():
                if len(longer) == len(context) + 1 and longer[:-1] == context:
                    for y in after:
                        adjusted[context][y] += 1
    discounts = {}
    for depth in range(order):
        values = [c for context, a in adjusted.items() if len(context) == depth
                  for c in a.values()]
        n1, n2, n3, n4 = (values.count(k) for k in (1, 2, 3, 4))
        big_y = n1 / (n1 + 2 * n2)
        discounts[depth] = (1 - 2 * big_y * n2 / n1, 2 - 3 * big_y * n3 / n2,
                            3 - 4 * big_y * n4 / n3)

    def discount(depth, c):
        return discounts[depth][min(c, 3) - 1]

    def prob(context, y):
        if context not in adjusted:
            return prob(context[:-1], y)
        lower = prob(context[:-1], y) if context else 1.0 / outcomes
        a = adjusted[context]
        total = sum(a.values())
        gamma = sum(discount(len(context), c) for c in a.values()) / total
        seen = (a[y] - discount(len(context), a[y])) / total if a[y] else 0.0
        return seen + gamma * lower

    return prob


def test_the_start_is_interpolated_modified_kneser_ney():
    order = 3
    model, own, train, _, dev = _corpus(order, sentences=300)
    history, target = histories(train, order)
    counts = collections.defaultdict(collections.Counter)
    for row, y in zip(history, target):
        for context in _contexts(row):
            counts[context][int(y)] += 1
    outcomes = model.vocab_size - 1  # every id but <S>
    prob = _kneser_ney(counts, order, outcomes)
    weight = path.kneser_ney_start(model, own)
    assert (weight >= 0).all()
    dev_history, dev_target = histories(dev, order)
    expected = [np.log(prob(_contexts(row)[-1], int(y))) for row, y in
                zip(dev_history, dev_target)]
    got = model.log_prob(model.tree.active(dev_history), dev_target, weight)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    # and every training context's distribution sums to one over the outcomes
    contexts = list(counts)[:20]
    for context in contexts:
        total = sum(prob(context, y) for y in range(model.vocab_size) if y != BOS_ID)
        assert total == pytest.approx(1.0, rel=1e-9)


def test_warm_starts_reach_the_cold_start_objective():
    model, own, _, _, _ = _corpus()
    lam = 0.3 / own.sum()
    model.weight = np.zeros(model.num_pairs)
    cold = apg.minimise(model, own, "wt2", lam, 1.1, tol=1e-6, max_iterations=20000)
    model.weight = path.kneser_ney_start(model, own)  # the path's start
    from_start = apg.minimise(model, own, "wt2", lam, 1.1, tol=1e-6, max_iterations=20000)
    model.weight = apg.minimise(model, own, "wt2", 2 * lam, 1.1, tol=1e-3).weight
    from_path = apg.minimise(model, own, "wt2", lam, 1.1, tol=1e-6, max_iterations=20000)
    for warm in (from_start, from_path):
        assert cold.converged and warm.converged
        assert warm.objective == pytest.approx(cold.objective, rel=1e-8)


def test_the_path_chooses_the_best_of_separately_fitted_lambdas():
    model, own, _, dev, _ = _corpus()
    P = own.sum()
    scales = (3.2, 1.6, 0.8, 0.4, 0.2, 0.1)
    separate = {}
    for scale in scales:
        model.weight = np.zeros(model.num_pairs)
        result = apg.minimise(model, own, "t2", scale / P, tol=1e-4, max_iterations=20000)
        assert result.converged
        separate[scale] = float(np.exp(-model.log_prob(*dev, result.weight).mean()))
    best_scale = min(separate, key=separate.get)
    assert best_scale not in (scales[0], scales[-1])  # inside the grid: the test can fail
    # one held-out check a λ, at its end: the path's value of a λ is its optimum's
    best, trials = path.choose(model, own, dev, "t2", lam_scales=scales, seconds=600,
                               iterations=20000, every=20000, say=lambda line: None)
    assert best["lam"] == pytest.approx(best_scale / P)
    fitted = [t for t in trials if "start" not in t]
    for trial in fitted:
        assert trial["heldout_perplexity"] == pytest.approx(separate[trial["lam_scale"]],
                                                            rel=1e-3)
    # the path stopped where held-out perplexity turned up: one λ past the best
    assert [t["lam_scale"] for t in fitted] == \
        [s for s in scales if s >= best_scale] + [scales[scales.index(best_scale) + 1]]
    assert np.exp(-model.log_prob(*dev).mean()) == pytest.approx(best["heldout_perplexity"])


def test_the_time_budget_stops_the_search_at_its_first_check():
    model, own, _, dev, _ = _corpus()
    began = time.perf_counter()
    best, trials = path.choose(model, own, dev, "wt2", seconds=1e-9, iterations=10000,
                               every=5, say=lambda line: None)
    assert time.perf_counter() - began < 30
    start, fitted = trials
    assert start["start"] and fitted["iterations"] == 5
    assert best["heldout_perplexity"] == fitted["heldout_perplexity"]  # not the start's
    assert fitted["alpha"] == path.ALPHAS["wt2"][0]
    _, trials = path.choose(model, own, dev, "wt2", seconds=1e-9, iterations=10000, every=5,
                            keep_start=True, say=lambda line: None)
    assert len(trials) == 2
