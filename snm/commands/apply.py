"""``snm apply``: the adjusted matrix M of every link, as a model directory (a Beam pipeline)."""

from pipelines import apply as stage
from snm.commands import arguments


def build_parser():
    """The parser of ``snm apply``."""
    parser = arguments.parser("apply", stage.__doc__, beam=True)
    arguments.stage_input(parser, "count", renamed_from="counts")
    arguments.stage_input(parser, "fit", renamed_from="theta")
    parser.add_argument("--out", required=True, help="model directory")
    arguments.layout_argument(parser)
    arguments.memory_argument(parser)
    return parser


def main(argv=None):
    return arguments.run_stage(build_parser(), argv, stage.ApplyOptions, stage.run)
