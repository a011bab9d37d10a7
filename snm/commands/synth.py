"""``snm synth``: write the deterministic synthetic corpus (train/dev/test), whose
``begin_k ... end_k`` pairs only skip-grams see."""

from snm.commands import arguments
from snm_core.text import synthetic


def build_parser():
    """The parser of ``snm synth``."""
    parser = arguments.parser("synth", __doc__)
    parser.add_argument("--out", required=True, help="directory for train.txt, dev.txt, test.txt")
    parser.add_argument("--train_sentences", type=int, default=20000,
                        help="sentences of train.txt (default %(default)s)")
    parser.add_argument("--heldout_sentences", type=int, default=1000,
                        help="sentences of dev.txt and of test.txt, each (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random seed: the same seed writes the same files (default "
                             "%(default)s)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    for path in synthetic.write_corpus(args.out, args.train_sentences, args.heldout_sentences,
                                       args.heldout_sentences, args.seed):
        print(path)
    return 0
