"""The plain T-inf prox (Algorithm 3, random pivots) against the k-best heap (Algorithm 4).

Both are checked against an interior-point solver of the definition in
test_penalties.py (small trees); here, on trees too large for that solver, the
two methods must agree to rounding: random tries and forests, their collapsed
trees (counts > 1), weights α <= 1 and > 1, with and without x >= 0, ties,
several columns at once.  The pre-order layout the pivot method relies on is
checked against subtrees found by walking parent pointers.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.loglinear.penalties import prox
from snm_core.loglinear.trees import SuffixTree
from snm_core.loglinear.tinf_pivot import preorder


def random_forest(rng, words, contexts, length):
    """A forest of suffix tries, one per 'word', over random contexts (shared alphabet)."""
    trees = [SuffixTree.from_contexts([tuple(rng.integers(0, 4, rng.integers(1, length + 1)))
                                       for _ in range(contexts)]) for _ in range(words)]
    return SuffixTree.concatenate(trees)[0]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.5, 0.85, 1.0, 1.1, 2.0]),
       st.sampled_from([1e-3, 0.05, 0.3, 1.0, 4.0]), st.booleans(), st.booleans())
def test_pivot_equals_heap_on_random_forests(seed, alpha, lam, nonnegative, ties):
    rng = np.random.default_rng(seed)
    tree = random_forest(rng, int(rng.integers(1, 5)), int(rng.integers(1, 60)), 7)
    v = rng.normal(size=(tree.size, 3)) * rng.exponential(size=(tree.size, 1))
    if ties:
        v = np.round(v, 1)
    for penalty, a in (("tinf", 1.0), ("wtinf", alpha)):
        heap = prox(penalty, tree, v, lam, a, nonnegative)
        pivot = prox(penalty, tree, v, lam, a, nonnegative, method="pivot")
        assert np.allclose(pivot, heap, rtol=0, atol=1e-9), (penalty, np.abs(pivot - heap).max())


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.5, 0.85, 1.0]),
       st.sampled_from([1e-3, 0.05, 0.3, 1.0]), st.booleans())
def test_pivot_equals_heap_on_collapsed_trees(seed, alpha, lam, nonnegative):
    # Collapsed nodes stand for several trie nodes (counts > 1, path radii).
    rng = np.random.default_rng(seed)
    collapsed = random_forest(rng, int(rng.integers(1, 4)), int(rng.integers(1, 40)),
                              9).collapse()
    assert collapsed.size_of.max() >= 1
    short = rng.normal(size=(collapsed.size, 2))
    for penalty, a in (("tinf", 1.0), ("wtinf", alpha)):
        heap = prox(penalty, collapsed, short, lam, a, nonnegative)
        pivot = prox(penalty, collapsed, short, lam, a, nonnegative, method="pivot")
        assert np.allclose(pivot, heap, rtol=0, atol=1e-9), penalty
        # and both are the trie's prox of the expanded vector
        trie = prox(penalty, collapsed.trie, collapsed.expand(short), lam, a, nonnegative,
                    method="pivot")
        assert np.allclose(collapsed.expand(pivot), trie, rtol=0, atol=1e-9), penalty


def test_preorder_lays_each_subtree_out_contiguously():
    rng = np.random.default_rng(3)
    tree = random_forest(rng, 3, 25, 6)
    pos, size = preorder(tree.parent)
    assert sorted(pos) == list(range(tree.size))
    for j in range(tree.size):
        members = [i for i in range(tree.size) if j in ancestors_or_self(tree.parent, i)]
        assert size[j] == len(members)
        assert sorted(pos[members]) == list(range(pos[j], pos[j] + size[j]))


def ancestors_or_self(parent, i):
    chain = []
    while i >= 0:
        chain.append(i)
        i = parent[i]
    return chain


def test_pivot_is_deterministic_and_handles_edge_cases():
    rng = np.random.default_rng(11)
    tree = random_forest(rng, 2, 50, 8)
    v = rng.exponential(size=tree.size)
    first = prox("tinf", tree, v, 0.2, method="pivot")
    assert np.array_equal(first, prox("tinf", tree, v, 0.2, method="pivot"))
    assert np.array_equal(prox("tinf", tree, v, 0.0, method="pivot"), v)  # radius 0
    assert not prox("tinf", tree, v, 1e6, method="pivot").any()  # every group inside the ball
    empty = SuffixTree(np.zeros(0, int), np.zeros(0, int))
    assert prox("tinf", empty, np.zeros(0), 1.0, method="pivot").shape == (0,)
    chain = SuffixTree([-1, 0], [0, 1])  # the worked example of test_penalties
    assert np.allclose(prox("tinf", chain, [1.0, 4.0], 1.0, method="pivot"), [1.0, 2.0])
    with pytest.raises(ValueError, match="choose auto, heap or pivot"):
        prox("tinf", chain, [1.0, 4.0], 1.0, method="bisect")


def test_auto_takes_the_pivot_on_shallow_trees_and_the_heap_on_deep_ones():
    from snm_core.loglinear.penalties import _shallow
    star = SuffixTree(np.r_[-1, np.zeros(50, np.int64)], np.r_[0, np.ones(50, np.int64)])
    chain = SuffixTree(np.arange(-1, 49), np.arange(50))
    assert _shallow(star) and not _shallow(chain)
    rng = np.random.default_rng(1)
    for tree in (star, chain):
        v = rng.random(tree.size) * 3
        expected = prox("tinf", tree, v, 0.4, method="heap")
        np.testing.assert_allclose(prox("tinf", tree, v, 0.4), expected, rtol=0, atol=1e-12)
