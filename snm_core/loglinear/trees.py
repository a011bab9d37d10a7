"""The trees the log-linear family's penalties live on: a forest of suffix tries, one
node per context, parents before children (:class:`SuffixTree`), and its form with the
non-branching paths merged (:class:`CollapsedTree`, the structured-penalty paper's
suffix tree T).  :mod:`snm_core.loglinear.penalties` says what a vector over them means.
"""

import numpy as np

from snm_core.loglinear.family import numba_compiler

numba = numba_compiler()


class SuffixTree:
    """A forest of suffix tries, one node per context, parents before children.

    Parameters
    ----------
    parent : array of int, shape (n,)
        Index of each node's parent, -1 for a root; ``parent[i] < i``, so index
        order is a topological order (parents first) and reverse index order
        visits children before parents.
    depth : array of int, shape (n,)
        Context length of each node: ``depth[i] == depth[parent[i]] + 1``; a
        root may have any depth >= 0 (0 for the empty context).
    contexts : list of tuple of int, optional
        The context of each node (set by :meth:`from_contexts`).

    Attributes
    ----------
    parent, depth : ndarray of int64, shape (n,)
    contexts : list of tuple or None

    Examples
    --------
    >>> tree = SuffixTree.from_contexts([(7, 3), (5, 3)])
    >>> tree.contexts
    [(), (3,), (5, 3), (7, 3)]
    >>> tree.parent.tolist(), tree.depth.tolist()
    ([-1, 0, 1, 1], [0, 1, 2, 2])
    """

    def __init__(self, parent, depth, contexts=None):
        parent = np.asarray(parent)
        depth = np.asarray(depth)
        if parent.ndim != 1 or depth.shape != parent.shape:
            raise ValueError(f"parent and depth must be 1-d of one length, got shapes "
                             f"{parent.shape} and {depth.shape}")
        if parent.size and not (np.issubdtype(parent.dtype, np.integer)
                                and np.issubdtype(depth.dtype, np.integer)):
            raise ValueError("parent and depth must be integer arrays")
        self.parent = parent.astype(np.int64)
        self.depth = depth.astype(np.int64)
        n = len(self.parent)
        if n and not ((self.parent >= -1) & (self.parent < np.arange(n))).all():
            bad = int(np.flatnonzero((self.parent < -1) | (self.parent >= np.arange(n)))[0])
            raise ValueError(f"parent[{bad}] = {self.parent[bad]}: each parent must come "
                             f"before its child (-1 <= parent[i] < i); order nodes by depth")
        if (self.depth < 0).any():
            raise ValueError("depth must be >= 0")
        child = np.flatnonzero(self.parent >= 0)
        if (self.depth[child] != self.depth[self.parent[child]] + 1).any():
            raise ValueError("depth[i] must be depth[parent[i]] + 1 for every non-root node")
        if contexts is not None and len(contexts) != n:
            raise ValueError(f"{len(contexts)} contexts for {n} nodes")
        self.contexts = contexts
        self._index = None

    @classmethod
    def from_contexts(cls, contexts):
        """The suffix trie of some contexts: each context and all its suffixes, once.

        Parameters
        ----------
        contexts : iterable of sequences of int
            Word ids in text order (oldest first); the suffix of length k is
            the last k words.  The empty context (the root) is always present.

        Returns
        -------
        SuffixTree
            One tree, nodes ordered by depth, siblings by (parent, oldest word).
        """
        nodes = {()}
        for context in contexts:
            context = tuple(int(word) for word in context)
            for start in range(len(context)):
                suffix = context[start:]
                if suffix in nodes:  # then so are its own suffixes
                    break
                nodes.add(suffix)
        by_depth = {}
        for node in nodes:
            by_depth.setdefault(len(node), []).append(node)
        order = [()]
        index = {(): 0}
        for d in range(1, max(by_depth) + 1):
            level = sorted(by_depth.get(d, ()), key=lambda node: (index[node[1:]], node[0]))
            for node in level:
                index[node] = len(order)
                order.append(node)
        parent = np.fromiter((index[node[1:]] if node else -1 for node in order),
                             np.int64, len(order))
        depth = np.fromiter((len(node) for node in order), np.int64, len(order))
        tree = cls(parent, depth, order)
        tree._index = index
        return tree

    @classmethod
    def concatenate(cls, trees):
        """One forest from several trees (e.g. one per target word).

        Returns
        -------
        forest : SuffixTree
            Nodes of ``trees[t]`` at ``offsets[t]:offsets[t + 1]``; no contexts.
        offsets : ndarray of int64, shape (len(trees) + 1,)
        """
        sizes = [tree.size for tree in trees]
        offsets = np.zeros(len(trees) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        parent = np.concatenate([np.where(tree.parent >= 0, tree.parent + offset, -1)
                                 for tree, offset in zip(trees, offsets)] or [np.zeros(0, int)])
        depth = np.concatenate([tree.depth for tree in trees] or [np.zeros(0, int)])
        return cls(parent, depth), offsets

    @property
    def size(self):
        """Number of nodes n."""
        return len(self.parent)

    def node(self, context):
        """Index of a context's node (trees built by :meth:`from_contexts`); KeyError if absent."""
        if self._index is None:
            if self.contexts is None:
                raise ValueError("this tree has no contexts (built from arrays)")
            self._index = {context: i for i, context in enumerate(self.contexts)}
        return self._index[tuple(int(word) for word in context)]

    def children_count(self):
        """Number of children of each node, int64 (n,)."""
        return np.bincount(self.parent[self.parent >= 0], minlength=self.size).astype(np.int64)

    def collapse(self):
        """The suffix tree: every non-branching path of this trie merged into one node.

        Node i joins its parent's node when it is that parent's only child.
        """
        n = self.size
        joins = np.zeros(n, np.bool_)
        child = np.flatnonzero(self.parent >= 0)
        joins[child] = self.children_count()[self.parent[child]] == 1
        top_of = _chain_tops(self.parent, joins)
        top = np.flatnonzero(~joins)
        index = np.full(n, -1, np.int64)
        index[top] = np.arange(len(top))
        node_of = index[top_of]
        top_parent = self.parent[top]
        parent = np.where(top_parent >= 0, node_of[np.maximum(top_parent, 0)], -1)
        size = np.bincount(node_of, minlength=len(top)).astype(np.int64)
        return CollapsedTree(self, parent, self.depth[top], size, top, node_of)


class CollapsedTree:
    """A suffix trie with its non-branching paths merged (the paper's suffix tree T).

    Made by :meth:`SuffixTree.collapse`.  A node stands for a path of ``size``
    trie nodes, from ``top`` (the shallowest) down, that share one value.

    Attributes
    ----------
    trie : SuffixTree
        The uncollapsed tree (n trie nodes).
    parent : ndarray of int64, shape (m,)
        Parent node, -1 for a root; ``parent[i] < i``.
    depth : ndarray of int64, shape (m,)
        Depth of the node's top trie node.
    size : ndarray of int64, shape (m,)
        Number of trie nodes it stands for (the paper's c_x); sums to n.
    top : ndarray of int64, shape (m,)
        Its top trie node.
    node_of : ndarray of int64, shape (n,)
        The node each trie node belongs to.
    """

    def __init__(self, trie, parent, depth, size, top, node_of):
        self.trie = trie
        self.parent = parent
        self.depth = depth
        self.size_of = size
        self.top = top
        self.node_of = node_of

    @property
    def size(self):
        """Number of nodes m (at most the trie's n)."""
        return len(self.parent)

    def expand(self, values):
        """Trie vector of a collapsed vector: shape (m,) or (m, k) -> (n,) or (n, k)."""
        return np.asarray(values)[self.node_of]

    def collapse_values(self, values):
        """Collapsed vector of a trie vector, shape (n,) or (n, k) -> (m,) or (m, k).

        Raises ValueError where values differ along a path: the collapsed tree
        cannot hold them (split the node, or work on the trie).
        """
        values = np.asarray(values)
        collapsed = values[self.top]
        differ = collapsed[self.node_of] != values
        if differ.any():
            trie_node = int(np.flatnonzero(differ.reshape(len(values), -1).any(axis=1))[0])
            raise ValueError(f"trie node {trie_node} differs from the top of its path "
                             f"(trie node {self.top[self.node_of[trie_node]]}): a collapsed "
                             f"node holds one value")
        return collapsed


@numba.njit(cache=True, nogil=True)
def _chain_tops(parent, joins):
    """Top trie node of each node's non-branching path (parents come first)."""
    top = np.arange(len(parent))
    for i in range(len(parent)):
        if joins[i]:
            top[i] = top[parent[i]]
    return top
