"""``snm count``: C(f,w), C(f,*) and continuation counts over sharded text (a Beam pipeline)."""

from pipelines import count as stage
from pipelines.shuffle import MODES
from snm.commands import arguments
from snm_core.count.budget import (BUCKET_OCCURRENCES, COUNT_BATCH_BYTES, DEFAULT_NUM_BUCKETS,
                                   FLUSH_LINKS_PER_BUCKET, MIN_FLUSH_LINKS)


def build_parser():
    """The parser of ``snm count``."""
    parser = arguments.parser("count", stage.__doc__, beam=True)
    arguments.config_arguments(parser)
    arguments.source_arguments(parser, COUNT_BATCH_BYTES)
    arguments.text_arguments(parser)
    parser.add_argument("--add_to", metavar="DIR",
                        help="an existing count directory: count only the new --train files "
                             "and write the sum of both to --out (same config, vocabulary "
                             "and buckets; counts are additive)")
    vocab_group = parser.add_mutually_exclusive_group()
    vocab_group.add_argument("--vocab", metavar="FILE|DIR",
                             help="vocabulary: a file, one word a line, or a vocab directory "
                                  "(snm vocab --out)")
    vocab_group.add_argument("--min_count", type=int,
                             help="build the vocabulary first: words seen this often (no "
                                  "default: give --vocab, --min_count or --add_to)")
    parser.add_argument("--out", required=True, help="output directory (a count/ directory)")
    parser.add_argument("--num_buckets", type=int,
                        help="key-range buckets = output files = shuffle parallelism "
                             f"(default: one per {BUCKET_OCCURRENCES:,} feature occurrences of "
                             "the text, more if the memory budget needs them, at least "
                             f"{DEFAULT_NUM_BUCKETS})")
    arguments.threshold_arguments(parser)
    arguments.memory_argument(parser)
    parser.add_argument("--flush_links", type=int,
                        help="links a worker holds before emitting them (default: "
                             f"{FLUSH_LINKS_PER_BUCKET} a bucket, at least {MIN_FLUSH_LINKS:,}, "
                             "within a sixteenth of the memory budget)")
    parser.add_argument("--shuffle", choices=MODES, default="files",
                        help="how partial counts reach their bucket: 'files' (scratch "
                             "files of raw arrays, low memory; the default) or 'beam' (the "
                             "runner's shuffle)")
    parser.add_argument("--scratch", metavar="DIR",
                        help="where the 'files' shuffle writes its parts (default: OUT/_scratch, "
                             "or TMPDIR for an object-storage OUT on a local runner); on a "
                             "cluster a path every worker reads, e.g. s3://bucket/tmp")
    parser.add_argument("--passes", type=int,
                        help="passes over the text, each counting a share of the buckets, so "
                             "that one pass's scratch is that share of the whole (default: "
                             "as many as half the scratch's free disk needs, planned again "
                             "after each pass from the scratch it wrote; 1 on object "
                             "storage)")
    parser.add_argument("--compress_scratch", choices=list(stage.SCRATCH_COMPRESSION),
                        default="auto",
                        help="compress the 'files' shuffle's parts (0.6 of the bytes on "
                             "kernel, about 10%% more time in one pass): 'auto' (the default) "
                             "where raw parts would need more than one pass over the text, "
                             "'always' or 'never'; the passes are planned for the files chosen")
    parser.add_argument("--reference", action="store_true",
                        help="count with one Beam element per occurrence (slow; for tests)")
    return parser


def main(argv=None):
    return arguments.run_stage(build_parser(), argv, stage.CountOptions, stage.run)
