"""The penalties and proximal operators of snm_core.loglinear.penalties against oracles that
do not use its code or its composition rule.

* Definitions: each penalty's value computed from its groups (every node's
  subtree found by walking parent pointers), depths counted the same way.
* Optimality: a generic interior-point (log-barrier) solver for
  min ½‖x − v‖² + λ Σ_g c_g‖x_g‖_p [x >= 0] in epigraph form, groups listed
  explicitly, no tree order, no composition rule, no projection.  Its
  objective is within ~1e-8 of the optimum, hence (1-strong convexity) its x
  within ~1.5e-4 of the optimal x (about 1e-6 in practice); the tested x must
  be as close and score no worse.
* Closed forms: soft-thresholding, v / (1 + 2λ), one group's soft-threshold
  and l1-ball residual (projection by sorting, written here).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.loglinear.penalties import PENALTIES, prox, value
from snm_core.loglinear.trees import SuffixTree

TREE_PENALTIES = ("t2", "tinf", "wt2", "wtinf")
NORM_PENALTIES = ("l1", "wl1") + TREE_PENALTIES


# --- independent definitions ---------------------------------------------------------------------

def walk_depths(parent, root_depth):
    """Depth of each node, counting parent pointers up to its root."""
    depth = []
    for i in range(len(parent)):
        steps, node = 0, i
        while parent[node] >= 0:
            node, steps = parent[node], steps + 1
        depth.append(root_depth[node] + steps)
    return np.array(depth)


def subtree_groups(parent):
    """group[j] = the nodes whose ancestors-or-self include j."""
    groups = [[] for _ in parent]
    for i in range(len(parent)):
        node = i
        while node >= 0:
            groups[node].append(i)
            node = parent[node]
    return [np.array(g) for g in groups]


def groups_and_weights(penalty, parent, depth, alpha):
    """(groups, group weights, norm p) with Ω = Σ weight_g ‖x_g‖_p, for the norm penalties."""
    weighted = penalty.startswith("w")
    base = penalty[1:] if weighted else penalty
    weights = [alpha ** int(d) if weighted else 1.0 for d in depth]
    if base == "l1":
        return [np.array([i]) for i in range(len(parent))], weights, 1
    return subtree_groups(parent), weights, (2 if base == "t2" else np.inf)


def brute_value(penalty, parent, depth, x, alpha):
    x = np.asarray(x, dtype=float)
    weighted = penalty.startswith("w")
    if penalty in ("l2", "wl2"):
        return sum((alpha ** int(d) if weighted else 1.0) * xi * xi for d, xi in zip(depth, x))
    groups, weights, p = groups_and_weights(penalty, parent, depth, alpha)
    return sum(w * np.linalg.norm(x[g], p) for g, w in zip(groups, weights))


def project_l1(y, radius):
    """Euclidean projection on the l1 ball by sorting (Duchi et al. 2008)."""
    a = np.abs(y)
    if a.sum() <= radius:
        return y.copy()
    if radius == 0:
        return np.zeros_like(y)
    s = np.sort(a)[::-1]
    cumulative = np.cumsum(s)
    k = np.arange(1, len(s) + 1)
    above = np.flatnonzero(s * k > cumulative - radius)  # the first entry always is
    rho = above[-1] if len(above) else 0
    theta = (cumulative[rho] - radius) / (rho + 1)
    return np.sign(y) * np.maximum(a - theta, 0)


def objective(v, x, lam, groups, weights, p):
    """½‖x − v‖² + λ Σ_g c_g ‖x_g‖_p."""
    return 0.5 * np.sum((x - v) ** 2) + lam * sum(
        w * np.linalg.norm(x[g], p) for g, w in zip(groups, weights))


def first_roots(c, b, s):
    """Per row, the smallest positive root of c·α² + b·α + s (s > 0); inf if none."""
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = np.sqrt(b * b - 4 * c * s)
        roots = np.stack([(-b - disc) / (2 * c), (-b + disc) / (2 * c),
                          np.where(c == 0, -s / b, np.nan)])
    return np.where(roots > 0, roots, np.inf).min(axis=0, initial=np.inf)


def barrier_oracle(v, lam, groups, weights, p, nonnegative, final=1e10, factor=20.0):
    """argmin ½‖x − v‖² + λ Σ_g c_g ‖x_g‖_p [x >= 0] by a log-barrier interior-point method.

    The epigraph form: variables z = (x, t), minimise ½‖x − v‖² + λ Σ_g c_g t_g
    with t_g >= ‖x_g‖_p as cones: for p = inf, t_g − x_i > 0 (and t_g + x_i > 0
    without the sign constraint) for i in g; for p = 2, t_g² − ‖x_g‖² > 0 and
    t_g > 0.  Damped Newton steps on τ·objective − Σ log(slacks), τ up to
    ``final``; the result's objective is within (number of slacks)/final of
    the optimum.
    """
    n = len(v)
    kept = [(g, w) for g, w in zip(groups, weights) if lam * w > 0]  # weight 0: no group
    cost = np.array([lam * w for _, w in kept])
    size = n + len(kept)
    unit = np.eye(size)
    rows = [unit[i] for i in range(n)] if nonnegative else []  # linear slacks a·z > 0
    cones = []  # quadratic slacks Σ_j q_j z_j² > 0
    for k, (g, _) in enumerate(kept):
        if p == 2:
            cone = unit[n + k].copy()
            cone[g] = -1
            cones.append(cone)
            rows.append(unit[n + k])
        else:
            rows += [unit[n + k] - sign * unit[i]
                     for i in g for sign in ((1,) if nonnegative else (1, -1))]
    a = np.array(rows).reshape(-1, size)
    q = np.array(cones).reshape(-1, size)

    x0 = np.full(n, 0.5) if nonnegative else np.zeros(n)
    z = np.concatenate([x0, [np.linalg.norm(x0[g], p) + 1 for g, _ in kept]])
    tau = 1.0
    while True:
        for _ in range(100):  # damped Newton on the (self-concordant) barrier problem
            lin, quad = a @ z, q @ z ** 2
            d_quad = 2 * q * z / quad[:, None]  # gradients of log(quad), one per row
            grad = np.concatenate([tau * (z[:n] - v), tau * cost]) - a.T @ (1 / lin) \
                - d_quad.sum(axis=0)
            hess = (a.T / lin ** 2) @ a + d_quad.T @ d_quad
            hess[range(size), range(size)] -= 2 * q.T @ (1 / quad)
            hess[range(n), range(n)] += tau
            step = np.linalg.solve(hess, -grad)
            decrement = -grad @ step  # the Newton decrement, squared
            if decrement < 1e-12:
                break
            length = 1.0 if decrement < 0.0625 else 1 / (1 + np.sqrt(decrement))
            # Never past 99% of the way to the boundary.
            along = a @ step
            shrinking = along < 0
            if shrinking.any():
                length = min(length, 0.99 * np.min(-lin[shrinking] / along[shrinking]))
            if len(q):
                length = min(length, 0.99 * first_roots(q @ step ** 2, 2 * q @ (z * step),
                                                        quad).min())
            z = z + length * step
        if tau >= final:
            return z[:n]
        tau *= factor


# --- strategies ----------------------------------------------------------------------------------

@st.composite
def forests(draw, max_nodes=12):
    """(parent, depth): random forests in topological order, shallow or chain-like."""
    n = draw(st.integers(1, max_nodes))
    deep = draw(st.booleans())
    parent = [-1]
    for i in range(1, n):
        low = max(0, i - 2) if deep else 0
        parent.append(draw(st.integers(low, i - 1)) if draw(st.integers(0, 9)) else -1)
    root_depth = {i: draw(st.integers(0, 2)) for i in range(n) if parent[i] < 0}
    return np.array(parent), walk_depths(parent, root_depth)


numbers = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, -1.0]),  # ties
                    st.integers(-300, 300).map(lambda k: k / 100),  # near-ties
                    st.floats(-3, 3, allow_nan=False, width=32))
alphas = st.sampled_from([0.0, 0.5, 0.85, 1.0, 1.1, 2.0])
lams = st.one_of(st.sampled_from([0.0, 0.25, 1.0]), st.floats(0, 3, width=32))


def vectors(n):
    return st.lists(numbers, min_size=n, max_size=n).map(np.array)


# --- (a) optimality against the interior-point oracle --------------------------------------

@settings(max_examples=40, deadline=None)
@given(st.data(), forests(), lams, alphas, st.booleans())
def test_prox_equals_an_interior_point_solution(data, forest, lam, alpha, nonnegative):
    parent, depth = forest
    tree = SuffixTree(parent, depth)
    v = data.draw(vectors(len(parent)))
    for penalty, method in [(p, "heap") for p in NORM_PENALTIES] + [("tinf", "pivot"),
                                                                    ("wtinf", "pivot")]:
        a = alpha if penalty.startswith("w") else 1.0
        groups, weights, p = groups_and_weights(penalty, parent, depth, a)
        x = prox(penalty, tree, v, lam, a, nonnegative, method=method)
        oracle = barrier_oracle(v, lam, groups, weights, p, nonnegative)
        # The oracle is within ~1e-8 of the optimal objective, so within ~1.5e-4 of
        # the optimum (1-strong convexity; in practice ~1e-6); an exact prox is no worse.
        assert np.allclose(x, oracle, atol=1e-4), (penalty, method, x, oracle)
        mine = objective(v, x, lam, groups, weights, p)
        assert mine <= objective(v, oracle, lam, groups, weights, p) + 1e-12, (penalty, method)
        if nonnegative:
            assert (x >= 0).all()


@settings(max_examples=60, deadline=None)
@given(st.data(), forests(), lams, alphas, st.booleans())
def test_squared_l2_prox_satisfies_its_optimality_condition(data, forest, lam, alpha,
                                                            nonnegative):
    parent, depth = forest
    tree = SuffixTree(parent, depth)
    v = data.draw(vectors(len(parent)))
    for penalty, a in (("l2", 1.0), ("wl2", alpha)):
        x = prox(penalty, tree, v, lam, a, nonnegative)
        weight = a ** depth.astype(float)
        gradient = x - v + 2 * lam * weight * x  # of the smooth objective, per coordinate
        free = (x > 0) if nonnegative else np.ones(len(x), bool)
        assert np.allclose(gradient[free], 0, atol=1e-12)
        if nonnegative:  # KKT at the bound: x = 0 needs a non-negative gradient
            assert (x >= 0).all() and (gradient[~free] >= -1e-12).all()


def test_a_worked_example_of_each_tree_prox():
    chain = SuffixTree([-1, 0], [0, 1])  # a root and its only child
    # t2: the child's group {4} shrinks to 3, then the root's group (3, 3) by 1/sqrt(18).
    expected = 3 * (1 - 1 / np.sqrt(18))
    assert np.allclose(prox("t2", chain, [3.0, 4.0], 1.0), [expected, expected])
    # tinf: the child's group clips 4 to 3, then the root's (1, 3) loses 1 from the top.
    assert np.allclose(prox("tinf", chain, [1.0, 4.0], 1.0), [1.0, 2.0])
    # Mass within the radius: the whole group goes to zero.
    assert np.allclose(prox("tinf", chain, [0.5, 0.4], 1.0), [0.0, 0.0])
    # One group (alpha = 0), threshold just above the next value: only the top is cut.
    assert np.allclose(prox("wtinf", chain, [0.5, 1.0], 0.495, alpha=0.0), [0.5, 0.505])
    assert np.allclose(prox("wtinf", chain, [0.5, 1.0], 0.505, alpha=0.0), [0.4975, 0.4975])


# --- (b) closed forms ----------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.data(), forests(), lams)
def test_unstructured_closed_forms(data, forest, lam):
    parent, depth = forest
    tree = SuffixTree(parent, depth)
    v = data.draw(vectors(len(parent)))
    soft = np.sign(v) * np.maximum(np.abs(v) - lam, 0)
    assert np.allclose(prox("l1", tree, v, lam, nonnegative=False), soft)
    assert np.allclose(prox("l1", tree, v, lam), np.maximum(soft, 0))
    assert np.allclose(prox("l2", tree, v, lam, nonnegative=False), v / (1 + 2 * lam))
    assert np.allclose(prox("l2", tree, v, lam), np.maximum(v, 0) / (1 + 2 * lam))
    weighted = np.sign(v) * np.maximum(np.abs(v) - lam * 0.5 ** depth, 0)
    assert np.allclose(prox("wl1", tree, v, lam, 0.5, nonnegative=False), weighted)


@settings(max_examples=60, deadline=None)
@given(st.data(), st.integers(1, 12), lams, st.booleans())
def test_one_group_closed_forms(data, n, lam, nonnegative):
    # alpha = 0 leaves only the root's group (0**0 = 1, deeper groups weigh 0):
    # a random tree rooted at depth 0 becomes a single group holding every node.
    parent = [-1] + [data.draw(st.integers(0, i - 1)) for i in range(1, n)]
    tree = SuffixTree(parent, walk_depths(parent, {0: 0}))
    v = data.draw(vectors(n))
    y = np.maximum(v, 0) if nonnegative else v
    norm = np.linalg.norm(y)
    group_soft = y * max(0.0, 1 - lam / norm) if norm > 0 else y
    assert np.allclose(prox("wt2", tree, v, lam, 0.0, nonnegative), group_soft)
    assert np.allclose(prox("wtinf", tree, v, lam, 0.0, nonnegative), y - project_l1(y, lam))


# --- (c) the collapsed tree ----------------------------------------------------------------------

def test_from_contexts_builds_the_suffix_trie():
    contexts = [(4, 1, 2), (3, 1, 2), (5, 2), (6,), (1, 2), ()]
    tree = SuffixTree.from_contexts(contexts)
    expected = {(), (2,), (1, 2), (4, 1, 2), (3, 1, 2), (5, 2), (6,)}
    assert sorted(tree.contexts) == sorted(expected)
    assert len(tree.contexts) == len(expected)
    for i, context in enumerate(tree.contexts):
        assert tree.depth[i] == len(context)
        assert tree.node(context) == i
        if context:
            assert tree.contexts[tree.parent[i]] == context[1:]
            assert tree.parent[i] < i
        else:
            assert tree.parent[i] == -1
    with pytest.raises(KeyError):
        tree.node((9,))


def test_collapse_merges_exactly_the_non_branching_paths():
    # () -> (2,) -> (1,2) -> {(4,1,2), (3,1,2) -> (7,3,1,2)}, () -> (6,)
    tree = SuffixTree.from_contexts([(4, 1, 2), (7, 3, 1, 2), (6,)])
    collapsed = tree.collapse()
    same = {frozenset(tree.contexts[i] for i in np.flatnonzero(collapsed.node_of == c))
            for c in range(collapsed.size)}
    assert same == {frozenset({(), }), frozenset({(2,), (1, 2)}), frozenset({(4, 1, 2)}),
                    frozenset({(3, 1, 2), (7, 3, 1, 2)}), frozenset({(6,)})}
    assert collapsed.size_of.sum() == tree.size
    for c in range(collapsed.size):
        members = np.flatnonzero(collapsed.node_of == c)
        assert collapsed.depth[c] == tree.depth[members].min() == tree.depth[collapsed.top[c]]
        outside = tree.parent[collapsed.top[c]]
        assert collapsed.parent[c] == (collapsed.node_of[outside] if outside >= 0 else -1)
        assert collapsed.parent[c] < c


@settings(max_examples=60, deadline=None)
@given(st.data(), forests(), lams, st.sampled_from([0.0, 0.5, 0.85, 1.0]), st.booleans())
def test_collapsed_prox_equals_the_trie_prox_on_constant_paths(data, forest, lam, alpha,
                                                                nonnegative):
    parent, depth = forest
    tree = SuffixTree(parent, depth)
    collapsed = tree.collapse()
    # Non-branching paths in the brute-force sense: a node and its parent's only child.
    children = [sum(1 for p in parent if p == i) for i in range(len(parent))]
    for i, p in enumerate(parent):
        if p >= 0:
            assert (collapsed.node_of[i] == collapsed.node_of[p]) == (children[p] == 1)
    short = data.draw(vectors(collapsed.size))
    v = short[collapsed.node_of]  # constant along each path
    for penalty, a in (("tinf", 1.0), ("wtinf", alpha), ("l1", 1.0), ("l2", 1.0)):
        on_trie = prox(penalty, tree, v, lam, a, nonnegative)
        on_tree = prox(penalty, collapsed, short, lam, a, nonnegative)
        assert np.allclose(collapsed.expand(on_tree), on_trie, atol=1e-12), penalty
        # Proposition 1: the trie's prox keeps the paths constant (to rounding: the ℓ∞
        # prox of a path's nodes may differ in the last bit, which collapse_values refuses).
        tops = on_trie[collapsed.top]
        assert np.allclose(tops[collapsed.node_of], on_trie, rtol=0, atol=1e-12)
        assert np.allclose(tops, on_tree, atol=1e-12)
        assert np.isclose(value(penalty, collapsed, on_tree, a),
                          brute_value(penalty, parent, depth, on_trie, a))


def test_where_the_collapsed_tree_cannot_follow():
    chain = SuffixTree.from_contexts([(1,)])  # a root and its only child: one path
    collapsed = chain.collapse()
    assert collapsed.size == 1
    # With alpha > 1 the parent's group is the lighter one: the path splits.
    assert np.allclose(prox("wtinf", chain, [1.0, 1.0], 0.5, alpha=2.0), [0.5, 0.0])
    with pytest.raises(ValueError, match="alpha = 2.0 > 1"):
        prox("wtinf", collapsed, [1.0], 0.5, alpha=2.0)
    # t2 splits paths even without weights; so do depth-weighted l1/l2.
    assert not np.isclose(*prox("t2", chain, [1.0, 1.0], 0.5))
    for penalty, alpha in (("t2", 1.0), ("wt2", 0.5), ("wl1", 0.5), ("wl2", 0.5)):
        with pytest.raises(ValueError, match="use the trie"):
            prox(penalty, collapsed, [1.0], 0.5, alpha=alpha)
    # Values that differ along a path have no collapsed form.
    with pytest.raises(ValueError, match="one value"):
        collapsed.collapse_values([1.0, 2.0])


# --- (d) sign, zeros, hierarchical sparsity ------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.data(), forests(), lams, alphas, st.booleans())
def test_nonnegativity_zeros_and_hierarchical_sparsity(data, forest, lam, alpha, nonnegative):
    parent, depth = forest
    tree = SuffixTree(parent, depth)
    v = data.draw(vectors(len(parent)))
    for penalty in PENALTIES:
        a = alpha if penalty.startswith("w") else 1.0
        x = prox(penalty, tree, v, lam, a, nonnegative)
        if nonnegative:
            assert (x >= 0).all() and (x[v <= 0] == 0).all()
        else:
            assert (np.sign(x) * np.sign(v) >= 0).all()
        assert (x[v == 0] == 0).all()  # a zero subtree stays zero
        assert (np.abs(x) <= np.abs(v) + 1e-12).all()
    # Hierarchical sparsity: where no input is zero, a zero parent has zero children
    # (the tree steps zero whole subtrees; a zero *input* at a parent does not).
    full = np.where(v == 0, 1.5, np.abs(v) if nonnegative else v)
    child = np.flatnonzero(parent >= 0)
    for penalty in TREE_PENALTIES:
        a = alpha if penalty.startswith("w") else 1.0
        x = prox(penalty, tree, full, lam, a, nonnegative)
        dead = x[parent[child]] == 0
        assert (x[child][dead] == 0).all(), penalty


def test_zero_input_at_a_parent_does_not_zero_its_children():
    chain = SuffixTree([-1, 0], [0, 1])
    for penalty in TREE_PENALTIES:
        x = prox(penalty, chain, [0.0, 5.0], 0.5)
        assert x[0] == 0 and x[1] > 0, penalty


# --- (e) values ----------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.data(), forests(), alphas)
def test_value_equals_the_group_definitions(data, forest, alpha):
    parent, depth = forest
    tree = SuffixTree(parent, depth)
    x = data.draw(vectors(len(parent)))
    for penalty in PENALTIES:
        a = alpha if penalty.startswith("w") else 1.0
        assert np.isclose(value(penalty, tree, x, a), brute_value(penalty, parent, depth, x, a))
    columns = np.stack([x, -2 * x], axis=1)
    assert np.allclose(value("wt2", tree, columns, alpha),
                       [brute_value("wt2", parent, depth, c, alpha) for c in columns.T])


# --- shapes, forests, errors ---------------------------------------------------------------------

def test_matrix_columns_are_independent_vectors_and_dtypes_follow_the_input():
    rng = np.random.default_rng(3)
    tree = SuffixTree.from_contexts([tuple(rng.integers(0, 4, 4)) for _ in range(30)])
    v = rng.normal(size=(tree.size, 5))
    for penalty in PENALTIES:
        a = 0.7 if penalty.startswith("w") else 1.0
        together = prox(penalty, tree, v, 0.3, a)
        apart = np.stack([prox(penalty, tree, column, 0.3, a) for column in v.T], axis=1)
        assert together.shape == v.shape and np.array_equal(together, apart), penalty
        assert prox(penalty, tree, v.astype(np.float32), 0.3, a).dtype == np.float32


def test_a_forest_is_its_trees_side_by_side():
    rng = np.random.default_rng(4)
    trees = [SuffixTree.from_contexts([tuple(rng.integers(0, 3, 3)) for _ in range(k)])
             for k in (1, 5, 9)]
    forest, offsets = SuffixTree.concatenate(trees)
    v = rng.normal(size=forest.size)
    for penalty in PENALTIES:
        a = 0.7 if penalty.startswith("w") else 1.0
        whole = prox(penalty, forest, v, 0.4, a)
        for t, tree in enumerate(trees):
            part = slice(offsets[t], offsets[t + 1])
            assert np.array_equal(whole[part], prox(penalty, tree, v[part], 0.4, a))


def test_errors_say_what_to_change():
    tree = SuffixTree([-1, 0], [0, 1])
    with pytest.raises(ValueError, match="choose one of l2 l1 t2 tinf wl2 wl1 wt2 wtinf"):
        prox("l3", tree, [1.0, 1.0], 0.1)
    with pytest.raises(ValueError, match="use wt2 or alpha = 1.0"):
        prox("t2", tree, [1.0, 1.0], 0.1, alpha=0.5)
    with pytest.raises(ValueError, match="lam must be"):
        prox("t2", tree, [1.0, 1.0], -1.0)
    with pytest.raises(ValueError, match=r"expected shape \(2,\) or \(2, k\)"):
        prox("t2", tree, [1.0, 1.0, 1.0], 0.1)
    with pytest.raises(ValueError, match="choose auto, heap or pivot"):
        prox("tinf", tree, [1.0, 1.0], 0.1, method="sort")
    with pytest.raises(ValueError, match="parent must come before its child"):
        SuffixTree([1, -1], [1, 0])
    with pytest.raises(ValueError, match="depth"):
        SuffixTree([-1, 0], [0, 2])


def test_empty_tree_and_zero_lambda():
    empty = SuffixTree(np.zeros(0, int), np.zeros(0, int))
    for penalty in PENALTIES:
        assert prox(penalty, empty, np.zeros(0), 1.0).shape == (0,)
    tree = SuffixTree.from_contexts([(1, 2), (3, 2)])
    v = np.array([0.5, -1.0, 2.0, 3.0])
    for penalty in PENALTIES:
        assert np.array_equal(prox(penalty, tree, v, 0.0, nonnegative=False), v)


def test_tree_proxes_on_a_larger_tree():
    # Deeper and bushier than hypothesis draws, with ties: against the oracle.
    rng = np.random.default_rng(5)
    tree = SuffixTree.from_contexts([tuple(rng.integers(0, 3, 5)) for _ in range(8)])
    v = np.round(rng.exponential(size=tree.size), 1)  # ties included
    for penalty, a, method in (("tinf", 1.0, "heap"), ("wtinf", 0.85, "heap"),
                               ("t2", 1.0, "heap"), ("wt2", 1.1, "heap"),
                               ("tinf", 1.0, "pivot"), ("wtinf", 0.85, "pivot")):
        groups, weights, p = groups_and_weights(penalty, tree.parent, tree.depth, a)
        x = prox(penalty, tree, v, 0.7, a, method=method)
        oracle = barrier_oracle(v, 0.7, groups, weights, p, True)
        assert np.allclose(x, oracle, atol=1e-4), (penalty, method)
        assert objective(v, x, 0.7, groups, weights, p) \
            <= objective(v, oracle, 0.7, groups, weights, p) + 1e-12, (penalty, method)

