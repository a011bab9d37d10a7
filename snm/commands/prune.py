"""``snm prune``: a model pruned to a number of links, or by a score threshold."""

from pipelines import prune as stage
from snm.commands import arguments
from snm.evaluation import model_help


def build_parser():
    """The parser of ``snm prune``."""
    parser = arguments.parser("prune", stage.__doc__, beam=True)
    parser.add_argument("--model", required=True, help=model_help(reads_tables=True))
    parser.add_argument("--out", required=True, help="directory of the pruned model")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--target_links", type=int,
                      help="links to keep (backoff: the unigrams always are, and an "
                           "n-gram's tag copies go together; mass, count: within 1%%, the empty "
                           "feature's links always kept)")
    size.add_argument("--target_size", metavar="SIZE",
                      help="bytes of the scoring directory (snm compact --out) to prune to, "
                           "such as 200M or 2G (powers of 1024): links are kept so that it "
                           "is at most this and within 3%% below, measured after pruning "
                           "(a few prunings)")
    size.add_argument("--threshold", type=float,
                      help="keep the links whose score is at least this")
    parser.add_argument("--criterion", choices=stage.CRITERIA,
                        help="backoff (n-gram models; the default for them), reestimate "
                             "(pooled n-gram models: estimated again from the counts and "
                             "pruned as pocolm prunes, in memory; best at small sizes), mass "
                             "(any model; the default for skip-gram models) or count")
    parser.add_argument("--heldout", metavar="DIR",
                        help="a join directory (snm join --out) on the model's counts; "
                             "reestimate: its discounts are chosen on it, for the "
                             "unpruned model and then for the pruned one (a pruning a "
                             "trial: minutes; without it the defaults are a few percent "
                             "worse); mass or count: the features "
                             "its held-out text touches weigh --heldout_weight times more")
    parser.add_argument("--heldout_weight", type=float,
                        help=f"with --heldout (default {stage.HELDOUT_WEIGHT:g})")
    arguments.memory_argument(parser)
    arguments.layout_argument(parser)
    return parser


def main(argv=None):
    return arguments.run_stage(build_parser(), argv, stage.PruneOptions, stage.run)
