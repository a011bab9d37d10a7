"""``snm vocab``: word counts and a vocabulary from training text (a Beam pipeline)."""

from pipelines import vocab as stage
from snm.commands import arguments


def main(argv=None):
    parser = arguments.parser("vocab", stage.__doc__, beam=True)
    arguments.source_arguments(parser)
    parser.add_argument("--out", required=True, help="output directory (a vocab/ directory)")
    parser.add_argument("--min_count", type=int, default=stage.DEFAULT_MIN_COUNT,
                        help="keep words seen at least this often (default %(default)s)")
    parser.add_argument("--max_size", type=int, default=None,
                        help="keep at most this many words")
    return arguments.run_stage(parser, argv, stage.VocabOptions, stage.run)
