"""Vocabulary: words <-> integer ids, with the sentence markers and <UNK>.

Ids 0, 1, 2 are always ``<S>``, ``</S>`` and ``<UNK>``; the words follow in
file order (for a built vocabulary: most frequent first, ties alphabetical).
``<S>`` starts every context and is never predicted; ``</S>`` is predicted at
the end of every sentence; a word outside the vocabulary becomes ``<UNK>``,
which is predicted like any other word.

File format (``vocab.txt``): one word a line, UTF-8.  The markers may be listed
(a saved vocabulary lists them first) or left out (as in the shared corpora's
``vocab.txt``); a duplicate word, an empty line or a word with whitespace is an
error naming the line.
"""

import re

import pyarrow as pa

from snm_core.io.errors import SnmInputError
from snm_core.text.word_table import WordTable

_SPACE_BUT_NEWLINE = re.compile(r"[^\S\n]")

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
BOS_ID, EOS_ID, UNK_ID = 0, 1, 2
SPECIALS = (BOS, EOS, UNK)


class VocabularyError(SnmInputError):
    """A vocabulary file or specification that cannot be used."""


class Vocabulary:
    """An immutable word list with vectorised lookup.

    Parameters
    ----------
    words : sequence of str
        Words without the three markers, in id order (ids start at 3).

    Examples
    --------
    >>> v = Vocabulary(["the", "cat"])
    >>> v.ids(["the", "dog", "</S>"]).tolist()
    [3, 2, 1]
    >>> len(v)
    5
    """

    def __init__(self, words):
        words = list(words)
        self._words = list(SPECIALS) + words
        self._index = {w: i for i, w in enumerate(self._words)}
        if len(self._index) != len(self._words):
            seen = set()
            dup = next(w for w in self._words if w in seen or seen.add(w))
            raise VocabularyError(f"word {dup!r} occurs twice in the vocabulary")
        self._arrow = pa.array(self._words, pa.string())
        self._table = None  # WordTable, built on first lookup (see ids)

    def __len__(self):
        return len(self._words)

    def __eq__(self, other):
        return isinstance(other, Vocabulary) and self._words == other._words

    @property
    def words(self):
        """All words in id order, markers first (a new list)."""
        return list(self._words)

    def word(self, word_id):
        return self._words[word_id]

    def id(self, word):
        """Id of ``word``; ``<UNK>``'s id for a word outside the vocabulary."""
        return self._index.get(word, UNK_ID)

    def ids(self, words):
        """Ids of many words (``pyarrow`` string array or sequence of str) as int32: a
        hash table of the vocabulary (:class:`~snm_core.text.word_table.WordTable`),
        built on the first call."""
        arr = (words if isinstance(words, (pa.Array, pa.ChunkedArray))
               else pa.array(words, pa.string()))
        if self._table is None:
            self._table = WordTable(self._arrow)
        return self._table.ids(arr, UNK_ID)

    def fingerprint(self):
        """A stable hex digest of the word list: stages check they share a vocabulary."""
        import hashlib
        digest = hashlib.sha256("\n".join(self._words).encode("utf-8"))
        return digest.hexdigest()[:16]

    def save(self, path):
        """Write one word a line, markers first; the file loads back to an equal vocabulary."""
        from snm_core.io import storage
        storage.write_text("".join(w + "\n" for w in self._words), path)

    @classmethod
    def load(cls, path):
        """Read a one-word-a-line file (see the module docstring for the rules)."""
        from snm_core.io import storage
        try:
            data = storage.read_bytes(path)
        except FileNotFoundError:
            raise VocabularyError(f"{path}: vocabulary file not found") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise VocabularyError(
                f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        return cls.parse(text, path)

    @classmethod
    def parse(cls, text, source="<string>"):
        """Vocabulary from the text of a vocabulary file; errors name ``source`` and the line."""
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        # A well-formed file (no whitespace but the newlines, no empty line, no
        # repeat) is checked in a few passes over the whole text; a bad one
        # goes through the loop below, which names the offending line.
        if (_SPACE_BUT_NEWLINE.search(text) is None and "" not in lines
                and len(set(lines)) == len(lines)):
            specials = set(SPECIALS)
            return cls([w for w in lines if w not in specials])
        words, first_line = [], {}
        for lineno, word in enumerate(lines, start=1):
            word = word.rstrip("\r")
            if not word.strip():
                raise VocabularyError(f"{source}, line {lineno}: empty line; remove it")
            if len(word.split()) != 1 or word != word.strip():
                raise VocabularyError(f"{source}, line {lineno}: {word!r} contains whitespace; "
                                      "a vocabulary has one word a line")
            if word in first_line:
                raise VocabularyError(f"{source}, line {lineno}: {word!r} repeats line "
                                      f"{first_line[word]}")
            first_line[word] = lineno
            if word not in SPECIALS:
                words.append(word)
        return cls(words)

    @classmethod
    def from_counts(cls, words, counts, min_count=1, max_size=None):
        """Vocabulary of the most frequent words.

        Parameters
        ----------
        words : sequence of str, shape (n,)
        counts : array of int, shape (n,)
        min_count : int, default 1
            Keep words seen at least this often.
        max_size : int or None
            Keep at most this many words (markers not included).

        Words are ordered by count, descending, then alphabetically, so the same
        counts always give the same ids.  The markers are skipped if present.
        """
        import pyarrow.compute as pc  # loaded when used, not by every process
        if min_count < 1:
            raise VocabularyError(f"min_count must be at least 1, got {min_count}")
        if max_size is not None and max_size < 0:
            raise VocabularyError(f"max_size must not be negative, got {max_size}")
        table = pa.table({"word": pa.array(words, pa.string()),
                          "count": pa.array(counts, pa.int64())})
        table = table.filter(pc.and_(pc.greater_equal(table["count"], min_count),
                                     pc.invert(pc.is_in(table["word"], pa.array(SPECIALS)))))
        table = table.sort_by([("count", "descending"), ("word", "ascending")])
        if max_size is not None:
            table = table.slice(0, max_size)
        return cls(table["word"].to_pylist())
