"""The plain l_inf^T prox: the paper's Algorithm 3, one random-pivot l1 projection per group.

Nelakanti et al. 2013 (``../shared/papers/structured-penalties-loglinear-lm.md``)
compute prox_{λΩ_T∞} as residuals of l1-ball projections from the leaves up
(Algorithm 3): in post-order, each node's whole subtree, as left by its
descendants' steps, is projected on the l1 ball of its radius and replaced by
the residual.  On u >= 0 the residual of a group whose mass exceeds the radius
r is min(u, τ), τ the level with Σ c_i (u_i − τ)_+ = r; it is zero otherwise.
τ is found by random pivoting (Bruckner 1984; Duchi et al. 2008, their
Figure 2): pick a candidate entry ρ at random; if the entries >= u_ρ, with
those already known to be above τ, hold less than r above u_ρ, then τ < u_ρ
and they are all above it, else τ >= u_ρ and everything below u_ρ (and ρ) is
not.  Expected time linear in the subtree, so O(Σ subtree sizes) = O(n · depth)
a column.

This is the baseline that the k-best heap (:func:`snm_core.loglinear.penalties._prox_tinf`,
Algorithm 4, O(n log n)) replaces; :func:`snm_core.loglinear.penalties.prox` runs it
with ``method="pivot"``, and ``benchmarks/loglinear.py prox-speed`` times the two.
The pivots come from a fixed-seed generator, restarted for each column, so the
result, including its rounding, does not vary from run to run nor with the
other columns.
"""

import numpy as np

from snm_core.loglinear.family import numba_compiler

numba = numba_compiler()

#: Seed of the pivot generator (any fixed value: the result does not depend on it
#: beyond rounding).
_SEED = 0x2545F4914F6CDD1D


@numba.njit(cache=True, nogil=True)
def preorder(parent):
    """Depth-first pre-order position of each node (parents before children).

    Each subtree then occupies consecutive positions: node i's at
    ``pos[i] : pos[i] + size[i]``.  Returns (pos, size), int64 (n,) each.
    """
    n = len(parent)
    size = np.ones(n, np.int64)
    for i in range(n - 1, -1, -1):
        if parent[i] >= 0:
            size[parent[i]] += size[i]
    pos = np.empty(n, np.int64)
    free = np.empty(n, np.int64)  # next unassigned position inside each subtree
    roots = 0
    for i in range(n):
        p = parent[i]
        if p < 0:
            pos[i] = roots
            roots += size[i]
        else:
            pos[i] = free[p]
            free[p] += size[i]
        free[i] = pos[i] + 1
    return pos, size


@numba.njit(cache=True, nogil=True)
def _l1_level(value, count, length, radius, state):
    """τ > 0 with Σ count_i (value_i − τ)_+ = radius over ``value[:length]``, whose
    mass exceeds ``radius`` > 0, by random pivoting; reorders both arrays.

    Returns (τ, the generator's new state).
    """
    above_sum = 0.0  # Σ count·value of the entries known to be above τ
    above_count = 0.0
    lo = 0
    hi = length
    while lo < hi:
        state = state * 6364136223846793005 + 1442695040888963407
        j = lo + ((state >> 33) & 0x7FFFFFFF) % (hi - lo)
        pivot = value[j]
        # ρ to lo, then the entries >= pivot to lo + 1 .. split - 1
        value[j], value[lo] = value[lo], value[j]
        count[j], count[lo] = count[lo], count[j]
        split = lo + 1
        for t in range(lo + 1, hi):
            if value[t] >= pivot:
                value[t], value[split] = value[split], value[t]
                count[t], count[split] = count[split], count[t]
                split += 1
        big_sum = 0.0
        big_count = 0.0
        for t in range(lo, split):
            big_sum += value[t] * count[t]
            big_count += count[t]
        if above_sum + big_sum - (above_count + big_count) * pivot < radius:
            above_sum += big_sum  # τ < pivot: all of them are above it
            above_count += big_count
            lo = split
        else:  # τ >= pivot: ρ and everything below it are not above τ
            hi = split
            lo += 1
    if above_count <= 0.0:  # unreachable: the largest entry always ends above τ
        return 0.0, state
    return max((above_sum - radius) / above_count, 0.0), state


@numba.njit(cache=True, nogil=True)
def prox_tinf_pivot(parent, count, radius, u, out):
    """Algorithm 3 on each column of u (n, k) >= 0; arguments as
    :func:`snm_core.loglinear.penalties._prox_tinf` (``count[j]``: the trie nodes j
    stands for, ``radius[j]``: λ times its group weight)."""
    n, k = u.shape
    pos, size = preorder(parent)
    rad = np.empty(n)
    cnt = np.empty(n)
    for i in range(n):
        rad[pos[i]] = radius[i]
        cnt[pos[i]] = count[i]
    w = np.empty(n)  # the current vector, in pre-order
    end = np.empty(n, np.int64)
    for i in range(n):
        end[pos[i]] = pos[i] + size[i]
    value = np.empty(n)  # scratch for one group's positive entries
    weight = np.empty(n)
    for c in range(k):
        state = np.int64(_SEED)  # each column from the seed: columns are independent
        for i in range(n):
            w[pos[i]] = u[i, c]
        for j in range(n - 1, -1, -1):  # reverse pre-order: descendants first
            r = rad[j]
            if r <= 0.0:
                continue
            length = 0
            mass = 0.0
            for t in range(j, end[j]):
                if w[t] > 0.0:
                    value[length] = w[t]
                    weight[length] = cnt[t]
                    mass += w[t] * cnt[t]
                    length += 1
            if length == 0:
                continue
            if mass <= r:
                for t in range(j, end[j]):
                    w[t] = 0.0
                continue
            tau, state = _l1_level(value, weight, length, r, state)
            for t in range(j, end[j]):
                if w[t] > tau:
                    w[t] = tau
        for i in range(n):
            out[i, c] = w[pos[i]]
