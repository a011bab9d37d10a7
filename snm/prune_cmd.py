"""``snm prune``: an n-gram model pruned to a number of links, by relative entropy."""

import argparse

from snm_core.prune import prune_model


def main(argv=None):
    parser = argparse.ArgumentParser(prog="snm prune", description=__doc__)
    parser.add_argument("--model", required=True, help="model directory (snm apply --out)")
    parser.add_argument("--out", required=True, help="directory of the pruned model")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--target_links", type=int,
                      help="links to keep (the unigrams always are); met within one n-gram's "
                           "tag copies")
    size.add_argument("--threshold", type=float,
                      help="keep the links whose relative-entropy score is at least this")
    args = parser.parse_args(argv)
    prune_model(args.model, args.out, target_links=args.target_links, threshold=args.threshold)
    return 0
