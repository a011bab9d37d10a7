"""The compiled loops (snm_core/fit/_kernels.c) against the numpy definition of the
meta-features (snm_core.fit.metafeatures) and against each other's paths."""

import numpy as np
import pyarrow as pa
import pytest
from support.problems import (
    HELDOUT,
    SKIP,
    SPECS,
    TRAIN,
    join_tables,
    problem,
    random_theta,
    spec_name,
    vocabulary,
)

from snm_core.fit import heldout, kernels
from snm_core.fit import metafeatures as mf
from snm_core.fit import problem as fit_problem
from snm_core.fit.metafeatures import MetaFeatureSpec
from snm_core.io import tables
from snm_core.text.config import parse_config


def canonical(slots, weights):
    """(slot, weight) pairs with a non-zero weight, sorted: a set of entries."""
    keep = weights > 0
    order = np.lexsort((weights[keep], slots[keep]))
    return slots[keep][order], weights[keep][order]


@pytest.mark.parametrize("params", SPECS, ids=spec_name)
def test_entries_equal_the_numpy_definition(params):
    variant, diversity, continuation = params
    spec = MetaFeatureSpec(variant, 1 << 16, diversity, continuation)
    rng = np.random.default_rng(0)
    n = 300
    key = rng.integers(0, 2 ** 63, n).astype(np.uint64)
    type_fp = rng.integers(0, 2 ** 63, n).astype(np.uint64)
    feature_count = rng.choice([1, 2, 3, 5, 8, 100, 1024, 5000, 2 ** 40 + 3], n)
    diversity_count = rng.choice([1, 2, 3, 7, 16], n)
    per_row = rng.integers(1, 4, n)
    ptr = np.r_[0, np.cumsum(per_row)]
    word = rng.integers(0, 100, ptr[-1]).astype(np.int32)
    link_count = rng.choice([1, 2, 3, 4, 6, 9, 4095, 4096, 5000], ptr[-1])
    continuation_count = rng.choice([0, 1, 2, 3, 7], ptr[-1])
    row_slot, row_weight, slot, weight = kernels.link_entries(
        spec, key, type_fp, feature_count, diversity_count, ptr, word, link_count,
        continuation_count)
    (r_idx, r_wt), (u_idx, u_wt) = mf.entries(
        spec, key, type_fp, feature_count, diversity_count, np.repeat(np.arange(n), per_row),
        word, link_count, continuation_count)
    for ours, theirs in [((row_slot[r], row_weight[r]), (r_idx[r], r_wt[r])) for r in range(n)] \
            + [((slot[i], weight[i]), (u_idx[i], u_wt[i])) for i in range(ptr[-1])]:
        a_slot, a_weight = canonical(*ours)
        b_slot, b_weight = canonical(theirs[0], theirs[1].astype(np.float64))
        assert a_slot.tolist() == b_slot.tolist()
        assert np.allclose(a_weight, b_weight, rtol=1e-6)  # numpy keeps weights in float32


@pytest.mark.parametrize("params", SPECS, ids=spec_name)
def test_adjusted_links_equal_the_numpy_definition(params):
    """M_fw and M_f* of the apply stage: rows that repeat a (type, count, diversity) and
    links that repeat a (count, continuation) get what the definition gives each one,
    with more distinct combinations than the kernel remembers at once."""
    variant, diversity, continuation = params
    spec = MetaFeatureSpec(variant, 1 << 12, diversity, continuation)
    rng = np.random.default_rng(5)
    n = 30000
    key = rng.integers(0, 2 ** 63, n).astype(np.uint64)
    type_fp = rng.choice(rng.integers(0, 2 ** 63, 4).astype(np.uint64), n)
    feature_count = np.where(rng.random(n) < 0.5, 1, rng.integers(1, 3000, n))
    diversity_count = np.where(rng.random(n) < 0.5, 1, rng.integers(1, 40, n))
    per_row = rng.integers(1, 5, n)
    ptr = np.r_[0, np.cumsum(per_row)]
    links = ptr[-1]
    word = rng.integers(0, 100, links).astype(np.int32)
    link_count = np.where(rng.random(links) < 0.6, 1, rng.integers(1, 50, links))
    continuation_count = np.where(rng.random(links) < 0.6, 1, rng.integers(0, 9, links))
    theta = rng.normal(0, 0.3, spec.hash_size).astype(np.float32)
    m, m_star = kernels.adjust_links(spec, key, type_fp, feature_count, diversity_count, ptr,
                                     word, link_count, continuation_count, theta)
    row_of_link = np.repeat(np.arange(n), per_row)
    rows, units = mf.entries(spec, key, type_fp, feature_count, diversity_count, row_of_link,
                             word, link_count, continuation_count)
    expected = link_count / feature_count[row_of_link] * np.exp(
        mf.adjustment(theta.astype(np.float64), rows, units, row_of_link))
    np.testing.assert_allclose(m, expected, rtol=1e-5)
    np.testing.assert_allclose(m_star, np.bincount(row_of_link, weights=expected), rtol=1e-5)


def reference(small_m, events, spec, type_fingerprint, num_types, dense_theta):
    """By the numpy definition: M_f* of every feature, the held-out log-likelihood
    (events whose target no feature has seen left out) and the slots in use."""
    feature = small_m["feature"].to_numpy()
    word = small_m["word"].to_numpy()
    starts = np.flatnonzero(np.r_[True, feature[1:] != feature[:-1]])
    row_of_link = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(feature)]))
    type_id = (small_m["tag"].to_numpy()[starts].astype(np.int64) * num_types
               + small_m["type"].to_numpy()[starts])
    count = small_m["count"].to_numpy()
    feature_count = small_m["feature_count"].to_numpy()[starts]
    rows, units = mf.entries(spec, feature[starts], type_fingerprint[type_id], feature_count,
                             small_m["diversity"].to_numpy()[starts], row_of_link, word, count,
                             small_m["continuation"].to_numpy())
    used = set(rows[0][rows[1] > 0].tolist()) | set(units[0][units[1] > 0].tolist())
    adjusted = mf.adjustment(dense_theta.astype(np.float64), rows, units, row_of_link)
    m = count / feature_count[row_of_link] * np.exp(adjusted)
    m_star = np.bincount(row_of_link, weights=m)
    row_of = {int(k): r for r, k in enumerate(feature[starts])}
    link_of = {(int(f), int(w)): i for i, (f, w) in enumerate(zip(feature, word))}
    loglik = 0.0
    for keys, target in zip(events["features"].to_pylist(), events["target"].to_pylist()):
        present = [k for k in keys if k in row_of]
        y_t = sum(m[link_of[k, target]] for k in present if (k, target) in link_of)
        if y_t > 0:
            loglik += np.log(y_t) - np.log(sum(m_star[row_of[k]] for k in present))
    return m_star, loglik, used


@pytest.mark.parametrize("identity", [False, True], ids=["slot-index", "whole-table"])
@pytest.mark.parametrize("params", SPECS, ids=spec_name)
def test_m_star_and_likelihood_equal_the_numpy_definition(params, identity, monkeypatch):
    """A(f, w) through stored positions, the slot index or the whole table is the definition's."""
    monkeypatch.setattr(fit_problem, "IDENTITY_SHARE", 0.0 if identity else 1.0)
    variant, diversity, continuation = params
    spec = MetaFeatureSpec(variant, 1 << 12, diversity, continuation)
    lines = [line for source in (TRAIN[:200], TRAIN[200:]) for line in source]
    vocab = vocabulary(lines + list(HELDOUT))
    small_m, events, manifest = join_tables(parse_config(SKIP), [TRAIN[:200], TRAIN[200:]],
                                            HELDOUT, vocab, ["a", "b"])
    fingerprints = heldout.type_fingerprints(manifest)
    prob = fit_problem.AdjustmentProblem([small_m], heldout.Events.from_table(events), spec,
                                         fingerprints, len(manifest["feature_types"]))
    assert (prob.slot_index is None) == identity
    theta = random_theta(prob, 0.3, seed=4)
    m_star, loglik, used = reference(small_m, events, spec, fingerprints,
                                     len(manifest["feature_types"]), prob.dense_theta(theta))
    assert prob.weights_in_use() == len(used)
    assert np.allclose(prob.m_star(theta), m_star, rtol=1e-5)
    assert prob.log_likelihood(theta) == pytest.approx(loglik, rel=1e-6)
    assert prob.batch(theta, np.arange(prob.num_events))[0] == pytest.approx(loglik, rel=1e-6)


@pytest.mark.parametrize("params", SPECS, ids=spec_name)
def test_gradient_through_sorted_pairs_equals_the_direct_sum(params, monkeypatch):
    """A long theta takes its gradient through pairs sorted by position; a short one in place."""
    variant, diversity, continuation = params
    spec = MetaFeatureSpec(variant, 1 << 16, diversity, continuation)
    results = {}
    monkeypatch.setattr(kernels, "ROUND_UNITS", 29)  # rounds cut rows and classes
    for direct in (kernels.DIRECT_PARAMS, 0):
        monkeypatch.setattr(kernels, "DIRECT_PARAMS", direct)
        prob = problem(SKIP, [TRAIN[:200], TRAIN[200:]], HELDOUT, spec, tags=["a", "b"])
        theta = random_theta(prob, 0.3, seed=2)
        results[direct] = prob.batch(theta, np.arange(0, prob.num_events, 2))
    (a_loglik, a_grad), (b_loglik, b_grad) = results.values()
    assert a_loglik == b_loglik
    # The sorted pairs carry float32 values.
    assert np.allclose(a_grad, b_grad, rtol=1e-5, atol=1e-6 * np.abs(a_grad).max())


def many_signatures():
    """Small M whose first row has 3,721 classes of distinct signatures (every pair of a
    link-count and a continuation bucket, a power of two or not): more than the loops
    keep at once, even in an eighth of the row (the gradient's lanes); beside it a row
    of one link; and events on both rows."""
    levels = [1] + [v for b in range(1, 31) for v in (1 << b, 3 << (b - 1))]
    counts, continuations = np.meshgrid(levels, np.array(levels) - 1)
    counts, continuations = counts.ravel(), continuations.ravel()
    n = len(counts)
    small_m = pa.table({
        "feature": np.r_[np.full(n, 11), 22].astype(np.uint64),
        "word": np.r_[np.arange(n), 5].astype(np.int32),
        "count": np.r_[counts, 3].astype(np.int64),
        "continuation": np.r_[continuations, 1].astype(np.int64),
        "feature_count": np.r_[np.full(n, counts.sum()), 3].astype(np.int64),
        "diversity": np.r_[np.full(n, n), 1].astype(np.int64),
        "tag": np.zeros(n + 1, np.int16), "type": np.r_[np.zeros(n), 1].astype(np.int16)},
        schema=tables.SMALL_M)
    rng = np.random.default_rng(3)
    targets = rng.integers(0, n, 300).astype(np.int32)
    keys = [[11, 22] if i % 3 else [11] for i in range(300)]
    events = pa.table({"file": np.zeros(300, np.int16), "line": np.arange(300),
                       "target": targets, "features": keys}, schema=tables.EVENTS)
    return small_m, events


@pytest.mark.parametrize("continuation", [False, True], ids=["", "continuation"])
def test_rows_of_many_signatures_equal_the_definition(continuation, monkeypatch):
    """Unlexicalized A is summed per (row, signature); a row with more signatures than
    are kept at once gives the definition's M_f*, likelihood and gradient."""
    spec = MetaFeatureSpec("unlexicalized", 1 << 16, True, continuation)
    small_m, events = many_signatures()
    fingerprints = np.array([1234567, 7654321], np.uint64)
    results = {}
    for direct in (kernels.DIRECT_PARAMS, 0):  # summed per signature; per class
        monkeypatch.setattr(kernels, "DIRECT_PARAMS", direct)
        prob = fit_problem.AdjustmentProblem([small_m], heldout.Events.from_table(events),
                                             spec, fingerprints, 2)
        assert prob.class_signature.max() + 1 > (61 * 61 if continuation else 61)
        theta = random_theta(prob, 0.3, seed=5)
        m_star, loglik, _ = reference(small_m, events, spec, fingerprints, 2,
                                      prob.dense_theta(theta))
        assert np.allclose(prob.m_star(theta), m_star, rtol=1e-5)
        assert prob.log_likelihood(theta) == pytest.approx(loglik, rel=1e-6)
        results[direct] = prob.batch(theta, np.arange(prob.num_events))
    (a_loglik, a_grad), (b_loglik, b_grad) = results.values()
    assert a_loglik == b_loglik
    assert np.allclose(a_grad, b_grad, rtol=1e-5, atol=1e-6 * np.abs(a_grad).max())
