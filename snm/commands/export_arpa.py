"""``snm export-arpa``: write an n-gram model as an ARPA file for existing decoders."""

from snm.commands import arguments
from snm.evaluation import model_directory, model_help
from snm_core.loglinear.family import is_loglinear
from snm_core.arpa.export import export_arpa


def build_parser():
    """The parser of ``snm export-arpa``."""
    parser = arguments.parser("export-arpa", __doc__)
    parser.add_argument("--model", required=True, help=model_help(reads_tables=True))
    parser.add_argument("--out", required=True,
                        help="ARPA file to write (.gz: compressed; may be remote)")
    arguments.memory_argument(parser)
    parser.add_argument("--scratch", help="local directory for the temporary files, about 60 "
                                          "bytes a link (default: the system's temporary "
                                          "directory)")
    parser.add_argument("--threads", type=int, help="partitions computed at once, sharing "
                                                    "--memory (default: the cores, at most 4)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.model = model_directory(args.model, "snm export-arpa")
    if is_loglinear(args.model):
        from snm_core.loglinear.directory import export_arpa as export_loglinear_arpa  # numba
        export_loglinear_arpa(args.model, args.out)
    else:
        export_arpa(args.model, args.out, memory=args.memory, scratch=args.scratch,
                    threads=args.threads)
    return 0
