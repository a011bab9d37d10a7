r"""Text to word ids, a batch of lines at a time (pyarrow string kernels, no Python loop).

A line is one sentence; tokens are separated by whitespace.  Empty (or
whitespace-only) lines are not sentences: they are skipped and counted, as are
lines that could not be decoded (passed as ``None``).  The
marker words ``<S>`` and ``</S>`` may not appear inside a sentence; where they
do they are read as ``<UNK>`` and counted.  ``<UNK>`` in the text is ``<UNK>``.

Whitespace is what Python's ``str.split()`` splits on (``str.isspace``):
ASCII space, tab, ``\r``, ``\v``, ``\f``, the separators U+001C-U+001F,
and Unicode's spaces and breaks (U+0085, U+00A0 no-break space, U+1680,
U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).  pyarrow's
``utf8_split_whitespace`` and ``utf8_trim_whitespace`` use exactly that set
(``tests/text/test_input_text.py`` checks every code point), and so do the
vocabulary file's checks (:meth:`snm_core.text.vocab.Vocabulary.parse`).
Zero-width characters (U+200B, U+2060, U+FEFF) are not whitespace.  Words are
not Unicode-normalised: ``"e\u0301"`` (e + combining acute) and ``"\u00e9"``
are different words, in the vocabulary, the counts and scoring alike.
Lines come from :mod:`snm_core.io.textfile`: one line per ``\n``, so U+2028 or
U+0085 inside a line is whitespace, not a line end; a NUL byte makes a line
invalid there (in a string handed to :func:`tokenize` directly it is a
character of its word).
"""

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from snm_core.text.vocab import BOS_ID, EOS_ID, UNK_ID


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

    def chunks(self, max_events):
        """Split into consecutive sub-batches of at most ``max_events`` events each.

        A sentence is never split; one longer than ``max_events`` is a chunk alone.
        """
        ends = self.offsets[1:] + np.arange(1, self.num_sentences + 1)  # cumulative events
        start = 0
        while start < self.num_sentences:
            done = ends[start - 1] if start else 0
            stop = int(np.searchsorted(ends, done + max_events, side="right"))
            stop = max(stop, start + 1)
            offsets = self.offsets[start:stop + 1]
            yield SentenceBatch(self.tokens[offsets[0]:offsets[-1]], offsets - offsets[0])
            start = stop


@dataclasses.dataclass
class TokenizeStats:
    sentences: int = 0
    tokens: int = 0
    oov_tokens: int = 0
    empty_lines: int = 0
    invalid_lines: int = 0
    marker_tokens: int = 0

    def add(self, other):
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self


def split_lines(lines):
    """Split lines into words, dropping empty and undecodable lines.

    Parameters
    ----------
    lines : sequence of str (``None`` for an undecodable line) or pyarrow string array

    Returns
    -------
    words : pyarrow ListArray of str, one entry per kept line
    kept : ndarray of int64, index into ``lines`` of each kept line
    stats : TokenizeStats (sentences, tokens, empty_lines, invalid_lines)
    """
    arr = lines if isinstance(lines, pa.Array) else pa.array(lines, pa.string())
    trimmed = pc.utf8_trim_whitespace(arr)
    nonempty = pc.greater(pc.utf8_length(trimmed), 0).fill_null(False)
    kept = np.flatnonzero(nonempty.to_numpy(zero_copy_only=False))
    words = pc.utf8_split_whitespace(trimmed.filter(nonempty))
    offsets = words.offsets
    stats = TokenizeStats(sentences=len(kept),
                          tokens=offsets[len(offsets) - 1].as_py() - offsets[0].as_py(),
                          empty_lines=len(arr) - len(kept) - arr.null_count,
                          invalid_lines=arr.null_count)
    return words, kept, stats


def tokenize(lines, vocab):
    """Map lines of text to a :class:`SentenceBatch` of word ids.

    Parameters
    ----------
    lines : sequence of str or pyarrow string array, shape (n_lines,)
        ``None`` (null) marks a line that could not be decoded: skipped and
        counted as invalid.
    vocab : snm_core.text.vocab.Vocabulary

    Returns
    -------
    batch : SentenceBatch
        One sentence per non-empty line, in order.
    kept : ndarray of int64
        Index into ``lines`` of each sentence (so a caller can report line numbers).
    stats : TokenizeStats
    """
    words, kept, stats = split_lines(lines)
    ids = vocab.ids(words.flatten())
    markers = (ids == BOS_ID) | (ids == EOS_ID)
    stats.marker_tokens = int(markers.sum())
    if stats.marker_tokens:
        ids[markers] = UNK_ID
    stats.oov_tokens = int(np.count_nonzero(ids == UNK_ID)) - stats.marker_tokens
    offsets = words.offsets.to_numpy().astype(np.int64)
    offsets -= offsets[0]
    return SentenceBatch(ids, offsets), kept, stats


def count_words(lines):
    """Occurrences of each distinct word in ``lines``.

    Returns
    -------
    counts : pyarrow.Table with columns ``word`` (string), ``count`` (int64), unordered
    stats : TokenizeStats
    """
    words, _, stats = split_lines(lines)
    table = pa.table({"word": words.flatten()}).group_by("word", use_threads=False).aggregate(
        [([], "count_all")])
    return pa.table({"word": table["word"], "count": table["count_all"].cast(pa.int64())}), stats


def sum_word_counts(tables):
    """Sum word-count tables (``word``, ``count``) into one."""
    table = pa.concat_tables(tables).group_by("word", use_threads=False).aggregate(
        [("count", "sum")])
    return pa.table({"word": table["word"], "count": table["count_sum"]})
