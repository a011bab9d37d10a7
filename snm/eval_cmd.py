"""``snm eval`` (perplexity report) and ``snm score`` (per-sentence log10 probabilities)."""

import argparse
import contextlib
import io
import json
import math
import sys

import numpy as np

from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.io.textfile import read_lines
from snm_core.model.compact import load_scorer
from snm_core.model.scoring import SCORE_BATCH_LINES


def format_report(name, report):
    """A report in the spirit of KenLM's ``query`` summary."""
    return "\n".join([
        f"{name} model:",
        f"  Perplexity including OOVs:\t{report['perplexity']:.4f}",
        f"  Perplexity excluding OOVs:\t{report['perplexity_excluding_oov']:.4f}",
        f"  OOVs:\t{report['oov']}",
        f"  Tokens:\t{report['words']}",
        f"  Sentences:\t{report['sentences']}",
    ] + ([f"  Zero-probability tokens:\t{report['zero_probability']} (perplexity is infinite: "
          "the model never saw <UNK>; build the vocabulary with --min_count 2 or more)"]
         if report["zero_probability"] else [])
      + ([f"  Lines skipped:\t{report['invalid_lines']} not valid UTF-8 or holding a NUL byte "
          f"(the first few logged), {report['empty_lines']} empty"]
         if report.get("invalid_lines") or report.get("empty_lines") else []))


def load(model_dir):
    """An SNM :class:`Model` or a :class:`LogLinearScorer`, by the directory's manifest."""
    return load_scorer(model_dir)


def evaluate(model_dir, path):
    """A report per model of a text file: ``{"adjusted": .., "unadjusted": ..}`` for an SNM,
    ``{"loglinear": ..}`` for a log-linear model."""
    return load(model_dir).evaluate_lines(read_lines(path))


def _load_checked(args):
    """The model of ``--model``, refusing ``--unadjusted`` before any text is read when the
    model has no unadjusted form."""
    model = load(args.model)
    if args.unadjusted and "unadjusted" not in model.REPORTS:
        raise SnmInputError(f"{args.model}: {model.WITHOUT_UNADJUSTED}")
    return model


def eval_main(argv):
    parser = argparse.ArgumentParser(prog="snm eval",
                                     description="Perplexity of a text (one sentence a line).")
    parser.add_argument("--model", required=True, help="model directory (snm apply --out)")
    parser.add_argument("file", help="text to evaluate ('-': standard input)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--unadjusted", action="store_true",
                        help="report the unadjusted model (theta = 0) first / at the top level")
    args = parser.parse_args(argv)
    reports = _load_checked(args).evaluate_lines(read_lines(args.file))
    if "loglinear" in reports:
        report = reports["loglinear"]
        print(json.dumps({**report, "model": "loglinear"}, sort_keys=True) if args.json
              else format_report("Log-linear", report))
        return 0
    first, *second = [name for name in (("unadjusted", "adjusted") if args.unadjusted
                                        else ("adjusted", "unadjusted")) if name in reports]
    if args.json:
        print(json.dumps({**reports[first], "model": first,
                          **{name: reports[name] for name in second}}, sort_keys=True))
    else:
        for name in (first, *second):
            print(format_report(name.capitalize(), reports[name]))
    return 0


def score_main(argv):
    parser = argparse.ArgumentParser(
        prog="snm score",
        description="Per-sentence log10 probability (</S> included), one line per input line: "
                    "log10_prob, predicted words, OOVs, the sentence; tab-separated.")
    parser.add_argument("--model", required=True, help="model directory")
    parser.add_argument("file", help="text to score ('-': standard input)")
    parser.add_argument("--unadjusted", action="store_true", help="score with theta = 0")
    parser.add_argument("--out", help="output file (default: standard output)")
    args = parser.parse_args(argv)
    model = _load_checked(args)
    lines = read_lines(args.file)
    with contextlib.ExitStack() as stack:
        if args.out:  # written whole or not at all, local or remote
            out = io.TextIOWrapper(stack.enter_context(storage.atomic_output(args.out)),
                                   encoding="utf-8", write_through=True)
        else:
            out = sys.stdout
        for start, kept, scores in model.score_lines(lines, batch_lines=SCORE_BATCH_LINES):
            prob = scores.prob_unadjusted if args.unadjusted else scores.prob
            with np.errstate(divide="ignore"):
                log10 = np.bincount(scores.sentence, weights=np.log10(prob),
                                    minlength=len(kept))
            words = np.bincount(scores.sentence, minlength=len(kept))
            oov = np.bincount(scores.sentence, weights=scores.target == 2, minlength=len(kept))
            by_line = {int(k): i for i, k in enumerate(kept)}
            end = min(start + SCORE_BATCH_LINES, len(lines))
            for offset in range(end - start):
                i = by_line.get(offset)
                text = lines[start + offset]
                text = "" if text is None else text  # not valid UTF-8: logged, not scored
                if i is None:
                    out.write(f"0\t0\t0\t{text}\n")
                else:
                    value = log10[i] if math.isfinite(log10[i]) else float("-inf")
                    out.write(f"{value:.6f}\t{words[i]}\t{int(oov[i])}\t{text}\n")
        if args.out:
            out.flush()
            out.detach()
    return 0


def main(argv):
    command, rest = argv[0], argv[1:]
    return eval_main(rest) if command == "eval" else score_main(rest)
