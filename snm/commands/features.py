"""``snm features``: each target's features in the paper's notation, or a text's summary."""

import collections

import numpy as np

from snm.commands import arguments
from snm_core.io.textfile import read_lines
from snm_core.text.config import load_config
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import tokenize
from snm_core.text.vocab import Vocabulary


def build_parser():
    """The parser of ``snm features``."""
    parser = arguments.parser(
        "features", "Print the events and features of sentences (paper notation), or, "
                    "with --input, how many features of each type a text yields.")
    parser.add_argument("--config", required=True, help="preset (5gram, skip10gram, "
                        "skip5gram) or configuration file")
    parser.add_argument("--tags", default="", help="comma-separated corpus tags: every "
                        "feature is shown once per tag, as for held-out text (default: "
                        "none, an untagged model's features)")
    parser.add_argument("--input", help="a text file (one sentence a line): print a "
                        "per-type summary instead of the features")
    parser.add_argument("sentence", nargs="*", help="sentence(s) to show")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.sentence and not args.input:
        parser.error("give a sentence or --input FILE")
    config = load_config(args.config)
    tags = tuple(t for t in args.tags.split(",") if t) or ("",)
    if args.input:
        _summarise_features(args.input, config, tags)
        return 0
    words = sorted({w for s in args.sentence for w in s.split()})
    vocab = Vocabulary(w for w in words if w not in ("<S>", "</S>", "<UNK>"))
    extractor = FeatureExtractor(config, tags)
    batch, _, _ = tokenize(args.sentence, vocab)
    events = extractor.extract(batch)
    order = events.event.argsort(kind="stable")
    words_of = events.context_words()
    starts = collections.Counter(events.event.tolist())
    i = 0
    for e in range(events.num_events):
        pairs = order[i:i + starts[e]]
        i += starts[e]
        rendered = [extractor.render(events.type[p], words_of[p], vocab) for p in pairs]
        print(f"{vocab.word(events.target[e])}\t" + "  ".join(rendered))
    return 0


def _summarise_features(path, config, tags):


    lines = read_lines(path)
    words = sorted({w for line in lines if line is not None for w in line.split()}
                   - {"<S>", "</S>", "<UNK>"})
    vocab = Vocabulary(words)
    extractor = FeatureExtractor(config, tags)
    batch, _, stats = tokenize(lines, vocab)
    events = extractor.extract(batch)
    print(f"{path}: {stats.sentences} sentences, {stats.tokens} words, "
          f"{events.num_events} events, {events.num_pairs} features "
          f"({events.num_pairs / max(events.num_events, 1):.1f} per event)")
    print(f"{'feature type':<28}{'features':>12}{'distinct':>12}")
    for type_id in range(extractor.num_types):
        keys = events.key[events.type == type_id]
        if len(keys):
            distinct = int(np.count_nonzero(np.diff(np.sort(keys))) + 1)
            print(f"{extractor.type_name(type_id):<28}{len(keys):>12}{distinct:>12}")
