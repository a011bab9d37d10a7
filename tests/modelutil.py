"""Build counts, small M and adjustment problems in-process (no Beam) for unit tests."""

import contextlib
import sys
from unittest import mock

import numpy as np
import pyarrow as pa

from snm_core.count import counting
from snm_core.fit import small_m
from snm_core.fit.problem import AdjustmentProblem, Events, type_fingerprints
from snm_core.io.arrays import sorted_distinct
from snm_core.text.config import parse_config, preset
from snm_core.text.features import FeatureExtractor
from snm_core.text.tokenize import tokenize
from snm_core.text.vocab import Vocabulary


@contextlib.contextmanager
def speedups(compiled):
    """Run with the numba speed-ups of ``snm_core.text.compiled`` (True) or hidden (False).

    ``hashing`` and ``Vocabulary.ids`` use them when the module is in
    ``sys.modules``; a None entry there reads as absent.
    """
    import snm_core.text.compiled  # noqa: F401  (load it, so that True means loaded)
    with mock.patch.dict(sys.modules, {} if compiled else {"snm_core.text.compiled": None}):
        yield


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
    _, extensions = counting.extension_keys(features, links, extractor,
                                            counting.parent_types(config))
    return counting.add_continuation(links, extensions), features


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
