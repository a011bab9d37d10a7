"""``snm eval``: the perplexity of a text (KenLM ``query``'s summary), per model."""

import json

from snm.commands import arguments
from snm.evaluation import format_report, load_checked
from snm_core.io.textfile import read_lines


def main(argv=None):
    parser = arguments.parser("eval", "Perplexity of a text (one sentence a line).")
    parser.add_argument("--model", required=True, help="model directory (snm apply --out)")
    parser.add_argument("file", help="text to evaluate")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--unadjusted", action="store_true",
                        help="report the unadjusted model (theta = 0) first / at the top level")
    args = parser.parse_args(argv)
    reports = load_checked(args.model, args.unadjusted).evaluate_lines(read_lines(args.file))
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
