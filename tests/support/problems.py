"""Counts, small M and adjustment problems built in-process (no Beam) for the fit's unit
tests, and the tiny problem they share."""

import numpy as np
import pyarrow as pa

from snm_core.count import continuation, counting
from snm_core.join import small_m
from snm_core.fit.metafeatures import VARIANTS
from snm_core.fit.heldout import Events, type_fingerprints
from snm_core.fit.problem import AdjustmentProblem
from snm_core.io.arrays import sorted_distinct
from snm_core.text import synthetic
from snm_core.text.config import parse_config, preset
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import tokenize
from snm_core.text.vocab import Vocabulary

#: The tiny problem of the trainer's and the C loops' tests: two tagged halves of TRAIN,
#: held out on HELDOUT, with SKIP's features, under each meta-feature spec of SPECS.
TRAIN = synthetic.generate(400, seed=1)
HELDOUT = synthetic.generate(60, seed=2)
SKIP = ("ngram_extractor { min_n: 0 max_n: 2 }\n"
        "skip_ngram_extractor { max_context_words: 2 max_remote_words: 1 max_skip_length: 5 "
        "tie_skip_length: true }")
SPECS = [(v, d, c) for v in VARIANTS for d in (False, True) for c in (False, True)
         if not (c and v == "feature-only")]


def spec_name(params):
    """A test id for a ``(variant, diversity, continuation)`` of :data:`SPECS`."""
    variant, diversity, continuation = params
    return variant + ("+diversity" if diversity else "") + ("+continuation" if continuation else "")


def vocabulary(lines):
    return Vocabulary(sorted({w for line in lines for w in line.split()}))


def count_tables(config, sources, vocab, tags=None):
    """Link and feature tables (one bucket) of ``sources``: ``[[lines of source 0], ...]``."""
    tags = tags or [""] * len(sources)
    extractor = FeatureExtractor(config, tags)
    link_parts, feature_parts = [], []
    for index, lines in enumerate(sources):
        batch, _, _ = tokenize(lines, vocab)
        links, features = counting.batch_partials(extractor.extract(batch, tags=[index]))
        link_parts.append(links)
        feature_parts.append(features)
    links, features, _ = counting.merge_bucket(link_parts, feature_parts,
                                               len(config.feature_types()))
    names = continuation.extension_names(features, links, extractor,
                                         continuation.parent_types(config))
    return continuation.add_continuation(links, names), features


def join_tables(config, sources, heldout_lines, vocab, tags=None):
    """``(small M table, events table, manifest-like dict)`` for held-out lines."""
    tags = tags or [""] * len(sources)
    links, features = count_tables(config, sources, vocab, tags)
    extractor = FeatureExtractor(config, tags)
    batch, kept, _ = tokenize(heldout_lines, vocab)
    events = extractor.extract(batch)
    events_table = small_m.events_table(events, 0, kept + 1)
    rows = small_m.select_rows(features, links, sorted_distinct(events.key))
    manifest = {"config": config.to_text(), "tags": list(tags),
                "feature_types": [t.name for t in config.feature_types()]}
    return rows, events_table, manifest


def problem(config, sources, heldout_lines, spec, vocab=None, tags=None, threads=None):
    """An AdjustmentProblem built directly from text."""
    if isinstance(config, str):
        config = preset(config) if "{" not in config else parse_config(config)
    vocab = vocab or vocabulary([line for s in sources for line in s] + list(heldout_lines))
    rows, events, manifest = join_tables(config, sources, heldout_lines, vocab, tags)
    return AdjustmentProblem([rows], Events.from_table(events), spec, type_fingerprints(manifest),
                             len(manifest["feature_types"]), threads)


#: Step of the finite differences: theta is float32 and its random values are
#: multiples of GRID, so theta +- STEP is exact and the difference is the
#: one the step was meant to make.
GRID, STEP = 2.0 ** -10, 2.0 ** -12


def random_theta(prob, scale, seed=0):
    """float32 weights ~ N(0, scale), on a grid that finite-difference steps keep exact."""
    values = np.random.default_rng(seed).normal(0, scale, prob.num_params)
    return (np.round(values / GRID) * GRID).astype(np.float32)


def table_rows(table):
    return pa.Table.to_pylist(table)
