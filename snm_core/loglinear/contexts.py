"""The contexts of the log-linear family's training positions: each predicted word's
history (:func:`histories`) and the suffix trie of all training histories, whose nodes
are a position's active contexts (:class:`ContextTree`).
"""

import dataclasses

import numpy as np

from snm_core.text.vocab import BOS_ID, EOS_ID


def histories(batch, order):
    """The histories and targets of every predicted word of a batch of sentences.

    Parameters
    ----------
    batch : snm_core.text.tokenize.SentenceBatch
        S sentences, T tokens.
    order : int >= 1
        N: contexts of up to N - 1 words.

    Returns
    -------
    history : ndarray of int32, shape (P, N - 1), P = T + S
        ``history[p, k - 1]`` is the word k positions before the target
        (``<S>`` included), -1 beyond the start of the sentence.
    target : ndarray of int32, shape (P,)
        The predicted word: each token, and ``</S>`` after each sentence.
    """
    if order < 1:
        raise ValueError(f"order must be >= 1, got {order}")
    offsets = np.asarray(batch.offsets, np.int64)
    tokens = np.asarray(batch.tokens, np.int32)
    num_sentences = len(offsets) - 1
    num_positions = len(tokens) + num_sentences
    starts = offsets[:-1] + np.arange(num_sentences)  # of <S> in the padded sequence
    sequence = np.empty(num_positions, np.int32)  # <S> w1 .. wn per sentence
    sequence[starts] = BOS_ID
    is_token = np.ones(num_positions, np.bool_)
    is_token[starts] = False
    sequence[is_token] = tokens
    target = np.empty(num_positions, np.int32)
    target[:-1] = sequence[1:]
    ends = starts + (offsets[1:] - offsets[:-1])  # last slot of each sentence
    target[ends] = EOS_ID
    local = np.arange(num_positions) - np.repeat(starts, np.diff(offsets) + 1)
    history = np.full((num_positions, order - 1), -1, np.int32)
    for k in range(1, order):
        ok = local >= k - 1
        index = np.flatnonzero(ok)
        history[index, k - 1] = sequence[index - (k - 1)]
    return history, target


@dataclasses.dataclass
class ContextTree:
    """The suffix trie of the training histories, as arrays (node 0 is the empty context).

    Attributes
    ----------
    parent : ndarray of int64, shape (n,)
        Parent node (the context without its oldest word), -1 for the root;
        nodes ordered by depth, so ``parent[i] < i``.
    depth : ndarray of int64, shape (n,)
        Context length.
    word : ndarray of int64, shape (n,)
        Oldest word of the context (-1 for the root).
    keys : ndarray of int64, shape (n - 1,)
        ``parent * vocab_size + word`` of nodes 1..n-1, ascending (node i has
        key ``keys[i - 1]``): the lookup of a child.
    vocab_size : int
    """

    parent: np.ndarray
    depth: np.ndarray
    word: np.ndarray
    keys: np.ndarray
    vocab_size: int

    @classmethod
    def build(cls, history, vocab_size):
        """The trie of all suffixes of some histories (shape (P, N - 1), -1 padded)."""
        history = np.asarray(history, np.int64)
        parents, depths, words, keys = [np.array([-1])], [np.array([0])], [np.array([-1])], []
        node = np.zeros(len(history), np.int64)  # current node of each history
        alive = np.ones(len(history), np.bool_)
        count = 1
        for k in range(1, history.shape[1] + 1):
            alive &= history[:, k - 1] >= 0
            index = np.flatnonzero(alive)
            key = node[index] * vocab_size + history[index, k - 1]
            unique, inverse = np.unique(key, return_inverse=True)
            node[index] = count + inverse
            parents.append(unique // vocab_size)
            words.append(unique % vocab_size)
            depths.append(np.full(len(unique), k))
            keys.append(unique)
            count += len(unique)
        return cls(np.concatenate(parents), np.concatenate(depths), np.concatenate(words),
                   np.concatenate(keys) if keys else np.zeros(0, np.int64), int(vocab_size))

    @property
    def size(self):
        """Number of nodes n."""
        return len(self.parent)

    def active(self, history):
        """Active nodes of each history, shape (P, N) int64: column k the suffix of length k.

        Column 0 is the root (0); -1 where the suffix is not in the trie (or
        the history is shorter), and then for all longer suffixes.  Histories
        longer than the trie's depth use only their first columns.
        """
        history = np.asarray(history, np.int64)
        result = np.full((len(history), history.shape[1] + 1), -1, np.int64)
        result[:, 0] = 0
        node = np.zeros(len(history), np.int64)
        alive = np.ones(len(history), np.bool_)
        for k in range(1, history.shape[1] + 1):
            alive &= history[:, k - 1] >= 0
            index = np.flatnonzero(alive)
            key = node[index] * self.vocab_size + history[index, k - 1]
            where = np.searchsorted(self.keys, key)
            found = where < len(self.keys)
            found[found] = self.keys[where[found]] == key[found]
            alive[index[~found]] = False
            node[index[found]] = where[found] + 1
            result[index[found], k] = where[found] + 1
        return result


# --- the model -----------------------------------------------------------------------------------
