"""Text to word ids, a batch of lines at a time (pyarrow string kernels, no Python loop).

A line is one sentence; tokens are separated by whitespace.  Empty (or
whitespace-only) lines are not sentences: they are skipped and counted.  The
marker words ``<S>`` and ``</S>`` may not appear inside a sentence; where they
do they are read as ``<UNK>`` and counted.  ``<UNK>`` in the text is ``<UNK>``.
"""

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from snm_core.vocab import BOS_ID, EOS_ID, UNK_ID


@dataclasses.dataclass
class SentenceBatch:
    """Sentences as a flat array of word ids plus offsets (Arrow list layout).

    Attributes
    ----------
    tokens : ndarray of int32, shape (n_tokens,)
        Word ids of all sentences back to back, without markers.
    offsets : ndarray of int64, shape (n_sentences + 1,)
        Sentence i is ``tokens[offsets[i]:offsets[i + 1]]``; ``offsets[0] == 0``.
    """

    tokens: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_lists(cls, sentences):
        """Build from a list of id sequences (tests and small inputs)."""
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = (np.concatenate([np.asarray(s, dtype=np.int32) for s in sentences])
                  if sentences else np.zeros(0, np.int32))
        return cls(tokens.astype(np.int32), offsets)

    @property
    def num_sentences(self):
        return len(self.offsets) - 1

    @property
    def num_tokens(self):
        return len(self.tokens)

    @property
    def num_events(self):
        """Predicted words: every token plus one ``</S>`` per sentence."""
        return self.num_tokens + self.num_sentences

    def sentence(self, i):
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]


@dataclasses.dataclass
class TokenizeStats:
    sentences: int = 0
    tokens: int = 0
    oov_tokens: int = 0
    empty_lines: int = 0
    marker_tokens: int = 0

    def add(self, other):
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self


def tokenize(lines, vocab):
    """Map lines of text to a :class:`SentenceBatch` of word ids.

    Parameters
    ----------
    lines : sequence of str or pyarrow string array, shape (n_lines,)
    vocab : snm_core.vocab.Vocabulary

    Returns
    -------
    batch : SentenceBatch
        One sentence per non-empty line, in order.
    kept : ndarray of int64
        Index into ``lines`` of each sentence (so a caller can report line numbers).
    stats : TokenizeStats
    """
    arr = lines if isinstance(lines, pa.Array) else pa.array(lines, pa.string())
    trimmed = pc.utf8_trim_whitespace(arr)
    nonempty = pc.greater(pc.utf8_length(trimmed), 0).fill_null(False)
    kept = np.flatnonzero(nonempty.to_numpy(zero_copy_only=False))
    words = pc.utf8_split_whitespace(trimmed.filter(nonempty))
    flat = words.flatten()
    ids = vocab.ids(flat)
    markers = (ids == BOS_ID) | (ids == EOS_ID)
    n_markers = int(markers.sum())
    if n_markers:
        ids[markers] = UNK_ID
    offsets = words.offsets.to_numpy().astype(np.int64)
    offsets -= offsets[0]
    stats = TokenizeStats(
        sentences=len(kept),
        tokens=len(ids),
        oov_tokens=int(np.count_nonzero(ids == UNK_ID)) - n_markers,
        empty_lines=len(arr) - len(kept),
        marker_tokens=n_markers,
    )
    return SentenceBatch(ids, offsets), kept, stats
