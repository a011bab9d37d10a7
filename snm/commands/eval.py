"""``snm eval``: the perplexity of a text (KenLM ``query``'s summary), per model.

``--json`` prints the reports as ``snm train`` writes ``eval.json``: one object with a
report per model (``adjusted`` and ``unadjusted`` for an SNM, ``loglinear``).
"""

import json

from snm.commands import arguments
from snm.evaluation import check_scoring_memory, format_report, load_checked, model_help
from snm_core.io.textfile import read_text


def build_parser():
    """The parser of ``snm eval``."""
    parser = arguments.parser("eval", __doc__)
    parser.add_argument("--model", required=True, help=model_help())
    parser.add_argument("file", help="text to evaluate, one sentence a line ('-': standard "
                                     "input)")
    parser.add_argument("--json", action="store_true",
                        help="print the reports as one JSON object (eval.json's shape)")
    parser.add_argument("--unadjusted", action="store_true",
                        help="report the unadjusted model (theta = 0) first")
    arguments.text_arguments(parser)
    arguments.memory_argument(parser)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    check_scoring_memory("eval", args.memory, args.file)
    lines = read_text(args.file, args.encoding, args.skip_invalid)
    reports = load_checked(args.model, args.unadjusted).evaluate_lines(lines)
    names = sorted(reports, key=lambda name: (name != "unadjusted") if args.unadjusted
                   else (name == "unadjusted"))
    if args.json:
        print(json.dumps(reports, sort_keys=True))
    else:
        for name in names:
            print(format_report("Log-linear" if name == "loglinear" else name.capitalize(),
                                reports[name]))
    return 0
