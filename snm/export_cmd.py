"""``snm export-arpa``: write an n-gram model as an ARPA file for existing decoders."""

import argparse

from snm_core.io.memory import parse_size
from snm_core.loglinear.directory import export_arpa as export_loglinear_arpa
from snm_core.loglinear.directory import is_loglinear
from snm_core.model.arpa import export_arpa
from snm_core.model.backoff import DEFAULT_MEMORY


def main(argv=None):
    parser = argparse.ArgumentParser(prog="snm export-arpa", description=__doc__)
    parser.add_argument("--model", required=True, help="model directory (snm apply --out)")
    parser.add_argument("--out", required=True,
                        help="ARPA file to write (.gz: compressed; may be remote)")
    parser.add_argument("--memory", type=parse_size, default=DEFAULT_MEMORY,
                        help="working memory, e.g. 512M or 4G (default 512M); a larger "
                             "model takes more scratch disk, not more memory")
    parser.add_argument("--scratch", help="local directory for the temporary files "
                                          "(default: the system's temporary directory)")
    parser.add_argument("--threads", type=int, help="partitions computed at once, sharing "
                                                    "--memory (default: the cores, at most 4)")
    args = parser.parse_args(argv)
    if is_loglinear(args.model):
        export_loglinear_arpa(args.model, args.out)
    else:
        export_arpa(args.model, args.out, memory=args.memory, scratch=args.scratch,
                    threads=args.threads)
    return 0
