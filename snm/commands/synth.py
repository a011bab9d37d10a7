"""``snm synth``: write the deterministic synthetic corpus (train/dev/test), whose
``begin_k ... end_k`` pairs only skip-grams see."""

from snm.commands import arguments
from snm_core.text import synthetic


def main(argv=None):
    parser = arguments.parser("synth", "Write a synthetic train/dev/test corpus.")
    parser.add_argument("--out", required=True, help="directory for train.txt, dev.txt, test.txt")
    parser.add_argument("--train_sentences", type=int, default=20000)
    parser.add_argument("--heldout_sentences", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for path in synthetic.write_corpus(args.out, args.train_sentences, args.heldout_sentences,
                                       args.heldout_sentences, args.seed):
        print(path)
    return 0
