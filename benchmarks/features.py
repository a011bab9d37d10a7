"""Feature extraction speed on the kernel corpus, one core.

    python benchmarks/features.py [--sentences N]

For the 5gram and skip10gram presets: features extracted per second by the
vectorised extractor (``snm_core.text.features``), tokenisation timed apart, and the
same measure for a plain per-token Python loop on a sample, as the baseline the
ratio is taken against.  Appends to benchmarks/results.jsonl.
"""

import argparse
import gzip
import sys

sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__file__), ".."))

from benchmarks.common import Timer, corpus, print_table, record  # noqa: E402
from snm_core.text.config import preset  # noqa: E402
from snm_core.text.features import FeatureExtractor  # noqa: E402
from snm_core.text.tokenize import tokenize  # noqa: E402
from snm_core.text.vocab import BOS_ID, EOS_ID, Vocabulary  # noqa: E402

BATCH_LINES = 20000
BASELINE_SENTENCES = 5000


def python_loop(config, sentences):
    """Per-token Python enumeration of every feature (the baseline)."""
    windows = [w for block in config.extractors for w in block.windows()]
    n = 0
    for sentence in sentences:
        padded = [BOS_ID] + sentence + [EOS_ID]
        for j in range(1, len(padded)):
            seen = set()
            for ftype, r, s, a in windows:
                start = j - a - s - r
                if start >= 0:
                    seen.add((ftype, tuple(padded[start:start + r]), tuple(padded[j - a:j])))
            n += len(seen)
    return n


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sentences", type=int, default=None, help="limit (default: all)")
    args = parser.parse_args(argv)
    vocab = Vocabulary.load(corpus("kernel", "vocab.txt"))
    with gzip.open(corpus("kernel", "train.txt.gz"), "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()[:args.sentences]
    with Timer() as tok:
        batches = [tokenize(lines[i:i + BATCH_LINES], vocab)[0]
                   for i in range(0, len(lines), BATCH_LINES)]
    words = sum(b.num_tokens for b in batches)
    sample = [batches[0].sentence(i).tolist() for i in range(min(BASELINE_SENTENCES,
                                                                 batches[0].num_sentences))]
    rows = []
    for name in ("5gram", "skip10gram"):
        config = preset(name)
        extractor = FeatureExtractor(config)
        pairs = 0
        with Timer() as t:
            for batch in batches:
                pairs += extractor.extract(batch).num_pairs
        with Timer() as base:
            base_pairs = python_loop(config, sample)
        rate = pairs / t.seconds
        base_rate = base_pairs / base.seconds
        rows.append({"config": name, "words": words, "features": pairs,
                     "extract_s": t.seconds, "tokenize_s": tok.seconds,
                     "features_per_s": rate, "words_per_s": words / (t.seconds + tok.seconds),
                     "python_loop_features_per_s": base_rate,
                     "speedup_vs_loop": rate / base_rate})
    print_table(rows, ["config", "words", "features", "tokenize_s", "extract_s",
                       "features_per_s", "words_per_s", "python_loop_features_per_s",
                       "speedup_vs_loop"])
    record("features", rows)


if __name__ == "__main__":
    main()
