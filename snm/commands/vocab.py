"""``snm vocab``: word counts and a vocabulary from training text (a Beam pipeline)."""

from pipelines import vocab as stage
from snm.commands import arguments


def build_parser():
    """The parser of ``snm vocab``."""
    parser = arguments.parser("vocab", stage.__doc__, beam=True)
    arguments.source_arguments(parser)
    arguments.text_arguments(parser)
    parser.add_argument("--out", required=True, help="output directory (a vocab/ directory)")
    parser.add_argument("--min_count", type=int, default=stage.DEFAULT_MIN_COUNT,
                        help="keep words seen at least this often (default %(default)s)")
    parser.add_argument("--max_size", type=int, default=None,
                        help="keep at most this many words, the most frequent (default: "
                             "no limit)")
    return parser


def main(argv=None):
    return arguments.run_stage(build_parser(), argv, stage.VocabOptions, stage.run)
