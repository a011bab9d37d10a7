"""``snm query``: KenLM's ``query`` for any model: a line in, its scores out, at once.

    snm query MODEL [FILE]            (or snm query --model MODEL [FILE])
    snm query -v summary MODEL < text

Reads text (standard input by default) line by line and answers each line as soon
as it is read, before reading the next, so that a program may talk to it through a
pipe.  Per line, as KenLM's ``query`` (each word as typed, the sentence's end as
KenLM's ``</s>``)::

    word=ID NGRAM_LENGTH LOG10_PROB<TAB>...</s>=1 NGRAM_LENGTH LOG10_PROB<TAB>Total: LOG10 OOV: N

``ID`` is the word's id in the model's vocabulary (2, ``<UNK>``, for a word outside
it or never seen in training; KenLM's ids, on the exported ARPA, are its own),
``NGRAM_LENGTH`` the longest n-gram ending in the word that the model holds; then,
when the input ends, the perplexity report of ``snm eval``.  ``-v`` chooses, as
KenLM's: ``summary`` the report only, ``sentence`` the ``Total`` lines only, ``word``
(the default) everything; repeated, what each gives.  An empty line, or one that is not
valid UTF-8, is answered ``Total: 0 OOV: 0`` and a note, and left out of the report.
"""

import sys

import numpy as np

from snm.commands import arguments
from snm.evaluation import format_report, load_scorer, model_help
from snm_core.io.textfile import STDIN, InvalidLineLog, decode_lines, line_batches
from snm_core.scoring.base import PerplexityTotals
from snm_core.text.vocab import EOS_ID

#: The end of a sentence as KenLM's ``query`` prints it (our ``</S>``).
KENLM_EOS = "</s>"
#: ``-v``'s levels, as KenLM's ``query`` names them.
LEVELS = ("summary", "sentence", "word")


def stdin_lines():
    """``(line number, bytes)`` of standard input, each as soon as its newline arrives."""
    number = 0
    while True:
        data = sys.stdin.buffer.readline()
        if not data:
            return
        number += 1
        yield number, data


def file_lines(path):
    for first, lines in line_batches(path):
        for i, line in enumerate(lines):
            yield first + i, line


def answer(model, line, bos, eos, totals, words=True):
    """The answer to one decoded line (None: not valid UTF-8); adds it to ``totals``.
    Without ``words``, only its ``Total``."""
    if line is None or not line.split():
        why = "not valid UTF-8 or holding a NUL byte" if line is None else "empty line"
        totals.skipped[line is None] += 1
        return f"Total: 0 OOV: 0\t(skipped: {why})"
    tokens = line.split() + ([KENLM_EOS] if eos else [])  # typed words as typed, as KenLM
    scores = list(model.full_scores(line, bos=bos, eos=eos))
    ids = model.sentence_ids(line).tolist() + ([EOS_ID] if eos else [])
    parts = [f"{w}={i} {n} {p:.6g}" for w, i, (p, n, _) in zip(tokens, ids, scores)] \
        if words else []
    total = sum(p for p, _, _ in scores)
    oov = sum(o for _, _, o in scores)
    totals.add([10.0 ** p for p, _, _ in scores], [o for _, _, o in scores])
    totals.sentences += 1
    return "\t".join(parts + [f"Total: {total:.6g} OOV: {oov}"])


class QueryTotals(PerplexityTotals):
    """The report's sums, with the sentences and the lines skipped (empty, invalid)."""

    def __init__(self):
        super().__init__()
        self.sentences = 0
        self.skipped = [0, 0]

    def add(self, prob, oov):
        super().add(np.asarray(prob, np.float64), np.asarray(oov, bool))

    def report(self):
        return {**super().report(self.sentences), "empty_lines": self.skipped[0],
                "invalid_lines": self.skipped[1]}


def build_parser():
    """The parser of ``snm query``."""
    parser = arguments.parser("query", __doc__)
    parser.add_argument("--model", metavar="DIR",
                        help=model_help() + "; or give it as the first argument, as "
                             "KenLM's query MODEL")
    parser.add_argument("model_or_text", nargs="?", metavar="MODEL",
                        help="the model directory, as KenLM's query MODEL (with --model: "
                             "the text, FILE)")
    parser.add_argument("text", nargs="?", metavar="FILE",
                        help="text to score, one sentence a line ('-' or none: standard "
                             "input)")
    parser.add_argument("-n", "--no_sentence_context", action="store_true",
                        help="score each line without <s> before it and </s> after it")
    parser.add_argument("-v", "--verbose", choices=LEVELS, action="append", metavar="LEVEL",
                        help="what to print, as KenLM's query -v: summary (the perplexity "
                             "report only), sentence (each line's Total only) or word (each "
                             "word's scores, the Total and the report: the default); repeat -v "
                             "to combine them")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    paths = [p for p in (args.model, args.model_or_text, args.text) if p is not None]
    if not paths:
        parser.error("give the model: snm query MODEL [FILE] (or --model MODEL)")
    if len(paths) > 2:
        parser.error(f"one model and at most one text, got {' '.join(paths)}")
    model_dir, text = paths[0], paths[1] if len(paths) > 1 else STDIN
    levels = set(args.verbose or ["word"])
    words, sentences = "word" in levels, bool({"word", "sentence"} & levels)
    summary = bool({"word", "summary"} & levels)
    model = load_scorer(model_dir)
    bos = eos = not args.no_sentence_context
    totals = QueryTotals()
    log = InvalidLineLog()
    lines = stdin_lines() if text == STDIN else file_lines(text)
    for number, line in lines:
        if isinstance(line, bytes):
            line = decode_lines(line, text, number, log)[0]
        reply = answer(model, line, bos, eos, totals, words)
        if sentences:
            sys.stdout.write(reply + "\n")
            sys.stdout.flush()
    if summary:
        name = "Log-linear" if "loglinear" in model.REPORTS else "Adjusted"
        print(format_report(name, totals.report()), flush=True)
    return 0
