"""``snm select``: a count thresholded again, for a model of at most N links or bytes."""

from pipelines import select as stage
from snm.commands import arguments


def build_parser():
    """The parser of ``snm select``."""
    parser = arguments.parser("select", stage.__doc__, beam=True)
    parser.add_argument("--count", required=True, help="count directory (snm count --out)")
    parser.add_argument("--out", required=True,
                        help="directory of the selected counts, a count directory for snm join "
                             "and snm apply")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--target_links", type=int, help="links the model may have, at most")
    size.add_argument("--target_size", metavar="SIZE",
                      help="bytes the model's scoring directory (snm compact --out) may take "
                           "in --layout, at most, such as 200M (powers of 1024)")
    parser.add_argument("--layout", choices=("hashed", "packed"), default="hashed",
                        help="the layout --target_size is of (default hashed)")
    arguments.memory_argument(parser)
    return parser


def main(argv=None):
    return arguments.run_stage(build_parser(), argv, stage.SelectOptions, stage.run)
