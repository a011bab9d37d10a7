"""Penalties over suffix trees and their proximal operators (Nelakanti et al. 2013).

The log-linear model of "Structured Penalties for Log-linear Language Models"
(``../shared/papers/structured-penalties-loglinear-lm.md``) scores a target
word y after a context x as p(y|x) ∝ exp(Σ_j w_{j,y} φ_j(x)), where j runs over
the suffixes of x (the empty suffix included) and φ_j(x) = 1 when j is a
suffix of x.  For one word y, the weights w_{·,y} live on the nodes of the
suffix trie of the contexts: the root is the empty context, the children of a
context c are the contexts one word longer on the old side (``(a,) + c``),
and a node's depth is its length.  The tree is
:class:`~snm_core.loglinear.trees.SuffixTree` (its path-compressed form
:class:`~snm_core.loglinear.trees.CollapsedTree`); this module holds the penalties
Ω on a vector over it: their value (:func:`value`) and the proximal operator
prox_{λΩ}(v) = argmin_x ½‖x − v‖² + λΩ(x), optionally with x ≥ 0 (:func:`prox`).  It does one job: no model, no data, no training loop.

Penalties (``PENALTIES``), with d_j the depth of node j and g_j the group of
j, the subvector on the subtree rooted at j (j and all its descendants)::

    l2     Σ_j x_j²                 wl2     Σ_j α^{d_j} x_j²
    l1     Σ_j |x_j|                wl1     Σ_j α^{d_j} |x_j|
    t2     Σ_j ‖x_{g_j}‖_2          wt2     Σ_j α^{d_j} ‖x_{g_j}‖_2
    tinf   Σ_j ‖x_{g_j}‖_∞          wtinf   Σ_j α^{d_j} ‖x_{g_j}‖_∞

So the weight α^d goes to the coordinate of a node at depth d (wl2, wl1) and
to the group rooted at that node (wt2, wtinf); a root at depth 0 has weight 1,
and α = 0 leaves only the groups of depth-0 nodes (``0**0 == 1``).

What the text extraction lost, and how it is reconstructed here
---------------------------------------------------------------
* Eq. (1), the model, and (2)-(5), the penalised log-loss and the proximal
  step W ← argmin_{W∈K} ½‖W − W̃‖² + (λ/L)Ω(W): from the prose of 2.1-2.3 and
  the standard proximal-gradient step (Beck & Teboulle 2009).  This module is
  that last argmin with "λ" standing for λ/L.
* Eq. (6), squared l2: the paper writes the step as Π_{ℓ2²}(w, κ/2), i.e. a
  penalty (κ/2)‖w‖² and the rescaling w/(1 + κ).  Here Ω_l2 = ‖x‖² without
  the ½, so prox_{λΩ_l2}(v) = v / (1 + 2λ); pass λ/2 for the paper's scaling.
* Eq. (7), l1: soft-thresholding, sign(v) max(|v| − λ, 0).
* Eq. (8), the tree norms: Ω_T^p(w) = Σ_{j∈G} ‖g(w, j)‖_p from Definitions 1-2
  (one group per subtree).  Section 6 weights "a feature at depth m" by α^m; we
  read that as the table above.  (Its remark that the best α < 1 means the
  unweighted norms "under-penalize" deep features would rather fit α^{-m}; a
  caller wanting that convention passes 1/α.)
* Eqs. (9)-(11), the dual-ball projections: on the l2 ball, w·min(1, κ/‖w‖),
  whose residual is the group soft-threshold [1 − κ/‖w‖]_+ w; on the l1 ball,
  for w ≥ 0, [w − τ]_+ with Σ_i [w_i − τ]_+ = κ (τ = 0 inside the ball), and
  with the k largest entries above the threshold, τ = (Σ_{i≤k} w_(i) − κ)/k.
* The composition rule (Jenatton, Mairal, Obozinski & Bach 2011, "Proximal
  methods for hierarchical sparse coding", their Theorem on tree-structured
  groups): for groups that are nested or disjoint, ordered so that each group
  comes before any group containing it, prox_{λΣ_g c_g‖·_g‖} is the
  composition of the single-group proxes prox_{λc_g‖·_g‖}, each being
  v_g ← v_g − Π_{‖·‖_* ≤ λc_g}(v_g) (Moreau), ‖·‖_* the dual norm.  Hence
  t2 = group soft-thresholds from the leaves up (Algorithm 2 does it in one
  upward pass, computing a scale η_j per group, and one downward pass
  multiplying each coordinate by the product of the η of its ancestors), and
  tinf = residuals of l1-ball projections from the leaves up.
* Positivity (K = {W ≥ 0}, section 2.5): every Ω here is absolute
  (Ω(x) = Ω(|x|)) and monotone (|x| ≤ |y| componentwise ⇒ Ω(x) ≤ Ω(y)).  Then
  prox_{λΩ + ι_{x≥0}}(v) = prox_{λΩ}(max(v, 0)): for a feasible x, zeroing the
  coordinates where v_i < 0 lowers ½(x_i − v_i)² and does not raise Ω, so an
  optimum has them zero; on those x the objective is ½‖x − v_+‖² + λΩ(x) plus
  a constant, whose unconstrained minimiser prox_{λΩ}(v_+) is ≥ 0 and zero
  where v_+ is (each group step scales or clips from above), so it is feasible
  and optimal.  Without the constraint, prox_{λΩ}(v) = sign(v) prox_{λΩ}(|v|)
  for the same reason; both reductions are used below.

The l_inf^T prox as computed here (the paper's Algorithm 4, restated)
--------------------------------------------------------------------
On a vector u ≥ 0 the single-group step is a clip: u_g − Π_{l1 ball κ}(u_g) is
0 when ‖u_g‖_1 ≤ κ, and min(u_g, τ) otherwise, τ > 0 the level at which the
mass above it, Σ c_i (u_i − τ)_+, is κ.  Later (ancestor) steps clip again, so
the result is u_i clipped at the minimum of the levels of i's ancestors and
itself: one upward pass computes each node's level, one downward pass applies
the running minimum.  The upward pass keeps, per subtree, a max-heap of its
current (value, count) entries and its l1 mass; a node pushes its entry,
merges its children's heaps, pops entries while the threshold of the popped
ones, τ = (S − κ)/C, is below the next value, and pushes the popped ones back
as one entry (τ, C).  Each node adds at most two entries, so there are at most
2n pops: O(n log n).  The paper merges Fibonacci heaps; leftist heaps are used
here (O(log n) merge, arrays only).  The plain alternative, its Algorithm 3 (a
random-pivot projection of every whole subtree, O(n · depth)), is
:mod:`snm_core.loglinear.tinf_pivot` (``method="pivot"``); on the pair forests of
n-gram models it is the faster of the two (``benchmarks/loglinear.py prox-speed``).

The collapsed tree (Propositions 1-2)
-------------------------------------
A non-branching path n_1 (top) .. n_s whose entries all equal a is one node of
the collapsed tree with count s: in the l1 projections it stands for s equal
entries.  Its s nested groups, with radii κ_1..κ_s (κ_i = λα^{d(n_i)}), act
like one group at n_1 with radius Σ_i κ_i.  Reconstructed proof: the first
step clips the path's bottom group at some τ; the next adds one entry a and
removes κ_{s-1} more mass, which equals removing κ_s + κ_{s-1} at once as long
as the new clip level does not exceed the previous one, i.e. κ_{s-1} ≥ a − τ.
As the s − i path entries below n_i all lose a − τ, a − τ ≤ mean(κ_{i+1..s}),
so κ_i ≥ κ_{i+1} (α ≤ 1, including the unweighted case) is enough, and by
induction the path stays constant (Proposition 1).  With α > 1 it is not: the
trie's prox can split a path's value (e.g. v = (1, 1) on a root and its only
child, λ = 0.5, α = 2 gives (0.5, 0)), so :func:`prox` refuses wtinf on a
collapsed tree for α > 1.  t2/wt2 do not keep paths constant in general
(the paper's Table 1), nor do wl1/wl2 for α ≠ 1; only l1, l2, tinf and wtinf with α ≤ 1 run
on a collapsed tree.  Input that is not constant along a path cannot be
expressed on the collapsed tree at all (:meth:`CollapsedTree.collapse_values`
raises): the node must be split, as the paper does after gradient steps, or
the trie used.

Shapes: a vector over a tree of n nodes is shape (n,); shape (n, k) holds k
independent vectors over the same tree (e.g. k words sharing one trie).
Independent trees (e.g. one per target word) form one forest
(:meth:`SuffixTree.concatenate`).  Everything is float64 inside; float32 input
gives float32 output.  Numba compiles the passes on first use and caches them
beside this file; importing this module loads numba (its start and memory), so only
the log-linear family imports it.
"""

import numpy as np

from snm_core.loglinear.family import PENALTIES, numba_compiler
from snm_core.loglinear.tinf_pivot import preorder, prox_tinf_pivot
from snm_core.loglinear.trees import CollapsedTree

numba = numba_compiler()


#: Longest merge path of two leftist heaps: each right spine has at most
#: log2(entries + 1) <= 64 nodes.
_MERGE_STACK = 130


# --- the entry points ----------------------------------------------------------------------------

def value(penalty, tree, x, alpha=1.0):
    """The penalty Ω(x) (without λ), from the table in the module docstring.

    Parameters
    ----------
    penalty : str, one of ``PENALTIES``
    tree : SuffixTree or CollapsedTree
        On a collapsed tree x holds one value per path; Ω is that of the trie
        vector it stands for.
    x : array_like, shape (n,) or (n, k)
    alpha : float >= 0, default 1.0
        Depth weight of the weighted penalties; must be 1.0 for the others.

    Returns
    -------
    float for x of shape (n,); ndarray of float64, shape (k,), one per column, else.

    Examples
    --------
    >>> from snm_core.loglinear.trees import SuffixTree
    >>> tree = SuffixTree.from_contexts([(1,), (2,)])   # a root and two leaves
    >>> float(value("tinf", tree, [1.0, 2.0, -3.0]))    # 3 + 2 + 3
    8.0
    """
    kind, weighted = _check_penalty(penalty, alpha)
    if isinstance(tree, CollapsedTree):
        return value(penalty, tree.trie, tree.expand(x), alpha)
    x, vector = _columns(x, tree)
    weight = _depth_weights(tree.depth, alpha if weighted else 1.0)
    if kind == "l2":
        result = weight @ np.square(x)
    elif kind == "l1":
        result = weight @ np.abs(x)
    elif kind == "t2":
        result = weight @ np.sqrt(_subtree_reduce(tree.parent, np.square(x), True))
    else:
        result = weight @ _subtree_reduce(tree.parent, np.abs(x), False)
    return float(result[0]) if vector else result


#: The pivot prox reads every subtree whole, the heap prox each node a few times at a
#: higher cost a visit (benchmarks/loglinear.py prox-speed times both): the pivot is the
#: faster while the subtrees' sizes sum to less than about this many times the nodes.
PIVOT_MAX_SUBTREE_RATIO = 8


def prox(penalty, tree, v, lam, alpha=1.0, nonnegative=True, method="auto"):
    """The proximal operator argmin_x ½‖x − v‖² + λΩ(x) [+ the constraint x >= 0].

    Parameters
    ----------
    penalty : str, one of ``PENALTIES``
        Ω, as in the module docstring (l2 is ‖x‖² without a ½).
    tree : SuffixTree or CollapsedTree
        A collapsed tree takes l1, l2 and tinf, and wl1/wl2 only with α = 1,
        wtinf only with α <= 1 (where paths stay constant; module docstring).
    v : array_like, shape (n,) or (n, k)
        One value per node; each column of a matrix is a separate vector.
    lam : float >= 0
        λ (λ/L in a proximal-gradient step).
    alpha : float >= 0, default 1.0
        Depth weight α of the weighted penalties; must be 1.0 for the others.
    nonnegative : bool, default True
        Constrain x >= 0 (the paper's W >= 0).
    method : {"auto", "heap", "pivot"}, default "auto"
        tinf/wtinf only: the k-best heap (Algorithm 4), or the plain random-pivot
        projection of every subtree (Algorithm 3, :mod:`snm_core.loglinear.tinf_pivot`);
        the same result to rounding.  ``"auto"``: the pivot on shallow trees (the
        subtrees' sizes summing to at most :data:`PIVOT_MAX_SUBTREE_RATIO` times the
        nodes, as in the n-gram pair forests), else the heap.

    Returns
    -------
    x : ndarray, shape of v; float32 for float32 v, else float64.

    Notes
    -----
    l2, l1: O(n).  t2, wt2: Algorithm 2, O(n) (one upward, one downward pass).
    tinf, wtinf: Algorithm 4 with leftist heaps, O(n log n) per column; with
    ``method="pivot"`` Algorithm 3, O(Σ subtree sizes) = O(n · depth) expected.

    Zeros stay zero (and, with ``nonnegative``, so do negative entries).  The
    tree penalties zero whole subtrees: a node whose group step zeroes it has
    zero descendants; so where v has no zero, a zero node's children are
    zero.  A zero *input* at a node does not zero its children.

    Examples
    --------
    >>> from snm_core.loglinear.trees import SuffixTree
    >>> tree = SuffixTree.from_contexts([(1,)])          # a root and one child
    >>> prox("l1", tree, [3.0, -1.0], 0.5).tolist()
    [2.5, 0.0]
    >>> prox("l1", tree, [3.0, -1.0], 0.5, nonnegative=False).tolist()
    [2.5, -0.5]
    >>> prox("tinf", tree, [1.0, 4.0], 1.0).tolist()     # child to 3, then to 2
    [1.0, 2.0]
    """
    kind, weighted = _check_penalty(penalty, alpha)
    if method not in ("auto", "heap", "pivot"):
        raise ValueError(f"unknown tinf prox method {method!r}; choose auto, heap or pivot")
    lam = float(lam)
    if not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"lam must be a finite number >= 0, got {lam}")
    alpha = float(alpha) if weighted else 1.0
    collapsed = isinstance(tree, CollapsedTree)
    if collapsed:
        _check_collapsible(penalty, kind, alpha)
    shape = np.shape(v)
    out_dtype = np.float32 if np.asarray(v).dtype == np.float32 else np.float64
    values, _ = _columns(v, tree)
    u = np.maximum(values, 0.0) if nonnegative else np.abs(values)
    if kind in ("l2", "l1"):
        weight = _depth_weights(tree.depth, alpha)[:, None]
        if kind == "l2":
            x = u / (1.0 + 2.0 * lam * weight)
        else:
            x = np.maximum(u - lam * weight, 0.0)
    else:
        if collapsed:
            radius = lam * _path_weights(tree.depth, tree.size_of, alpha)
            count = tree.size_of.astype(np.float64)
        else:
            radius = lam * _depth_weights(tree.depth, alpha)
            count = np.ones(tree.size)
        x = np.empty_like(u)
        if kind == "t2":
            _prox_t2(tree.parent, radius, u, x)
        elif method == "pivot" or (method == "auto" and _shallow(tree)):
            prox_tinf_pivot(tree.parent, count, radius, u, x)
        else:
            _prox_tinf(tree.parent, count, radius, u, x)
    if not nonnegative:
        x *= np.sign(values)
    return x.reshape(shape).astype(out_dtype, copy=False)


def _shallow(tree):
    """Whether the subtrees' sizes sum to at most PIVOT_MAX_SUBTREE_RATIO times the nodes
    (the pivot prox's work, as ``prox-speed`` reports it); cached on the tree."""
    if not hasattr(tree, "_shallow"):
        _, size = preorder(tree.parent)
        tree._shallow = bool(size.sum() <= PIVOT_MAX_SUBTREE_RATIO * max(tree.size, 1))
    return tree._shallow


# --- checks and weights --------------------------------------------------------------------------

def _check_penalty(penalty, alpha):
    """(kind, weighted) of a penalty name: kind is l2, l1, t2 or tinf."""
    if penalty not in PENALTIES:
        raise ValueError(f"unknown penalty {penalty!r}; choose one of {' '.join(PENALTIES)}")
    weighted = penalty.startswith("w")
    alpha = float(alpha)
    if not (np.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    if not weighted and alpha != 1.0:
        raise ValueError(f"alpha = {alpha} given for {penalty!r}, which has no depth weights; "
                         f"use w{penalty} or alpha = 1.0")
    return (penalty[1:] if weighted else penalty), weighted


def _check_collapsible(penalty, kind, alpha):
    if kind == "t2":
        raise ValueError(f"{penalty} does not keep non-branching paths constant: use the trie "
                         f"(CollapsedTree.trie) and expand the values")
    if kind in ("l2", "l1") and alpha != 1.0:
        raise ValueError(f"{penalty} with alpha != 1 weights each depth of a path differently: "
                         f"use the trie (CollapsedTree.trie) and expand the values")
    if kind == "tinf" and alpha > 1.0:
        raise ValueError(f"{penalty} with alpha = {alpha} > 1 can split a path's value, so the "
                         f"collapsed prox would be inexact: use the trie (CollapsedTree.trie)")


def _columns(values, tree):
    """values as a float64 (n, k) array, and whether it was a vector."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim not in (1, 2) or len(array) != tree.size:
        raise ValueError(f"expected shape ({tree.size},) or ({tree.size}, k), "
                         f"got {array.shape}")
    return (array[:, None] if array.ndim == 1 else array), array.ndim == 1


def _depth_weights(depth, alpha):
    """α^depth, float64 (n,) (1 everywhere for α = 1; 0**0 = 1)."""
    if alpha == 1.0:
        return np.ones(len(depth))
    return np.power(alpha, depth.astype(np.float64))


def _path_weights(depth, size, alpha):
    """Σ_{k < size} α^(depth + k): the summed group weights of each collapsed path."""
    if alpha == 1.0:
        return size.astype(np.float64)
    head = np.power(alpha, depth.astype(np.float64))
    return head * (1.0 - np.power(alpha, size.astype(np.float64))) / (1.0 - alpha)


# --- compiled passes -----------------------------------------------------------------------------

@numba.njit(cache=True, nogil=True)
def _subtree_reduce(parent, x, add):
    """Per node and column, the sum (add) or the max of x over its subtree; (n, k)."""
    result = x.copy()
    for i in range(len(parent) - 1, -1, -1):
        p = parent[i]
        if p >= 0:
            for c in range(x.shape[1]):
                if add:
                    result[p, c] += result[i, c]
                elif result[i, c] > result[p, c]:
                    result[p, c] = result[i, c]
    return result


@numba.njit(cache=True, nogil=True)
def _prox_t2(parent, radius, u, out):
    """Algorithm 2 on each column of u (n, k): group soft-thresholds from the leaves up.

    Upward, γ_j = u_j² + Σ_children γ_h is the squared norm of j's subtree after
    its descendants' steps; η_j = [1 − r_j/√γ_j]_+ and γ_j ← η_j² γ_j.  Downward,
    each η_j becomes the product of the η of j and its ancestors, and x = η u.
    """
    n, k = u.shape
    scale = np.zeros((n, k))  # γ on the way up, η after
    for i in range(n - 1, -1, -1):
        p = parent[i]
        r = radius[i]
        for c in range(k):
            gamma = scale[i, c] + u[i, c] * u[i, c]
            eta = 1.0 - r / np.sqrt(gamma) if gamma > r * r else 0.0
            scale[i, c] = eta
            if p >= 0:
                scale[p, c] += eta * eta * gamma
    for i in range(n):
        p = parent[i]
        for c in range(k):
            if p >= 0:
                scale[i, c] *= scale[p, c]
            out[i, c] = scale[i, c] * u[i, c]


@numba.njit(cache=True, nogil=True, inline="always")
def _merge(a, b, key, left, right, rank, stack):
    """Root of the union of two leftist max-heaps (-1 = empty)."""
    if a < 0:
        return b
    if b < 0:
        return a
    top = 0
    while a >= 0 and b >= 0:  # walk the right spines, larger root first
        if key[a] < key[b]:
            a, b = b, a
        stack[top] = a
        top += 1
        a = right[a]
    rest = a if a >= 0 else b
    while top > 0:
        top -= 1
        node = stack[top]
        right[node] = rest
        other = left[node]
        rank_left = rank[other] if other >= 0 else 0
        rank_right = rank[rest] if rest >= 0 else 0
        if rank_left < rank_right:
            left[node] = rest
            right[node] = other
            rank[node] = rank_left + 1
        else:
            rank[node] = rank_right + 1
        rest = node
    return rest


@numba.njit(cache=True, nogil=True)
def _prox_tinf(parent, count, radius, u, out):
    """Algorithm 4 on each column of u (n, k) >= 0: l1-ball residuals from the leaves up.

    ``level[j]`` is the clip level of j's group step (0: the group is zeroed;
    inf: radius 0); the result is u clipped at the running minimum of the
    levels from the root down.  ``count[j]`` is the number of trie nodes j
    stands for.
    """
    n, k = u.shape
    capacity = 2 * n + 1
    key = np.empty(capacity)
    weight = np.empty(capacity)
    left = np.empty(capacity, np.int64)
    right = np.empty(capacity, np.int64)
    rank = np.empty(capacity, np.int64)
    stack = np.empty(_MERGE_STACK, np.int64)
    heap = np.empty(n, np.int64)
    mass = np.empty(n)
    level = np.empty(n)
    for c in range(k):
        heap[:] = -1
        mass[:] = 0.0
        used = 0
        for i in range(n - 1, -1, -1):
            h = heap[i]
            m = mass[i]
            if u[i, c] > 0.0:
                key[used] = u[i, c]
                weight[used] = count[i]
                left[used] = -1
                right[used] = -1
                rank[used] = 1
                h = _merge(h, used, key, left, right, rank, stack)
                used += 1
                m += u[i, c] * count[i]
            r = radius[i]
            if r <= 0.0:
                level[i] = np.inf
            elif m <= r or h < 0:  # (an empty heap with m > 0: rounding in m)
                level[i] = 0.0
                h = -1
                m = 0.0
            else:
                total = 0.0
                number = 0.0
                while True:  # pop the largest entries until the threshold falls below
                    total += key[h] * weight[h]
                    number += weight[h]
                    h = _merge(left[h], right[h], key, left, right, rank, stack)
                    tau = (total - r) / number
                    if h < 0 or tau >= key[h]:
                        break
                tau = max(tau, 0.0)  # > 0 but for rounding in the running mass
                level[i] = tau
                key[used] = tau
                weight[used] = number
                left[used] = -1
                right[used] = -1
                rank[used] = 1
                h = _merge(h, used, key, left, right, rank, stack)
                used += 1
                m -= r
            p = parent[i]
            if p >= 0:
                heap[p] = _merge(heap[p], h, key, left, right, rank, stack)
                mass[p] += m
        for i in range(n):
            p = parent[i]
            if p >= 0 and level[p] < level[i]:
                level[i] = level[p]
            out[i, c] = min(u[i, c], level[i])
