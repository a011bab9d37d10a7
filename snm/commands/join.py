"""``snm join``: the held-out events and small M, the count rows they touch (a Beam pipeline)."""

from pipelines import join as stage
from snm.commands import arguments
from snm_core.io.textfile import DEFAULT_BATCH_BYTES


def main(argv=None):
    parser = arguments.parser("join", stage.__doc__, beam=True)
    arguments.stage_input(parser, "count", renamed_from="counts")
    parser.add_argument("--heldout", required=True, help="held-out text file or glob")
    parser.add_argument("--out", required=True, help="output directory (a join/ directory)")
    parser.add_argument("--batch_bytes", type=int, default=DEFAULT_BATCH_BYTES)
    arguments.memory_argument(parser)
    return arguments.run_stage(parser, argv, stage.JoinOptions, stage.run)
