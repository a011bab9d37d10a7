"""``snm export-arpa``: write an n-gram model as an ARPA file for existing decoders."""

from snm.commands import arguments
from snm_core.loglinear.directory import export_arpa as export_loglinear_arpa
from snm_core.loglinear.directory import is_loglinear
from snm_core.model.arpa import export_arpa


def main(argv=None):
    parser = arguments.parser("export-arpa", __doc__)
    parser.add_argument("--model", required=True, help="model directory (snm apply --out)")
    parser.add_argument("--out", required=True, help="ARPA file to write")
    args = parser.parse_args(argv)
    if is_loglinear(args.model):
        export_loglinear_arpa(args.model, args.out)
    else:
        export_arpa(args.model, args.out)
    return 0
