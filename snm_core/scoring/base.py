"""What scoring shares across model families and layouts.

P(w | e) = sum_{f in F(e)} M_fw / sum_{f in F(e)} M_f*, over the event's
features present in the model; the unadjusted model (theta = 0) has M_f* = 1
and M_fw = c(w|f).  Words of the vocabulary that training never saw are read
as ``<UNK>``, in contexts and as targets (as KenLM does with words outside its
ARPA file).

A scorer (the hashed :class:`snm_core.scoring.layouts.hashed.Model`, the trie
layouts' models, the log-linear scorer) implements ``score_batch`` and
inherits :class:`LineScoring`: text lines in, per-event :class:`Scores` and
KenLM-style perplexity reports out.
"""

import dataclasses
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from snm_core.io.progress import Progress
from snm_core.text.tokenize import TokenizeStats, tokenize
from snm_core.text.vocab import UNK_ID

#: Lines scored per batch: big enough to amortise numpy's per-call cost.
SCORE_BATCH_LINES = 2048


@dataclasses.dataclass
class Scores:
    """Per-event probabilities of a batch, adjusted and unadjusted (theta = 0)."""

    target: np.ndarray  # int32 (n_events,)
    sentence: np.ndarray  # int32 (n_events,)
    prob: np.ndarray  # float64 (n_events,)
    prob_unadjusted: np.ndarray = None  # float64 (n_events,); None for a log-linear model


class LineScoring:
    """Scoring of text lines for a model with ``vocab`` and ``score_batch(batch, unadjusted)``
    returning :class:`Scores`; ``REPORTS`` names its models (their ``Scores`` fields)."""

    #: Report name -> the :class:`Scores` field holding that model's probabilities.
    REPORTS = {"adjusted": "prob", "unadjusted": "prob_unadjusted"}

    def score_lines(self, lines, batch_lines=SCORE_BATCH_LINES, threads=None, unadjusted=True,
                    stats=None):
        """Yield ``(first line, kept line offsets, Scores)`` per batch of lines, in order.

        Batches are scored on ``threads`` threads (default: one per core); numpy
        releases the GIL in the lookups, so they run in parallel.  ``stats``, a
        :class:`snm_core.text.tokenize.TokenizeStats`, gains each batch's counts (the empty
        and undecodable lines skipped among them).
        """
        def score(start):
            batch, kept, batch_stats = tokenize(lines[start:start + batch_lines], self.vocab)
            return start, kept, self.score_batch(batch, unadjusted), batch_stats

        def counted(results):
            for start, kept, scores, batch_stats in results:
                if stats is not None:
                    stats.add(batch_stats)
                yield start, kept, scores

        starts = range(0, len(lines), batch_lines)
        threads = threads or os.cpu_count() or 1
        if threads == 1 or len(starts) == 1:
            yield from counted(map(score, starts))
            return
        with ThreadPoolExecutor(threads) as pool:
            yield from counted(pool.map(score, starts))

    def evaluate_lines(self, lines, threads=None):
        """KenLM-style perplexity report of each of ``REPORTS``, with the lines skipped
        (``invalid_lines``: not valid UTF-8 or holding a NUL byte; ``empty_lines``)."""
        totals = {name: PerplexityTotals() for name in self.REPORTS}
        stats = TokenizeStats()
        with Progress("eval", total=len(lines), unit="line") as progress:
            for start, kept, scores in self.score_lines(lines, threads=threads, stats=stats):
                oov = scores.target == UNK_ID
                for name, field in self.REPORTS.items():
                    totals[name].add(getattr(scores, field), oov)
                progress.update(min(SCORE_BATCH_LINES, len(lines) - start))
        return {name: {**t.report(stats.sentences), "invalid_lines": stats.invalid_lines,
                       "empty_lines": stats.empty_lines} for name, t in totals.items()}


def suffix_closed(manifest):
    """Whether every n-gram feature and link of the model has its suffix one word shorter
    in the model too: true of counts, and of pruning by back-off relative entropy (which
    keeps the ARPA closure); not of pruning by mass or count."""
    pruning = manifest.get("pruning")
    if not pruning:
        return True
    # Models pruned before the key was written: only the back-off criterion's stay closed.
    return pruning.get("suffix_closed", pruning["criterion"].startswith("relative entropy"))


def ratios(m_star_sum, link_m_sum, link_c_sum, n_features, unadjusted=True):
    """(adjusted, unadjusted or None) P(target) per event from its per-event sums."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return link_m_sum / m_star_sum, link_c_sum / n_features if unadjusted else None


class PerplexityTotals:
    """Log-probability sums of scored words, and the KenLM-style report they give."""

    def __init__(self):
        self.logprob = self.logprob_in_vocab = 0.0
        self.words = self.oov = self.zero = self.zero_in_vocab = 0

    def add(self, prob, oov):
        with np.errstate(divide="ignore"):
            logp = np.log(prob)
        finite = np.isfinite(logp)
        self.words += len(prob)
        self.oov += int(oov.sum())
        self.zero += int((~finite).sum())
        self.zero_in_vocab += int((~finite & ~oov).sum())
        self.logprob += float(logp[finite].sum())
        self.logprob_in_vocab += float(logp[finite & ~oov].sum())

    def report(self, sentences):
        def ppl(logprob, n, zero):
            if zero:
                return float("inf")
            return math.exp(-logprob / n) if n else float("nan")
        return {
            "perplexity": ppl(self.logprob, self.words, self.zero),
            "perplexity_excluding_oov": ppl(self.logprob_in_vocab, self.words - self.oov,
                                            self.zero_in_vocab),
            "log10_prob": self.logprob / math.log(10),
            "oov": self.oov,
            "words": self.words,
            "sentences": sentences,
            "zero_probability": self.zero,
        }
