r"""``snm rescore``: n-best rescoring with any model (SRILM's ``-nbest``, Kaldi's lattice
rescoring on n-best lists).

Input: one hypothesis a line, three tab-separated fields (a ``.tsv``, plain or
compressed, or ``-`` for standard input)::

    UTTERANCE_ID <TAB> SCORE <TAB> HYPOTHESIS

``SCORE`` is the decoder's score without a language model (acoustic or
translation model), a log-probability in natural log (higher is better);
``HYPOTHESIS`` the words, separated by spaces (may be empty).  Kaldi's n-best
text (``utt-N word ...``, from ``nbest-to-linear`` and ``int2sym.pl``) and its
acoustic costs (``utt-N cost``) become this with the id's ``-N`` dropped and the
cost negated::

    paste <(cut -d' ' -f1 text | sed 's/-[0-9]*$//') <(awk '{print -$2}' ac_cost) \
          <(sed 's/^[^ ]* *//' text) > nbest.tsv

Each hypothesis gets

    total = SCORE + lm_weight * ln P_LM(HYPOTHESIS </S>) + word_penalty * words

(``ln P_LM`` natural log, ``</S>`` included, as pyctcdecode's ``alpha`` and ``beta``;
a negative ``word_penalty`` penalises long hypotheses).  ``--unk_penalty P`` is an
OOV penalty, as in SRILM: each word outside the model's vocabulary (one it reads as
``<UNK>``: an OOV of ``snm query``) gets log10 probability P in ``P_LM`` in place of
the model's ``<UNK>`` probability; the words after it are scored as without it,
with ``<UNK>`` in their context.  Output: the best hypothesis
of each utterance (``--best``, default standard output: ``UTTERANCE_ID <TAB>
HYPOTHESIS``, utterances in input order; ties go to the earlier line), and with
``--out`` the whole list rescored, each utterance's hypotheses best first::

    UTTERANCE_ID <TAB> RANK <TAB> TOTAL <TAB> SCORE <TAB> LM <TAB> WORDS <TAB> HYPOTHESIS
"""

import contextlib
import io
import math
import sys

import numpy as np

from snm.commands import arguments
from snm.evaluation import load_scorer, model_help
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.io.textfile import read_lines
from snm_core.text.vocab import UNK_ID

LN_10 = math.log(10.0)


def read_nbest(path):
    """``(utterance ids, scores float64, hypotheses)`` of an n-best file; a malformed line
    is an error naming it."""
    utterances, scores, hypotheses = [], [], []
    for number, line in enumerate(read_lines(path), 1):
        if line is None:
            raise SnmInputError(f"{path}, line {number}: not valid UTF-8 (or a NUL byte)")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3 or not fields[0].strip():
            raise SnmInputError(f"{path}, line {number}: expected 'UTTERANCE_ID<TAB>SCORE<TAB>"
                                f"HYPOTHESIS' (3 tab-separated fields), found {len(fields)}")
        try:
            score = float(fields[1])
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise SnmInputError(f"{path}, line {number}: score {fields[1]!r} is not a finite "
                                "number")
        utterances.append(fields[0].strip())
        scores.append(score)
        hypotheses.append(fields[2].strip())
    return utterances, np.array(scores, np.float64), hypotheses


def lm_log_probs(model, hypotheses, unk_penalty=None):
    """Natural-log probability of each hypothesis (``</S>`` included), in batches.

    Parameters
    ----------
    model : StateScoring
        Any scorer (:func:`snm.evaluation.load_scorer`).
    hypotheses : list of str
        Words separated by spaces; may be empty.
    unk_penalty : float, optional
        log10 probability given to each word the model reads as ``<UNK>``, in place of
        the model's (SRILM's OOV penalty); None: the model's.

    Returns
    -------
    numpy.ndarray
        float64, one a hypothesis.
    """
    result = np.full(len(hypotheses), np.nan)
    for start, kept, scores in model.score_lines(hypotheses):
        with np.errstate(divide="ignore"):
            log_prob = np.log(scores.prob)
        if unk_penalty is not None:
            log_prob = np.where(scores.target == UNK_ID, unk_penalty * LN_10, log_prob)
        result[start + kept] = np.bincount(scores.sentence, weights=log_prob,
                                           minlength=len(kept))
    # The line scorer skips empty lines: an empty hypothesis is </S> alone.
    result[np.isnan(result)] = model.end_score(model.begin_state()) * LN_10
    return result


def rescore(utterances, scores, hypotheses, lm, lm_weight, word_penalty):
    """``(order, totals, words)``: line indices grouped by utterance (in order of first
    appearance), best total first (stable), and each line's total and word count."""
    words = np.array([len(h.split()) for h in hypotheses], np.int64)
    totals = scores + lm_weight * lm + word_penalty * words
    first = {}
    group = np.array([first.setdefault(u, len(first)) for u in utterances], np.int64)
    order = np.lexsort((np.arange(len(totals)), -totals, group))
    return order, totals, words


def build_parser():
    """The parser of ``snm rescore``."""
    parser = arguments.parser("rescore", __doc__)
    parser.add_argument("--model", required=True, help=model_help())
    parser.add_argument("nbest", help="n-best list: UTTERANCE_ID<TAB>SCORE<TAB>HYPOTHESIS a "
                        "line ('-': standard input)")
    parser.add_argument("--lm_weight", type=float, default=1.0,
                        help="weight of the model's natural-log probability (default 1)")
    parser.add_argument("--word_penalty", type=float, default=0.0,
                        help="added per word of a hypothesis; negative penalises long ones "
                        "(default 0)")
    parser.add_argument("--best", help="file for the best hypothesis of each utterance "
                        "(default: standard output)")
    parser.add_argument("--unk_penalty", type=float, metavar="P",
                        help="OOV penalty, as in SRILM: the log10 probability given to each "
                             "word outside the model's vocabulary (one it reads as <UNK>) in "
                             "place of the model's <UNK> probability, e.g. -10; the words "
                             "after it are scored as without it (default: the model's <UNK> "
                             "probability)")
    parser.add_argument("--out", help="file for the whole list rescored, best first "
                        "(default: none)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.unk_penalty is not None and not math.isfinite(args.unk_penalty):
        raise SnmInputError(f"--unk_penalty must be a finite log10 probability, got "
                            f"{args.unk_penalty}")
    model = load_scorer(args.model)
    utterances, scores, hypotheses = read_nbest(args.nbest)
    lm = lm_log_probs(model, hypotheses, args.unk_penalty)
    order, totals, words = rescore(utterances, scores, hypotheses, lm, args.lm_weight,
                                   args.word_penalty)
    best, ranked, rank, previous = [], [], 0, None
    for i in order:
        rank = rank + 1 if utterances[i] == previous else 1
        if rank == 1:
            best.append(f"{utterances[i]}\t{hypotheses[i]}\n")
        ranked.append(f"{utterances[i]}\t{rank}\t{totals[i]:.6f}\t{scores[i]:.6f}\t{lm[i]:.6f}"
                      f"\t{words[i]}\t{hypotheses[i]}\n")
        previous = utterances[i]
    for path, lines in ((args.best, best), (args.out, ranked)):
        if path:
            write_atomically(path, lines)
        elif lines is best:
            sys.stdout.writelines(lines)
    return 0


def write_atomically(path, lines):
    """Write text lines to a local or remote file: whole, or not at all."""
    with contextlib.ExitStack() as stack:
        out = io.TextIOWrapper(stack.enter_context(storage.atomic_output(path)),
                               encoding="utf-8", write_through=True)
        out.writelines(lines)
        out.flush()
        out.detach()
