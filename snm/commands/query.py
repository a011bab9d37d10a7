"""``snm query``: KenLM's ``query`` for any model: a line in, its scores out, at once.

Reads text (standard input by default) line by line and answers each line as soon
as it is read, before reading the next, so that a program may talk to it through a
pipe.  Per line, as KenLM's ``query``::

    word=ID NGRAM_LENGTH LOG10_PROB<TAB>...</S>=1 NGRAM_LENGTH LOG10_PROB<TAB>Total: LOG10 OOV: N

``ID`` is the word's id in the model's vocabulary (2, ``<UNK>``, for a word outside
it or never seen in training), ``NGRAM_LENGTH`` the longest n-gram ending in the word
that the model holds; then, when the input ends, the perplexity report of ``snm
eval``.  An empty line, or one that is not valid UTF-8, is answered ``Total: 0 OOV:
0`` and a note, and left out of the report.
"""

import argparse
import sys

import numpy as np

from snm.evaluation import format_report, load_scorer
from snm_core.io.textfile import STDIN, InvalidLineLog, decode_lines, line_batches
from snm_core.model.scoring import PerplexityTotals
from snm_core.text.vocab import EOS


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


def answer(model, line, bos, eos, totals):
    """The answer to one decoded line (None: not valid UTF-8); adds it to ``totals``."""
    if line is None or not line.split():
        why = "not valid UTF-8 or holding a NUL byte" if line is None else "empty line"
        totals.skipped[line is None] += 1
        return f"Total: 0 OOV: 0\t(skipped: {why})"
    words = line.split() + ([EOS] if eos else [])
    scores = list(model.full_scores(line, bos=bos, eos=eos))
    ids = model.sentence_ids(line).tolist() + ([1] if eos else [])
    parts = [f"{w}={i} {n} {p:.6g}" for w, i, (p, n, _) in zip(words, ids, scores)]
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


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="snm query", description="Score text line by line, answering each line at once "
        "(KenLM's query): per word id, n-gram length and log10 probability, per line the "
        "total; the perplexity report at the end.")
    parser.add_argument("--model", required=True, help="model directory (any family or layout)")
    parser.add_argument("text", nargs="?", default=STDIN,
                        help="text to score, one sentence a line (default: standard input)")
    parser.add_argument("-n", "--no_sentence_context", action="store_true",
                        help="score each line without <S> before it and </S> after it")
    parser.add_argument("--verbose", choices=("word", "summary"), default="word",
                        help="word: a line of scores per input line, then the report "
                        "(default); summary: the report only")
    args = parser.parse_args(argv)
    model = load_scorer(args.model)
    bos = eos = not args.no_sentence_context
    totals = QueryTotals()
    log = InvalidLineLog()
    lines = stdin_lines() if args.text == STDIN else file_lines(args.text)
    for number, line in lines:
        if isinstance(line, bytes):
            line = decode_lines(line, args.text, number, log)[0]
        reply = answer(model, line, bos, eos, totals)
        if args.verbose == "word":
            sys.stdout.write(reply + "\n")
            sys.stdout.flush()
    name = "Log-linear" if "loglinear" in model.REPORTS else "Adjusted"
    print(format_report(name, totals.report()), flush=True)
    return 0
