"""``snm sample``: text drawn from a model, a sentence a line, in shards (SRILM's ngram -gen)."""

import argparse
import sys

from snm.commands import arguments
from snm.evaluation import model_directory, model_help
from snm_core.io import storage
from snm_core.io.errors import SnmInputError
from snm_core.sample.draw import SampleOptions, interrupted_message, sample
from snm_core.stages import manifests


def build_parser():
    """The parser of ``snm sample``."""
    parser = arguments.parser(
        "sample", __doc__ + " Any configuration: n-grams, skip-grams, corpus tags. The same "
        "seed and --shards give the same files on any number of threads.")
    parser.add_argument("--model", required=True, help=model_help(reads_tables=True))
    parser.add_argument("--words", required=True, type=word_count, help="words to draw in all "
                        "(</S> not counted; 1e6, 500M and 2G are read too); each shard "
                        "finishes the sentence that reaches its share")
    parser.add_argument("--out", required=True, help="output directory: "
                        "sample-KKKKK-of-NNNNN.txt[.gz] and manifest.json (written last); "
                        "one that holds a finished sample or another command's output, or "
                        "a file, is refused without --force")
    arguments.force_argument(parser, help="replace what --out holds: an earlier sample, "
                             "another command's output, or a file")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--shards", type=int, default=1, help="output files, each its own "
                        "random stream (default 1); they are drawn in parallel")
    parser.add_argument("--threads", type=int, help="shards drawn at once (default: one per "
                        "core); the output does not depend on it")
    parser.add_argument("--gzip", action="store_true", help="write .txt.gz shards")
    parser.add_argument("--max_length", type=int, default=1000, help="longest sentence in "
                        "words: a longer one is cut there and counted (default 1000)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.model = model_directory(args.model, "snm sample")
    check_output(args.out, args.force)
    options = SampleOptions(model=args.model, words=args.words, out=args.out, seed=args.seed,
                            shards=args.shards, threads=args.threads, gzip=args.gzip,
                            max_length=args.max_length)
    try:
        manifest = sample(options, say=lambda message: print(message, file=sys.stderr,
                                                             flush=True))
    except KeyboardInterrupt:
        print(f"snm sample: {interrupted_message(args.out)}", file=sys.stderr)
        return 130
    totals = manifest["totals"]
    seconds = manifest["seconds"]
    print(f"sample: {totals['words']:,} words, {totals['sentences']:,} sentences in "
          f"{len(manifest['files'])} shard(s) under {args.out} in {seconds:.1f} s "
          f"({totals['words'] / max(seconds, 1e-9):,.0f} words/s; "
          f"{manifest['threads']} thread(s)); empty sentences {totals['empty_sentences']:,}, "
          f"cut at --max_length {totals['truncated_sentences']:,}, "
          f"dead ends {totals['dead_ends']:,}")
    return 0


def check_output(out, force):
    """Refuse an ``--out`` that is a file or holds a finished output, an earlier sample too
    (no later run draws it again), unless ``force``; with it, a file there is removed to
    make way for the directory."""
    if storage.isfile(out):
        if not force:
            raise SnmInputError(f"{out}: an existing file; snm sample writes a directory of "
                                "shards there: give another --out, or --force to replace the "
                                "file")
        storage.remove_file(out)
    manifests.check_output(out, "snm sample", force, rerun=False)


def word_count(text):
    """An integer that may be written 1e6, 500M, 2G or 50k."""
    scale = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "b": 10 ** 9}
    value = text.strip().lower().replace(",", "").replace("_", "")
    factor = scale.get(value[-1:], 1)
    if factor > 1:
        value = value[:-1]
    try:
        number = float(value) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of words") from None
    if number != int(number):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of words")
    return int(number)
