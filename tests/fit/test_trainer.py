import math

import numpy as np
import pytest
from support.problems import (
    HELDOUT,
    SKIP,
    SPECS,
    STEP,
    TRAIN,
    join_tables,
    problem,
    random_theta,
    spec_name,
    vocabulary,
)

from snm_core.fit import kernels, trainer
from snm_core.fit.metafeatures import MetaFeatureSpec
from snm_core.fit.heldout import Events, type_fingerprints
from snm_core.fit.problem import AdjustmentProblem
from snm_core.text.config import preset


@pytest.fixture(scope="module", params=SPECS, ids=spec_name)
def tiny(request):
    variant, diversity, continuation = request.param
    return problem(SKIP, [TRAIN[:200], TRAIN[200:]], HELDOUT,
                   MetaFeatureSpec(variant, hash_size=1 << 16, diversity=diversity,
                                   continuation=continuation),
                   tags=["a", "b"])


def test_gradient_equals_finite_differences(tiny):
    """With exact normalisation the batch gradient is the gradient of the log-likelihood."""
    theta = random_theta(tiny, 0.3)
    events = np.arange(tiny.num_events)
    loglik, grad = tiny.batch(theta, events)
    assert loglik == pytest.approx(tiny.log_likelihood(theta), rel=1e-12)
    rng = np.random.default_rng(5)
    for k in rng.choice(tiny.num_params, size=min(25, tiny.num_params), replace=False):
        step = np.zeros_like(theta)
        step[k] = STEP
        numeric = ((tiny.log_likelihood(theta + step) - tiny.log_likelihood(theta - step))
                   / (2 * STEP))
        assert grad[k] == pytest.approx(numeric, rel=1e-4, abs=1e-6)


@pytest.mark.parametrize("direct_params", [kernels.DIRECT_PARAMS, 0], ids=["lanes", "pairs"])
def test_threads_do_not_change_the_gradient_or_theta(tiny, direct_params, monkeypatch):
    """Rows, units and theta's positions are split between threads; every sum keeps its
    order, whether the gradient is summed in lanes (a short theta) or through pairs
    sorted by position (a long one)."""
    monkeypatch.setattr(kernels, "DIRECT_PARAMS", direct_params)
    monkeypatch.setattr(kernels, "ROUND_UNITS", 37)  # rounds cut rows and classes
    theta = random_theta(tiny, 0.3, seed=9)
    events = np.arange(0, tiny.num_events, 2)
    results = []
    for threads in (1, 2, 3):
        other = problem(SKIP, [TRAIN[:200], TRAIN[200:]], HELDOUT, tiny.spec, tags=["a", "b"],
                        threads=threads)
        loglik, grad = other.batch(theta, events)
        trained, _ = trainer.train(other, trainer.TrainSettings(epochs=1, batch_size=32))
        results.append((loglik, grad.tobytes(), trained.tobytes()))
        other.close()
    assert results[0] == results[1] == results[2]


@pytest.mark.parametrize("variant", ["lexicalized", "unlexicalized"])
def test_small_m_in_buckets_compiles_as_one_table_on_any_threads(variant):
    """Small M's key-range buckets are read and compiled on the threads, a few ahead, and
    joined in key order: the problem is the one compiled from a single table, whether a
    bucket comes as a table or as a function returning one, empty buckets included."""
    vocab = vocabulary(TRAIN + HELDOUT)
    rows, events, manifest = join_tables(preset("5gram"), [TRAIN], HELDOUT, vocab)
    spec = MetaFeatureSpec(variant, hash_size=1 << 16, diversity=True,
                           continuation=variant == "unlexicalized")
    keys = rows["feature"].to_numpy()
    cuts = np.searchsorted(keys, np.quantile(keys, [0.1, 0.3, 0.35, 0.7]).astype(np.uint64))
    bounds = [0, *cuts.tolist(), len(keys)]
    buckets = [rows.slice(lo, hi - lo) for lo, hi in zip(bounds, bounds[1:])]
    buckets.insert(2, rows.slice(0, 0))
    assert len(buckets) == 6 and sum(b.num_rows for b in buckets) == rows.num_rows

    def compiled(tables, threads):
        prob = AdjustmentProblem(tables, Events.from_table(events), spec,
                                 type_fingerprints(manifest), len(manifest["feature_types"]),
                                 threads)
        theta = random_theta(prob, 0.3, seed=3)
        loglik, grad = prob.batch(theta, np.arange(prob.num_events))
        arrays = [getattr(prob, name) for name in (
            "row_key", "row_count", "row_class_ptr", "class_count", "class_mult",
            "pair_row", "pair_rank", "event_ptr")]
        prob.close()
        return [a.tobytes() for a in arrays] + [loglik, grad.tobytes()]

    whole = compiled([rows], 1)
    for threads in (1, 2, 3):
        readers = [b if i % 2 else (lambda b=b: b) for i, b in enumerate(buckets)]
        assert compiled(readers, threads) == whole


@pytest.mark.parametrize("direct_params", [kernels.DIRECT_PARAMS, 0], ids=["lanes", "pairs"])
def test_a_step_is_adagrad_on_the_whole_batch_gradient(tiny, direct_params, monkeypatch):
    """acc += g^2 and theta += gamma g / sqrt(acc) with g the gradient of the whole batch,
    also when pairs are summed in rounds and each position's step is taken as its sum
    completes; positions without gradient keep their weights."""
    monkeypatch.setattr(kernels, "DIRECT_PARAMS", direct_params)
    monkeypatch.setattr(kernels, "ROUND_UNITS", 37)
    other = problem(SKIP, [TRAIN[:200], TRAIN[200:]], HELDOUT, tiny.spec, tags=["a", "b"],
                    threads=2)
    theta = random_theta(other, 0.3, seed=4)
    acc = np.random.default_rng(6).uniform(0.1, 2.0, other.num_params).astype(np.float32)
    events = np.arange(1, other.num_events, 3)
    _, g = other.batch(theta, events)
    stepped, summed, grad = theta.copy(), acc.copy(), np.zeros(other.num_params)
    other.step(stepped, summed, grad, events, 0.1)
    other.close()
    expected_acc = (acc.astype(np.float64) + g * g).astype(np.float32)
    expected = (theta.astype(np.float64)
                + 0.1 * g / np.sqrt(expected_acc.astype(np.float64))).astype(np.float32)
    assert np.count_nonzero(g) and not grad.any()
    assert np.array_equal(summed, expected_acc)
    assert np.array_equal(stepped, expected)


def test_gradient_of_a_mini_batch(tiny):
    theta = random_theta(tiny, 0.2, seed=3)
    batch = np.arange(0, tiny.num_events, 3)
    _, grad = tiny.batch(theta, batch)
    # +-1 in every direction: theta +- STEP * direction stays exact in float32.
    direction = np.random.default_rng(1).choice([-1.0, 1.0], size=tiny.num_params)
    eps = STEP
    numeric = (tiny.batch(theta + eps * direction, batch, gradient=False)[0]
               - tiny.batch(theta - eps * direction, batch, gradient=False)[0]) / (2 * eps)
    assert grad @ direction == pytest.approx(numeric, rel=1e-5)


def unadjusted_perplexity(sources, heldout_lines, config_text):
    """P(w|e) = mean over the event's training features of c(w|f), by plain counting."""
    from collections import Counter

    from snm_core.text.config import parse_config
    config = parse_config(config_text)
    vocab = vocabulary([line for s in sources for line in s] + list(heldout_lines))
    windows = [w for block in config.extractors for w in block.windows()]

    def events(lines):
        for line in lines:
            padded = [0] + [vocab.id(w) for w in line.split()] + [1]
            for j in range(1, len(padded)):
                feats = {(t.name, tuple(padded[j - a - s - r:j - a - s]), tuple(padded[j - a:j]))
                         for t, r, s, a in windows if j - a - s - r >= 0}
                yield feats, padded[j]

    link, total = Counter(), Counter()
    for lines in sources:
        for feats, w in events(lines):
            for f in feats:
                link[f, w] += 1
                total[f] += 1
    logp, n = 0.0, 0
    for feats, w in events(heldout_lines):
        present = [f for f in feats if total[f]]
        logp += math.log(sum(link[f, w] / total[f] for f in present) / len(present))
        n += 1
    return math.exp(-logp / n)


def test_theta_zero_is_the_equal_weight_mixture_of_relative_frequencies():
    prob = problem(SKIP, [TRAIN], HELDOUT, MetaFeatureSpec("lexicalized", 1 << 16))
    expected = unadjusted_perplexity([TRAIN], HELDOUT, SKIP)
    got = trainer.perplexity(prob.log_likelihood(np.zeros(prob.num_params)), prob.num_events)
    assert got == pytest.approx(expected, rel=1e-10)


def test_loss_decreases_over_the_first_epoch_and_training_is_deterministic():
    prob = problem("5gram", [TRAIN], HELDOUT, MetaFeatureSpec("unlexicalized", 1 << 16))
    settings = trainer.TrainSettings(epochs=1, batch_size=64, seed=3)
    theta, history = trainer.train(prob, settings)
    assert history[1]["train_loss"] < history[0]["train_loss"]
    again, _ = trainer.train(prob, settings)
    assert np.array_equal(theta, again)
    other, _ = trainer.train(prob, trainer.TrainSettings(epochs=1, batch_size=64, seed=4))
    assert not np.array_equal(theta, other)


def test_epoch_renormalisation_uses_stale_normalisers():
    prob = problem("5gram", [TRAIN], HELDOUT, MetaFeatureSpec("unlexicalized", 1 << 16))
    theta = random_theta(prob, 0.3)
    stale = prob.m_star(np.zeros(prob.num_params))  # all ones: c(w|f) sums to 1
    assert np.allclose(stale, 1.0)
    exact, _ = prob.batch(theta, np.arange(prob.num_events))
    with_stale, _ = prob.batch(theta, np.arange(prob.num_events), stale_m_star=stale)
    assert exact != pytest.approx(with_stale)


def test_split_keeps_sentences_whole():
    prob = problem("5gram", [TRAIN], HELDOUT, MetaFeatureSpec("unlexicalized", 1 << 16))
    train_events, valid_events = prob.split_events(0.3)
    assert len(set(prob.event_sentence[train_events]) & set(prob.event_sentence[valid_events])) == 0
    assert 0 < len(valid_events) < prob.num_events
