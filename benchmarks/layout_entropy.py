"""What a sorted, entropy-coded layout would take for a model: bits a link and a feature.

    python benchmarks/layout_entropy.py MODEL [MODEL ...] [--share 8]

For each model directory (any configuration, skip-grams included), on every
``--share``-th bucket: the entropy of a link's word given its feature's type, of its
value's packed code given the type (the packed layout's link codebook, fitted here as
the build fits it), of a feature's M_f* code and of its number of links (capped at 64).
A layout of sorted feature keys (16 check bits and about 2 bits of Elias-Fano
position each, as a hashed table needs to tell absent keys) with each feature's links
coded by those entropies (as ``small`` codes n-gram entries) takes about

    bytes a link = (word + value) / 8 + features a link x (16 + 2 + M* + links) / 8

against the packed layout's measured bytes a link (its ``compact/`` over the links).
An entropy is a bound a Huffman code comes within a bit of, and lookup structures
(block keys, offsets) add a little, as they do for ``small`` (0.25 bytes a link on
kernel's 5-gram).  Prints a table and appends to benchmarks/results.jsonl.
"""

import argparse
import json
import os
import sys

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import print_table, record  # noqa: E402
from snm_core.io import model_files  # noqa: E402
from snm_core.scoring.layouts import hashed_build, hashed_tables  # noqa: E402

#: Bits of a sorted feature key's check and its Elias-Fano position.
CHECK_BITS, POSITION_BITS = 16, 2


def entropy(values):
    """Shannon entropy in bits of the values' distribution."""
    _, counts = np.unique(values, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def conditional_entropy(values, given):
    """H(values | given), in bits."""
    return sum(entropy(values[given == g]) * np.mean(given == g) for g in np.unique(given))


def estimate(model, share):
    with open(os.path.join(model, "manifest.json")) as f:
        manifest = json.load(f)
    num_buckets = int(manifest["num_buckets"])
    buckets = range(0, num_buckets, share)
    features = pa.concat_tables([model_files.read_bucket(
        model, "features", b, num_buckets, ["type", "diversity", "m_star"]) for b in buckets])
    links = pa.concat_tables([model_files.read_bucket(model, "matrix", b, num_buckets,
                                                      ["word", "m"]) for b in buckets])
    link_type = np.repeat(features["type"].to_numpy(), features["diversity"].to_numpy())
    feature_book, link_book = hashed_build._codebooks(model, num_buckets)
    word = conditional_entropy(links["word"].to_numpy(), link_type)
    value = conditional_entropy(hashed_tables.value_codes(links["m"].to_numpy(), link_book),
                                link_type)
    m_star = entropy(hashed_tables.value_codes(features["m_star"].to_numpy(), feature_book))
    count = entropy(np.minimum(features["diversity"].to_numpy(), 64))
    per_feature = CHECK_BITS + POSITION_BITS + m_star + count
    features_a_link = features.num_rows / links.num_rows
    compact = os.path.join(model, "compact")
    with open(os.path.join(compact, "manifest.json")) as f:
        layout = json.load(f).get("layout")
    packed = (sum(os.path.getsize(os.path.join(compact, name)) for name in os.listdir(compact))
              / manifest["totals"]["links"] if layout == hashed_build.PACKED_LAYOUT else None)
    return {"model": model, "links": manifest["totals"]["links"],
            "features_a_link": round(features_a_link, 3),
            "word_bits": round(word, 2), "value_bits": round(value, 2),
            "feature_bits": round(per_feature, 2),
            "bytes_a_link": round((word + value) / 8 + features_a_link * per_feature / 8, 2),
            "packed_bytes_a_link": round(packed, 2) if packed else None}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="model directories")
    parser.add_argument("--share", type=int, default=8,
                        help="read every SHARE-th bucket (default 8)")
    args = parser.parse_args(argv)
    rows = [estimate(model, args.share) for model in args.models]
    print_table(rows, ["model", "links", "features_a_link", "word_bits", "value_bits",
                       "feature_bits", "bytes_a_link", "packed_bytes_a_link"])
    record("layout-entropy", rows)


if __name__ == "__main__":
    main()
