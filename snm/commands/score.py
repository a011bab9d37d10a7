"""``snm score``: each line's log10 probability (``</S>`` included), one line per input line."""

import contextlib
import io
import math
import sys

import numpy as np

from snm.commands import arguments
from snm.evaluation import check_scoring_memory, load_checked, model_help
from snm_core.io import storage
from snm_core.io.progress import Progress
from snm_core.io.textfile import read_text
from snm_core.scoring.base import SCORE_BATCH_LINES


def build_parser():
    """The parser of ``snm score``."""
    parser = arguments.parser(
        "score", "Per-sentence log10 probability (</S> included), one line per input line: "
                    "log10_prob, predicted words, OOVs, the sentence; tab-separated.")
    parser.add_argument("--model", required=True, help=model_help())
    parser.add_argument("file", help="text to score ('-': standard input)")
    parser.add_argument("--unadjusted", action="store_true", help="score with theta = 0")
    parser.add_argument("--out", help="output file (default: standard output)")
    arguments.text_arguments(parser)
    arguments.memory_argument(parser)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_scoring_memory("score", args.memory, args.file)
    model = load_checked(args.model, args.unadjusted)
    # Refused before anything is written; a line skipped for not decoding scores "0 0 0".
    lines = read_text(args.file, args.encoding, args.skip_invalid)
    with contextlib.ExitStack() as stack:
        if args.out:  # written whole or not at all, local or remote
            out = io.TextIOWrapper(stack.enter_context(storage.atomic_output(args.out)),
                                   encoding="utf-8", write_through=True)
        else:
            out = sys.stdout
        progress = stack.enter_context(Progress("score", total=len(lines), unit="line"))
        for start, kept, scores in model.score_lines(lines, batch_lines=SCORE_BATCH_LINES):
            progress.update(min(SCORE_BATCH_LINES, len(lines) - start))
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
                text = "" if text is None else text  # did not decode: counted, not scored
                if i is None:
                    out.write(f"0\t0\t0\t{text}\n")
                else:
                    value = log10[i] if math.isfinite(log10[i]) else float("-inf")
                    out.write(f"{value:.6f}\t{words[i]}\t{int(oov[i])}\t{text}\n")
        if args.out:
            out.flush()
            out.detach()
    return 0
