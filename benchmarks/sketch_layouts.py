"""What a thresholded count's sketches drop before the scratch, as laid out today and with
a feature's links in the feature's own cache line.

    python benchmarks/sketch_layouts.py [--corpus kernel] [--config skip10gram]
        [--log2_cells 28]

A thresholded count (skipgram.py's thresholds: skip-gram and 6-9-gram features and
links seen twice) reads the text twice; its sketches touch a random cache line for each
key, twice an occurrence in each pass (the feature's and the link's).  Today the feature
keys and the link keys have a sketch each (2^log2_cells two-bit cells each; two cells
of one line a key, the smaller read).  The alternative gives the two the same memory in
one array (2^(log2_cells + 1) cells) and puts a link's two cells in its feature's line:
one line an occurrence, where a feature followed by many words crowds its line.

Offline, on the real keys (every thresholded occurrence of the corpus, cells counted
exactly with ``bincount``, capped at 3): the occurrences dropped early (feature
estimate below 2), collapsed early (link estimate below 2) and let through as links.
Appends to benchmarks/results.jsonl.  Holds every occurrence's two keys, their true counts and
cells: about 15 GB at kernel's 139M thresholded occurrences.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks.common import corpus, print_table, record  # noqa: E402

LINE_CELLS = 8  # log2 of the two-bit cells of a 64-byte line


def thresholded_keys(corpus_name, config_name):
    """(feature keys, link keys) of every occurrence of skipgram.py's thresholded types."""
    import glob
    import gzip

    from snm_core.text import hashing
    from snm_core.text.config import load_config
    from snm_core.text.features import FeatureExtractor
    from snm_core.text.tokenize import tokenize
    from snm_core.text.vocab import Vocabulary

    vocab_path = corpus(corpus_name, "vocab.txt")
    vocab = Vocabulary.parse(open(vocab_path).read(), vocab_path)
    extractor = FeatureExtractor(load_config(config_name))
    names = [t.name for t in extractor.feature_types]
    thresholded = np.array([n.startswith("skip") or n in {f"{k}-gram" for k in range(6, 10)}
                            for n in names])
    single = os.path.join(os.path.dirname(vocab_path), "train.txt.gz")
    paths = [single] if os.path.exists(single) else sorted(
        glob.glob(os.path.join(corpus(corpus_name, "train"), "*.txt.gz")))
    lines = [line for path in paths
             for line in gzip.open(path, "rt", encoding="utf-8").read().splitlines()]
    features, links = [], []
    for start in range(0, len(lines), 20_000):
        sentences, _, _ = tokenize(lines[start:start + 20_000], vocab)
        for chunk in sentences.chunks(50_000):
            for events in extractor.extract_by_type(chunk):
                if events.num_pairs and thresholded[events.type[0]]:
                    features.append(events.key)
                    links.append(hashing.link_key(events.key, events.target[events.event]))
    return np.concatenate(features), np.concatenate(links)


def true_counts(keys):
    """Each key's count over all of ``keys``, capped at 3 (uint8)."""
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    return np.minimum(counts, 3).astype(np.uint8)[inverse]


def cells_in(line_base, keys):
    """Two cells of one line (the line's first cell ``line_base``), from the key's bits."""
    mask = np.uint64((1 << LINE_CELLS) - 1)
    first = line_base | (keys & mask)
    second = line_base | ((keys >> np.uint64(16)) & mask)
    return first, np.where(second == first, second ^ np.uint64(1), second)


def line_base(keys, log2_cells):
    return (keys >> np.uint64(64 - (log2_cells - LINE_CELLS))) << np.uint64(LINE_CELLS)


def estimates(cell_pairs, log2_cells):
    """The smaller cell of each of ``cell_pairs``, the cells counted over all of them."""
    cells = np.zeros(1 << log2_cells, np.uint8)
    span = 1 << min(log2_cells, 27)  # counted a range of cells at a time: 1 GiB of int64
    for start in range(0, 1 << log2_cells, span):
        counts = np.zeros(span, np.int64)
        for pair in cell_pairs:
            for positions in pair:
                inside = positions[(positions >= np.uint64(start))
                                   & (positions < np.uint64(start + span))]
                counts += np.bincount((inside - np.uint64(start)).view(np.int64),
                                      minlength=span)
        cells[start:start + span] = np.minimum(counts, 3)
    return [np.minimum(cells[a], cells[b]) for a, b in cell_pairs]


def row(layout, log2_cells, feature_estimate, link_estimate, feature_true, link_true):
    dropped = feature_estimate < 2
    collapsed = ~dropped & (link_estimate < 2)
    return {"layout": layout, "cells": f"2^{log2_cells}",
            "occurrences": len(dropped),
            "dropped early": int(dropped.sum()),
            "feature seen once": int((feature_true < 2).sum()),
            "collapsed early": int(collapsed.sum()),
            "link seen once, not dropped": int(((link_true < 2) & ~dropped).sum()),
            "to the scratch as links": int((~dropped & ~collapsed).sum())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="kernel")
    parser.add_argument("--config", default="skip10gram")
    parser.add_argument("--log2_cells", type=int, default=28,
                        help="cells of each of today's two sketches (kernel's count plans "
                             "2^29 within --memory 8G)")
    args = parser.parse_args()
    features, links = thresholded_keys(args.corpus, args.config)
    feature_true, link_true = true_counts(features), true_counts(links)
    rows = []
    log2 = args.log2_cells
    separate_features = cells_in(line_base(features, log2), features)
    separate_links = cells_in(line_base(links, log2), links)
    feature_estimate, = estimates([separate_features], log2)
    link_estimate, = estimates([separate_links], log2)
    rows.append(row("a feature sketch and a link sketch (today)", log2, feature_estimate,
                    link_estimate, feature_true, link_true))
    del separate_features, separate_links, feature_estimate, link_estimate
    shared = log2 + 1
    base = line_base(features, shared)
    feature_cells, link_cells = cells_in(base, features), cells_in(base, links)
    del base
    feature_estimate, link_estimate = estimates([feature_cells, link_cells], shared)
    rows.append(row("one array, a link's cells in its feature's line", shared,
                    feature_estimate, link_estimate, feature_true, link_true))
    print_table(rows, list(rows[0]))
    record("sketch_layouts", [{**r, "corpus": args.corpus, "config": args.config}
                              for r in rows])


if __name__ == "__main__":
    main()
