"""The Python API: any model directory, loaded for scoring (as ``kenlm.Model`` is).

:func:`load` returns the model's scorer, whatever its family (SNM, log-linear),
layout (hashed, trie, small, or a scoring directory of ``snm compact --out``)
or place (a local path or a URL such as ``s3://...``).  Every scorer has:

==============================  ======================================================
``score(sentence, bos, eos)``   log10 probability of a sentence (``</S>`` included)
``full_scores(sentence)``       per word: (log10 probability, n-gram length, OOV)
``perplexity(sentence)``        10 ** (-score / (words + 1))
``begin_state()``               the state after ``<S>`` (``null_state()``: no context)
``score_word(state, word)``     (log10 P(word | state), the state after it)
``end_score(state)``            log10 P(``</S>`` | state)
``score_words(states, words)``  a beam step: many states, one word each, one call
``score_lines(lines)``          batches of whole lines (what ``snm eval`` uses)
==============================  ======================================================

States (:class:`State`) are hashable and equal when the model cannot tell the
histories apart, so a beam search may merge hypotheses with equal states.

Examples
--------
>>> import snm                                                  # doctest: +SKIP
>>> model = snm.load("runs/kernel/model")                       # doctest: +SKIP
>>> model.score("the kernel is ready")                          # doctest: +SKIP
-9.93...
>>> state = model.begin_state()                                 # doctest: +SKIP
>>> log10p, state = model.score_word(state, "the")              # doctest: +SKIP
"""

from snm.evaluation import load_scorer
from snm_core.scoring.states import State, StateBatch

__all__ = ["load", "State", "StateBatch"]


def load(path):
    """Load a model directory for scoring.

    Parameters
    ----------
    path : str
        A model directory (``snm apply --out``, ``snm train --out``'s ``model/`` or
        ``loglinear/``, ``snm prune --out``, ``snm compact --out``), local or a URL.
        A remote model's scoring arrays are copied once into ``$SNM_CACHE``.

    Returns
    -------
    model
        :class:`snm_core.scoring.layouts.hashed.Model`,
        :class:`snm_core.scoring.layouts.trie.TrieModel`,
        :class:`snm_core.scoring.layouts.small.SmallModel` or
        :class:`snm_core.loglinear.directory.LogLinearScorer`; each has the methods
        of :class:`snm_core.scoring.states.StateScoring` (module docstring).

    Raises
    ------
    snm_core.io.errors.SnmInputError
        The directory is not a model, or is damaged (one line naming the file).
    """
    return load_scorer(path)
