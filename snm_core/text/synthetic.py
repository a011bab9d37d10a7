"""A deterministic synthetic corpus for tests and the demo.

Sentences follow a small grammar with local (bigram-like) structure and one
long-distance dependency that only skip-grams can see: a sentence may open with
``begin_k`` and then, after at least :data:`MIN_GAP` other words, close with
the matching ``end_k``.  A 5-gram (four context words) cannot tell which
``end_k`` comes; the skip-gram ``[begin_k skip-* ...]`` can.  The same seed
always gives the same text, on every platform (numpy's PCG64).
"""

import numpy as np

DETERMINERS = ("the", "a", "this", "every")
ADJECTIVES = tuple(f"adj{i}" for i in range(12))
NOUNS = tuple(f"noun{i}" for i in range(60))
VERBS = tuple(f"verb{i}" for i in range(40))
ADVERBS = tuple(f"adv{i}" for i in range(8))
NUM_PAIRS = 6
BEGIN = tuple(f"begin{i}" for i in range(NUM_PAIRS))
END = tuple(f"end{i}" for i in range(NUM_PAIRS))
#: Fewest words between ``begin_k`` and ``end_k``: beyond a 5-gram's reach.
MIN_GAP = 5


_ZIPF_CDF = {}


def _zipf(rng, n):
    """An index in [0, n) drawn with a Zipf(1) law (index 0 most likely)."""
    cdf = _ZIPF_CDF.get(n)
    if cdf is None:
        weights = 1.0 / np.arange(1, n + 1)
        cdf = _ZIPF_CDF[n] = np.cumsum(weights) / weights.sum()
    return min(int(np.searchsorted(cdf, rng.random(), side="right")), n - 1)


def generate(num_sentences, seed=0):
    """Generate ``num_sentences`` sentences (str, words separated by single spaces).

    Parameters
    ----------
    num_sentences : int
    seed : int, default 0

    Returns
    -------
    list of str

    Examples
    --------
    >>> generate(2, seed=1) == generate(2, seed=1)
    True
    """
    rng = np.random.default_rng(seed)
    # Fixed "semantics": each noun prefers a few verbs, each verb a few objects.
    grammar = np.random.default_rng(12345)
    noun_verbs = grammar.integers(0, len(VERBS), size=(len(NOUNS), 3))
    verb_objects = grammar.integers(0, len(NOUNS), size=(len(VERBS), 4))
    sentences = []
    for _ in range(num_sentences):
        words = []
        pair = rng.integers(NUM_PAIRS) if rng.random() < 0.4 else None
        if pair is not None:
            words.append(BEGIN[pair])
        subject = _zipf(rng, len(NOUNS))
        words += _noun_phrase(rng, subject)
        verb = int(noun_verbs[subject, _zipf(rng, 3)])
        words.append(VERBS[verb])
        obj = int(verb_objects[verb, _zipf(rng, 4)])
        words += _noun_phrase(rng, obj)
        if rng.random() < 0.3:
            words.append(ADVERBS[_zipf(rng, len(ADVERBS))])
        if pair is not None:
            while len(words) - 1 < MIN_GAP:
                words.append(ADVERBS[int(rng.integers(len(ADVERBS)))])
            words.append(END[pair])
        sentences.append(" ".join(words))
    return sentences


def _noun_phrase(rng, noun):
    words = [DETERMINERS[_zipf(rng, len(DETERMINERS))]]
    for _ in range(int(rng.integers(0, 3))):
        words.append(ADJECTIVES[_zipf(rng, len(ADJECTIVES))])
    words.append(NOUNS[noun])
    return words


def write_corpus(directory, num_train=20000, num_dev=1000, num_test=1000, seed=0):
    """Write ``train.txt``, ``dev.txt`` and ``test.txt`` under ``directory``.

    The three parts use different seeds derived from ``seed``, so they share a
    distribution but not sentences.  Returns the three paths.
    """
    from snm_core.io import storage

    storage.makedirs(directory)
    paths = []
    for offset, (name, n) in enumerate((("train", num_train), ("dev", num_dev),
                                        ("test", num_test))):
        path = storage.join(directory, f"{name}.txt")
        storage.write_text("".join(s + "\n" for s in generate(n, seed=seed * 3 + offset)), path)
        paths.append(path)
    return paths
