r"""Log-linear n-gram language model with tree-structured penalties (Nelakanti et al. 2013).

The model core: training positions, the sparse non-negative parameters, exact
sparse normalisation, and the loss and its gradient (per position, or over all
positions in O(pairs)).  Fitting it is :mod:`snm_core.loglinear.optimizers`,
with the proximal operators of :mod:`snm_core.loglinear.penalties`; the model
directory, built from the count stage, is :mod:`snm_core.loglinear.directory`.

Model
-----
A position predicts a word y (every token and ``</S>``) from its history,
which starts with ``<S>`` as in :mod:`snm_core.text.features`.  Its *active nodes*
are the suffixes of the history of length 0..N-1 (N the order) that are nodes
of one suffix trie built from all training histories
(:class:`~snm_core.loglinear.contexts.ContextTree`);
suffixes never seen in training are inactive (so are all longer ones).  The
score of a word is

    s_y(x) = Σ_{j active in x} w_{j,y},        p(y|x) = exp(s_y(x)) / Z(x),

with W >= 0 and w_{j,y} a parameter only for the (node, word) *pairs* seen in
training (a position with active node j and target y); every other w_{j,y} is
0 (the paper's positivity argument: an unseen pair would only be pushed down,
and W >= 0 holds it at 0).  The outcomes are all vocabulary ids except
``<S>`` (never predicted): V - 1 words for a vocabulary of V ids.

Exact sparse normalisation (Wu & Khudanpur 2000 style)
------------------------------------------------------
Split the score into the root (empty-context, "unigram") row u_y = w_{root,y}
and the rest t_y(x) = Σ_{j active, j ≠ root} w_{j,y}.  t_y(x) is 0 except for
the words S'_x that have a pair under some active non-root node, so

    Z(x) = Σ_y exp(u_y) + Σ_{y ∈ S'_x} exp(u_y) (exp(t_y(x)) − 1),

where Zu = Σ_y exp(u_y) (words without a root pair contribute exp(0) = 1 each)
is computed once per parameter value, not per position.  The cost of a
position is the number of pairs under its non-root active nodes, never V.
(Equivalently Z(x) = (V − 1 − |S_x|) + Σ_{y ∈ S_x} exp(s_y(x)) with S_x the
words with a pair under any active node.)

Gradient of the mean negative log-likelihood over P positions, per pair:
grad_{j,y} = (1/P) Σ_{positions with j active} (p(y|x) − [y = target]).  For
the root row the sum over *all* positions is again split:
Σ_x p(y|x) = exp(u_y) Σ_x 1/Z(x) + Σ_{x : y ∈ S'_x} exp(u_y) (exp(t_y) − 1)/Z(x).

All positions at once, in O(pairs)
----------------------------------
A training position's deepest active node is its whole (clipped) history h,
and its score vector differs from its parent context's only at the words
with a pair at h.  So with S_q the score of pair q = (j, y) (w summed over q
and its ancestor pairs), Z(j) = Z(parent j) + Σ_{(j,y)} e^{S_(parent j, y)}
(e^{w_(j,y)} − 1), and the expected count of pair q over the positions below
j is A_q = e^{S_q} (D(j) − Σ_{child pairs q'} D(node q')) + Σ_{q'} A_q', with
D(j) = Σ_{h below j} n(h)/Z(h) and n(h) the positions whose deepest node is h
(their *own counts*, :func:`own_counts`).  :meth:`LogLinearModel.objective`
computes the loss, the gradient A − N and the Hessian diagonal that way, in
one pass over the pairs whatever the vocabulary and the number of positions;
:func:`fit` uses it for a batch with ``gradient="tree"``.

Parameters and the pair forest
------------------------------
Pairs are stored CSR-like by node (``ptr``, ``word``, ``weight``), nodes in
the trie's order (parents first), words ascending within a node.  The
penalties' groups are per target word: the vector (w_{j,y})_j over the nodes
j for fixed y.  A word's pairs form a subtree of the trie (if (j, y) is seen
then so is (suffix(j), y): the shorter suffix is active at the same
position).  So all words' trees form one forest over the pairs, the parent of
pair (j, y) being the pair (parent(j), y), its depth the depth of j; with the
pairs ordered by node, a parent pair always comes before its children, as
:class:`snm_core.loglinear.trees.SuffixTree` requires.  One call to
:func:`snm_core.loglinear.penalties.prox` on that forest is the prox of the penalty
summed over all words (the groups of different words are disjoint).
"""

import dataclasses

import numpy as np

from snm_core.loglinear import trees
from snm_core.loglinear.contexts import ContextTree, histories
from snm_core.loglinear.family import numba_compiler
from snm_core.text.vocab import BOS_ID

numba = numba_compiler()

@dataclasses.dataclass
class LogLinearModel:
    """Sparse non-negative weights w_{j,y} on the (node, word) pairs seen in training.

    Attributes
    ----------
    tree : ContextTree
        n nodes.
    vocab_size : int
        V ids; the outcomes are the V - 1 ids other than ``<S>``.
    ptr : ndarray of int64, shape (n + 1,)
        Pairs of node j are ``ptr[j]:ptr[j + 1]``.
    word : ndarray of int32, shape (m,)
        Word of each pair, ascending within a node.
    weight : ndarray of float64, shape (m,)
        w_{j,y} >= 0.
    pair_parent : ndarray of int64, shape (m,)
        Pair (parent(j), y) of pair (j, y), -1 for root pairs (the pair forest).
    pair_depth : ndarray of int64, shape (m,)
        Depth of the pair's node.
    """

    tree: ContextTree
    vocab_size: int
    ptr: np.ndarray
    word: np.ndarray
    weight: np.ndarray
    pair_parent: np.ndarray
    pair_depth: np.ndarray

    @classmethod
    def from_positions(cls, tree, active, target):
        """All pairs (active node, target) of the training positions, weights 0.

        Parameters
        ----------
        tree : ContextTree
        active : ndarray of int64, shape (P, N)
            From ``tree.active``.
        target : ndarray of int, shape (P,)
        """
        rows, cols = np.nonzero(active >= 0)
        return cls.from_pairs(tree, active[rows, cols], np.asarray(target, np.int64)[rows])

    @classmethod
    def from_pairs(cls, tree, node, word):
        """The pairs (node[i], word[i]) (repeats allowed), weights 0; every pair's parent
        pair must be among them."""
        V = tree.vocab_size
        keys = np.unique(np.asarray(node, np.int64) * V + np.asarray(word, np.int64))
        ptr = np.zeros(tree.size + 1, np.int64)
        np.cumsum(np.bincount(keys // V, minlength=tree.size), out=ptr[1:])
        return cls.from_arrays(tree, ptr, (keys % V).astype(np.int32), np.zeros(len(keys)))

    @classmethod
    def from_arrays(cls, tree, ptr, word, weight):
        """The model of pairs stored by node (``ptr``, ``word`` ascending within a node)
        with their weights; derives the pair forest.

        Raises
        ------
        ValueError
            If a pair's parent pair (parent node, same word) is not among the pairs.
        """
        V = tree.vocab_size
        node = _pair_nodes(ptr)
        keys = node * V + word
        parent_node = tree.parent[node]
        has_parent = parent_node >= 0
        pair_parent = np.full(len(keys), -1, np.int64)
        parent_keys = parent_node[has_parent] * V + word[has_parent]
        pair_parent[has_parent] = np.minimum(np.searchsorted(keys, parent_keys),
                                             max(len(keys) - 1, 0))
        if not (keys[pair_parent[has_parent]] == parent_keys).all():
            raise ValueError("a pair's parent pair (its parent context, the same word) is "
                             "missing")
        return cls(tree, V, ptr, word, weight, pair_parent, tree.depth[node])

    @property
    def num_pairs(self):
        """Number of parameters m."""
        return len(self.word)

    def forest(self):
        """The pair forest (one suffix tree per word) for :func:`snm_core.loglinear.penalties.prox`."""
        return trees.SuffixTree(self.pair_parent, self.pair_depth)

    @property
    def pair_node(self):
        """Node of each pair, int64 (m,)."""
        return _pair_nodes(self.ptr)

    def pair_of(self, node, word):
        """Index of pair (node, word) for each element, -1 where it is not a pair."""
        node = np.asarray(node, np.int64)
        word = np.asarray(word, np.int64)
        keys = self.pair_node * self.vocab_size + self.word
        query = node * self.vocab_size + word
        where = np.minimum(np.searchsorted(keys, query), max(len(keys) - 1, 0))
        found = (node >= 0) & (len(keys) > 0)
        found[found] = keys[where[found]] == query[found]
        return np.where(found, where, -1)

    def normalisers(self, weight=None):
        """(S, Z): each pair's score s_y(j), float64 (m,), and each node's Z(j), (n,)."""
        w = self.weight if weight is None else weight
        return _scores_and_normalisers(self.ptr, self.pair_parent, self.tree.parent,
                                       np.asarray(w, np.float64), float(self.vocab_size - 1))

    def log_prob(self, active, target, weight=None):
        """log p(target | x) of each position, float64 (P,); ``active`` is (P, N)."""
        S, Z = self.normalisers(weight)
        return _lookup_log_prob(self.ptr, self.word, self.tree.parent, S, np.log(Z),
                                deepest_nodes(active), np.asarray(target, np.int64))

    def objective(self, own, weight=None, level=1):
        """Mean NLL of the positions counted by ``own`` (see :func:`own_counts`), with its
        gradient (level >= 1) and Hessian diagonal (level 2) w.r.t. the pair weights.

        Returns
        -------
        loss : float
        grad : ndarray of float64, shape (m,), or empty (level 0)
        hess : ndarray of float64, shape (m,), or empty (level < 2)
        """
        w = self.weight if weight is None else weight
        total = max(float(own.sum()), 1.0)
        loss, grad, hess, _, _ = _tree_objective(
            self.ptr, self.pair_parent, self.tree.parent, np.asarray(w, np.float64),
            np.asarray(own, np.float64), float(self.vocab_size - 1), level)
        return loss / total, grad / total, hess / total

    def loss_grad(self, active, target, weight=None):
        """Mean negative log-likelihood and its gradient w.r.t. the pair weights.

        Returns
        -------
        loss : float
        grad : ndarray of float64, shape (m,)
        """
        w = self.weight if weight is None else weight
        logp, grad = _loss_grad(self.ptr, self.word, w, np.ascontiguousarray(active, np.int64),
                                np.asarray(target, np.int64), self.vocab_size, True)
        n = max(len(logp), 1)
        return -float(logp.sum()) / n, grad / n

    def perplexity(self, active, target):
        """exp of the mean negative log-likelihood."""
        return float(np.exp(-self.log_prob(active, target).mean()))


@numba.njit(cache=True, nogil=True)
def _loss_grad(ptr, word, weight, active, target, V, want_grad):
    """log p(target|x) per position (P,) and the summed gradient (m,) (zeros if not wanted)."""
    P, N = active.shape
    u = np.zeros(V)
    root_pair = np.full(V, -1, np.int64)  # the root pair of each word, -1 if none
    for q in range(ptr[0], ptr[1]):
        u[word[q]] = weight[q]
        root_pair[word[q]] = q
    eu = np.exp(u)
    Zu = eu.sum() - eu[BOS_ID]  # <S> is not an outcome (and has no pair)
    t = np.zeros(V)
    stamp = np.full(V, -1, np.int64)
    touched = np.empty(V, np.int64)
    logp = np.empty(P)
    grad = np.zeros(len(weight))
    inv_z_sum = 0.0
    extra = np.zeros(V)  # Σ_x exp(u_y)(exp(t_y) − 1)/Z(x) for the root row
    for p in range(P):
        ntouched = 0
        for k in range(1, N):
            j = active[p, k]
            if j < 0:
                break
            for q in range(ptr[j], ptr[j + 1]):
                y = word[q]
                if stamp[y] != p:
                    stamp[y] = p
                    t[y] = 0.0
                    touched[ntouched] = y
                    ntouched += 1
                t[y] += weight[q]
        Z = Zu
        for i in range(ntouched):
            y = touched[i]
            Z += eu[y] * np.expm1(t[y])
        y0 = target[p]
        s0 = u[y0] + (t[y0] if stamp[y0] == p else 0.0)
        logp[p] = s0 - np.log(Z)
        if want_grad:
            inv_z_sum += 1.0 / Z
            for i in range(ntouched):
                y = touched[i]
                extra[y] += eu[y] * np.expm1(t[y]) / Z
            for k in range(1, N):
                j = active[p, k]
                if j < 0:
                    break
                for q in range(ptr[j], ptr[j + 1]):
                    y = word[q]
                    grad[q] += np.exp(u[y] + t[y]) / Z
                    if y == y0:
                        grad[q] -= 1.0
            if root_pair[y0] >= 0:
                grad[root_pair[y0]] -= 1.0
    if want_grad:
        for q in range(ptr[0], ptr[1]):
            y = word[q]
            grad[q] += eu[y] * inv_z_sum + extra[y]
    return logp, grad


def deepest_nodes(active):
    """The deepest active node of each position (its longest context in the trie), (P,)."""
    active = np.asarray(active, np.int64)
    return active[np.arange(len(active)), (active >= 0).sum(axis=1) - 1]


# --- the whole training set in O(pairs) ----------------------------------------------------------

def own_counts(model, active, target):
    """How many positions have each pair as their *deepest* (node, target) pair, float64 (m,).

    A training position's deepest active node h is its whole (clipped) history,
    and (h, target) is a pair, so these counts are the N-gram counts of the
    training text and hold everything the full-batch objective needs.
    """
    pairs = model.pair_of(deepest_nodes(active), target)
    if np.any(pairs < 0):
        raise ValueError("a position's (deepest node, target) is not a pair: not training "
                         "positions of this model")
    return np.bincount(pairs, minlength=model.num_pairs).astype(np.float64)


def totals_from_own_counts(model, own):
    """The inverse of :func:`own_counts_from_totals`: each pair's N(j, y), its own count
    plus those of the pairs below it (parents come before their children)."""
    total = np.asarray(own, np.float64).copy()
    for depth in range(int(model.pair_depth.max(initial=0)), 0, -1):
        at = model.pair_depth == depth
        np.add.at(total, model.pair_parent[at], total[at])
    return total


def own_counts_from_totals(model, total):
    """Own counts from the n-gram counts N(j, y) of every pair (the count stage's C(f, w)):
    N of a pair minus N of its child pairs (the positions one word longer)."""
    own = np.asarray(total, np.float64).copy()
    has_parent = model.pair_parent >= 0
    np.subtract.at(own, model.pair_parent[has_parent], np.asarray(total, np.float64)[has_parent])
    if own.min(initial=0.0) < -1e-9:
        raise ValueError("n-gram counts are not consistent: a pair is counted less often than "
                         "the pairs one word longer")
    return np.maximum(own, 0.0)


@numba.njit(cache=True, nogil=True)
def _pair_nodes(ptr):
    node = np.empty(ptr[-1], np.int64)
    for j in range(len(ptr) - 1):
        node[ptr[j]:ptr[j + 1]] = j
    return node


@numba.njit(cache=True, nogil=True)
def _scores_and_normalisers(ptr, pair_parent, node_parent, weight, num_outcomes):
    """S (m,): s_y(j) of each pair (j, y), the sum of w over the pair and its ancestors;
    Z (n,): the normaliser of each node's context.

    Z(root) = Σ_y exp(u_y) over the outcomes, and one word longer only the words
    with a pair at the node change score:
    Z(j) = Z(parent(j)) + Σ_{(j,y)} exp(S_(j,y)) − exp(S_(parent(j),y)).
    All terms are >= 0 (W >= 0), so there is no cancellation.
    """
    n = len(ptr) - 1
    S = np.empty(len(weight))
    Z = np.empty(n)
    for j in range(n):
        z = num_outcomes if j == 0 else Z[node_parent[j]]
        for q in range(ptr[j], ptr[j + 1]):
            pq = pair_parent[q]
            base = S[pq] if pq >= 0 else 0.0
            S[q] = base + weight[q]
            z += np.exp(base) * np.expm1(weight[q])
        Z[j] = z
    return S, Z


@numba.njit(cache=True, nogil=True)
def _tree_objective(ptr, pair_parent, node_parent, weight, own, num_outcomes, level):
    """Summed NLL of the positions that ``own`` counts, and (level >= 1) its gradient,
    (level 2) the diagonal of its Hessian; O(m + n), whatever the vocabulary.

    With n(h) the positions whose deepest node is h and D(j) = Σ_{h in subtree(j)}
    n(h)/Z(h), the expected count of pair q = (j, y) is
    A_q = exp(S_q) (D(j) − Σ_{child pairs q'} D(node q')) + Σ_{child pairs q'} A_q':
    the positions below j whose deepest y-pair is q, plus those below each child
    pair.  Gradient A_q − N_q (N_q: targets y below j); Hessian diagonal
    Σ p(1 − p), the same recursion with exp(2 S_q) and 1/Z².
    """
    n, m = len(ptr) - 1, len(weight)
    S, Z = _scores_and_normalisers(ptr, pair_parent, node_parent, weight, num_outcomes)
    node_count = np.zeros(n)
    loss = 0.0
    for j in range(n):
        logz = np.log(Z[j])
        for q in range(ptr[j], ptr[j + 1]):
            if own[q] != 0.0:
                loss += own[q] * (logz - S[q])
                node_count[j] += own[q]
    grad = np.zeros(m if level >= 1 else 0)
    hess = np.zeros(m if level >= 2 else 0)
    if level == 0:
        return loss, grad, hess, S, Z
    D = node_count / Z
    D2 = D / Z
    for j in range(n - 1, 0, -1):
        D[node_parent[j]] += D[j]
        D2[node_parent[j]] += D2[j]
    rest = np.empty(m)  # D(j) minus the D of the nodes of the child pairs
    rest2 = np.empty(m)
    below = np.zeros(m)  # Σ A of the child pairs
    below2 = np.zeros(m)
    targets = own.copy()  # N_q once the child pairs are added
    for j in range(n):
        for q in range(ptr[j], ptr[j + 1]):
            rest[q] = D[j]
            rest2[q] = D2[j]
    for j in range(n - 1, -1, -1):
        for q in range(ptr[j + 1] - 1, ptr[j] - 1, -1):
            e = np.exp(S[q])
            a = e * rest[q] + below[q]
            grad[q] = a - targets[q]
            if level >= 2:
                a2 = e * e * rest2[q] + below2[q]
                hess[q] = max(a - a2, 0.0)
            pq = pair_parent[q]
            if pq >= 0:
                rest[pq] -= D[j]
                below[pq] += a
                targets[pq] += targets[q]
                if level >= 2:
                    rest2[pq] -= D2[j]
                    below2[pq] += a2
    return loss, grad, hess, S, Z


@numba.njit(cache=True, nogil=True)
def _lookup_log_prob(ptr, word, node_parent, S, log_z, deepest, target):
    """log p(target | x) of positions given their deepest active node: the score is
    S of the deepest pair (j, target) on the way up from that node, 0 if none."""
    out = np.empty(len(deepest))
    for p in range(len(deepest)):
        h = deepest[p]
        y = target[p]
        s = 0.0
        j = h
        while j >= 0:
            lo, hi = ptr[j], ptr[j + 1]
            while lo < hi:
                mid = (lo + hi) // 2
                if word[mid] < y:
                    lo = mid + 1
                else:
                    hi = mid
            if lo < ptr[j + 1] and word[lo] == y:
                s = S[lo]
                break
            j = node_parent[j]
        out[p] = s - log_z[h]
    return out


def prepare(train_batch, order, vocab_size):
    """Tree, model (W = 0) and the training positions from a training batch.

    Returns
    -------
    model : LogLinearModel
    active : ndarray of int64, shape (P, N)
    target : ndarray of int32, shape (P,)
    """
    history, target = histories(train_batch, order)
    tree = ContextTree.build(history, vocab_size)
    active = tree.active(history)
    return LogLinearModel.from_positions(tree, active, target), active, target


def positions(model, batch, order):
    """Active nodes (P, N) and targets (P,) of any batch under a trained model's trie."""
    history, target = histories(batch, order)
    return model.tree.active(history), target
