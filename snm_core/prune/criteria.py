"""Pruning an SNM model to a size (``snm prune``): the criteria that score links bucket by
bucket, and writing a pruned model.

``backoff`` (n-gram configurations, ARPA-exportable output) is
:mod:`snm_core.prune.backoff`: it needs the back-off form, whose values come
from other buckets' rows.

``mass`` and ``count`` (any configuration; bucket by bucket, the Beam pipeline
:mod:`pipelines.prune`): where features overlap arbitrarily (skip-grams), the
other features that fire with f, and so N(h, w) and Z(h), are not known from
f's row.  A link is scored by the probability mass it carries: how often its
feature fires, C(f, *) / E (E the training events), times its share of the
feature: M_fw / M_f*, the adjusted model's (``mass``), or c(w | f), the relative
frequency, which makes the score C(f, w) / E (``count``).  Each breaks the
other's ties (many: links seen once).  The empty feature's links are never
removed, so every word keeps a probability.  With held-out text (the join's
small M), the features it touches weigh ``heldout_weight`` times more: they are
the ones text of the domain that matters fires.

How the criteria compare, and the scores tried before them (the adjusted mass
unnormalised, the relative entropy against the empty feature alone), is in
benchmarks/README.md, "Pruning".  The global cut is found by radix selection
over per-bucket histograms (:func:`select_rank`), so no worker holds more than
a bucket.

Every criterion writes the pruned model in the source's buckets
(:func:`start_output`, :func:`write_bucket`, :func:`finish_output`), each feature's
diversity, count and M_f* recomputed from the links it keeps
(:func:`pruned_tables`).
"""

import dataclasses

import numpy as np
import pyarrow as pa

from snm_core.io import model_files, storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.stages import manifests
from snm_core.text import hashing


def pruned_tables(features, matrix, keep_row):
    """The kept rows of the matrix; each feature's diversity, count and M_f* recomputed
    from its kept links (exact renormalisation), features left without links dropped."""
    diversity = features["diversity"].to_numpy()
    feature_of_row = np.repeat(np.arange(features.num_rows), diversity)
    kept_feature_of_row = feature_of_row[keep_row]
    n = features.num_rows
    new_diversity = np.bincount(kept_feature_of_row, minlength=n)
    new_count = np.bincount(kept_feature_of_row,
                            weights=matrix["count"].to_numpy()[keep_row], minlength=n)
    new_m_star = np.bincount(kept_feature_of_row,
                             weights=matrix["m"].to_numpy()[keep_row].astype(np.float64),
                             minlength=n)
    alive = new_diversity > 0
    pruned_features = features.filter(pa.array(alive)).set_column(
        features.schema.get_field_index("count"), "count",
        pa.array(np.rint(new_count[alive]).astype(np.int64))).set_column(
        features.schema.get_field_index("diversity"), "diversity",
        pa.array(new_diversity[alive].astype(np.int64))).set_column(
        features.schema.get_field_index("m_star"), "m_star", pa.array(new_m_star[alive]))
    return pruned_features, matrix.filter(pa.array(keep_row))


def start_output(model_dir, out_dir):
    """The pruned model's directory: no manifest (until :func:`finish_output`), no
    compact/, the source's vocabulary, theta and configuration."""
    if storage.absolute(out_dir) == storage.absolute(model_dir):
        raise SnmInputError("--out must differ from --model: the source stays intact")
    storage.makedirs(out_dir)
    storage.remove_file(storage.join(out_dir, tables.MANIFEST))
    storage.remove_tree(storage.join(out_dir, "compact"))
    for name in ("vocab.txt", "theta.npy", "config.cfg"):
        storage.write_bytes(storage.read_bytes(storage.join(model_dir, name)),
                            storage.join(out_dir, name))


def write_bucket(out_dir, bucket, num_buckets, features, matrix):
    """One bucket's ``features`` and ``matrix`` files of a pruned model."""
    model_files.write_bucket(out_dir, bucket, num_buckets, features, matrix)


def finish_output(out_dir, manifest, links, features, pruning):
    """The pruned model's manifest (the source's, with its sizes and ``pruning``),
    written last, after stale bucket files are removed; returns it."""
    num_buckets = manifest["num_buckets"]
    files = model_files.file_names(num_buckets)
    storage.remove_stale(out_dir, set(files), model_files.PATTERNS)
    pruned = {**manifest, "totals": {"links": links, "features": features},
              "pruning": pruning}
    return manifests.write_manifest(pruned, out_dir)  # the source's checksums replaced


# --- the mass and count criteria, bucket by bucket -----------------------------------------

#: Selection reads a link's rank (:func:`rank_keys`) in RANK_LEVELS digits of
#: RANK_DIGIT_BITS.
RANK_DIGIT_BITS = 16
RANK_LEVELS = 64 // RANK_DIGIT_BITS

#: Criteria scored bucket by bucket: their ranks' primary and tie-breaking masses
#: (:func:`link_masses`).
BUCKET_CRITERIA = {"mass": ("adjusted", "count"), "count": ("count", "adjusted")}


def link_masses(features, matrix, total_events, heldout_features=None, heldout_weight=1.0):
    """The two masses a link carries, for every link of one bucket.

    Parameters
    ----------
    features : pyarrow.Table, model features schema (``feature``, ``count``,
        ``diversity``, ``m_star``), one bucket
    matrix : pyarrow.Table, matrix schema (``count``, ``m``), the bucket's links
        grouped by feature
    total_events : int, training events E (the count's ``events``)
    heldout_features : sorted uint64 array, optional: the keys of the features the
        held-out text touches (its small M's rows)
    heldout_weight : float, how much more those features weigh

    Returns
    -------
    dict of float64 arrays (links,):
        ``count``: C(f, w) / E = C(f, *) / E x c(w | f), the training mass;
        ``adjusted``: C(f, *) / E x M_fw / M_f*, the link's share of its feature's
        adjusted mass for c(w | f).
    Both times ``heldout_weight`` for the features in ``heldout_features``.
    """
    diversity = features["diversity"].to_numpy()
    if int(diversity.sum()) != matrix.num_rows:
        raise SnmInputError("model bucket files disagree: diversities do not sum to the "
                            "number of links; re-run snm apply")
    row = np.repeat(np.arange(features.num_rows), diversity)
    weight = np.full(features.num_rows, 1.0 / max(float(total_events), 1.0))
    if heldout_features is not None:
        weight[np.isin(features["feature"].to_numpy(), heldout_features)] *= heldout_weight
    m_star = features["m_star"].to_numpy()[row]
    shares = np.divide(matrix["m"].to_numpy().astype(np.float64), m_star,
                       out=np.zeros(matrix.num_rows), where=m_star > 0)
    return {"count": matrix["count"].to_numpy() * weight[row],
            "adjusted": features["count"].to_numpy()[row] * weight[row] * shares}


@dataclasses.dataclass(frozen=True)
class BucketScoring:
    """How ``snm prune --criterion mass|count`` ranks the links of a bucket."""

    criterion: str
    total_events: int
    protected_types: tuple = ()  # the empty feature's type indices: its links stay
    heldout_weight: float = 1.0

    def ranks(self, features, matrix, heldout_features=None):
        """``(ranks, protected)``: uint64 and bool arrays (links,); see :func:`rank_keys`."""
        masses = link_masses(features, matrix, self.total_events, heldout_features,
                             self.heldout_weight)
        primary, tie = (masses[name] for name in BUCKET_CRITERIA[self.criterion])
        protected = np.repeat(np.isin(features["type"].to_numpy(),
                                      np.asarray(self.protected_types, np.int64)),
                              features["diversity"].to_numpy())
        primary[protected] = np.inf
        ranks = rank_keys(primary, tie, matrix["feature"].to_numpy(),
                          matrix["word"].to_numpy())
        return ranks, protected


def rank_keys(scores, ties, feature_keys, words):
    """uint64 rank of each link; higher is kept first.

    The score's float32 bits, then the top 22 bits of the tie-breaking value's
    (sign 0, exponent, 14 of the mantissa), then the top 10 bits of the link key, so
    that a cut can fall inside a run of equal scores and tie-breaks.
    """
    def bits(values):
        return np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)

    key = hashing.link_key(feature_keys, words)
    return ((bits(scores) << np.uint64(32)) | ((bits(ties) >> np.uint64(9)) << np.uint64(10))
            | (key >> np.uint64(54)))


def score_rank(score):
    """The smallest rank a link with ``score`` (a threshold) can have."""
    return int(np.asarray([score], np.float32).view(np.uint32)[0]) << 32


def rank_histogram(ranks, level, prefix):
    """Counts of digit ``level`` (0 the top) among ``ranks`` whose higher digits are
    ``prefix``: int64 array, shape (2 ** RANK_DIGIT_BITS,)."""
    shift = np.uint64(64 - RANK_DIGIT_BITS * (level + 1))
    ranks = np.asarray(ranks, np.uint64)
    if level:
        ranks = ranks[(ranks >> (shift + np.uint64(RANK_DIGIT_BITS))) == np.uint64(prefix)]
    digits = (ranks >> shift) & np.uint64((1 << RANK_DIGIT_BITS) - 1)
    return np.bincount(digits.astype(np.int64), minlength=1 << RANK_DIGIT_BITS)


def select_rank(histogram, target, tolerance=0):
    """The rank threshold that keeps ``target`` links, give or take ``tolerance``.

    Parameters
    ----------
    histogram : callable(level, prefix) -> int64 array (2 ** RANK_DIGIT_BITS,)
        :func:`rank_histogram` summed over every bucket's ranks.
    target : int, links to keep
    tolerance : int, how far from ``target`` the kept number may be

    Returns
    -------
    (threshold, kept): keep the links whose rank is >= ``threshold``; ``kept`` of them.
    Radix selection: each level narrows to one digit, so at most RANK_LEVELS passes
    over the buckets; it stops at the first cut within ``tolerance``.  Links with one
    rank go together.
    """
    prefix, above = 0, 0  # the digits chosen so far; links ranked above them (kept)
    for level in range(RANK_LEVELS):
        counts = np.asarray(histogram(level, prefix), np.int64)
        at_least = above + np.cumsum(counts[::-1])[::-1]  # kept when cut at digit d
        if level == 0 and at_least[0] <= target:
            return 0, int(at_least[0])
        digit = int(np.flatnonzero(at_least >= target)[-1])
        shift = 64 - RANK_DIGIT_BITS * (level + 1)
        cut = ((prefix << RANK_DIGIT_BITS) | digit) << shift
        after = int(at_least[digit + 1]) if digit + 1 < len(counts) else above
        over, under = int(at_least[digit]) - target, target - after
        if min(over, under) <= tolerance or level == RANK_LEVELS - 1:
            # the closer of the two cuts: keep this digit, or only the digits above it
            # (cut + 1 << shift; ranks never reach 2^64: a score's sign bit is 0)
            return (cut, over + target) if over <= under else (cut + (1 << shift), after)
        prefix, above = (prefix << RANK_DIGIT_BITS) | digit, after
    raise AssertionError("unreachable")


def prune_bucket(features, matrix, scoring, threshold_rank, heldout_features=None):
    """One bucket of the pruned model: ``(features, matrix)`` with the links ranked at
    least ``threshold_rank`` by ``scoring`` (a :class:`BucketScoring`) and the
    protected ones, M_f* renormalised exactly (see :func:`pruned_tables`)."""
    ranks, protected = scoring.ranks(features, matrix, heldout_features)
    return pruned_tables(features, matrix, (ranks >= np.uint64(threshold_rank)) | protected)
