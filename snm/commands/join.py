"""``snm join``: the held-out events and small M, the count rows they touch (a Beam pipeline)."""

from pipelines import join as stage
from snm.commands import arguments
from snm_core.io.textfile import DEFAULT_BATCH_BYTES


def build_parser():
    """The parser of ``snm join``."""
    parser = arguments.parser("join", stage.__doc__, beam=True)
    arguments.stage_input(parser, "count", renamed_from="counts")
    parser.add_argument("--heldout", required=True, help="held-out text file or glob")
    parser.add_argument("--out", required=True, help="output directory (a join/ directory)")
    parser.add_argument("--batch_bytes", type=int, default=DEFAULT_BATCH_BYTES,
                        help="held-out text read at once, in bytes (default %(default)s)")
    arguments.text_arguments(parser)
    arguments.memory_argument(parser)
    return parser


def main(argv=None):
    return arguments.run_stage(build_parser(), argv, stage.JoinOptions, stage.run)
