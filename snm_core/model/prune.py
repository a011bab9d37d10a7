"""Pruning an SNM model to a size (``snm prune``): two criteria.

``backoff`` (n-gram configurations, one worker, ARPA-exportable output):

An n-gram SNM is a back-off model (:mod:`snm_core.model.arpa`): P(w | h) = N(h, w) / Z(h)
for an entry (h, w) the model has, with N(h, w) = M_hw + N(h', w) and
Z(h) = M_h* + Z(h').  Removing the link (h, w), with M_h* renormalised exactly
(M_h* = the sum of the links left), takes m = M_hw from both: P(w | h) becomes
(N - m) / (Z - m), and every other word's probability in context h, seen or backed
off, is multiplied by Z / (Z - m).  The relative entropy this causes in context h is

    D(h, w) = P(w | h) ln(N / (N - m)) + ln((Z - m) / Z)

(the first term the target's loss, the second the mass the normalisation gives
back to the other words), and a link is scored by D weighted by how often its
context occurs in training: C(h, *) / C(*), summed over corpus tags.  This is
Stolcke's entropy pruning written for the SNM's own back-off form, where the
backed-off probability keeps the lower orders' mass that the link shared.  As in
Stolcke's, links are scored independently of one another.

What is removed stays an n-gram model that ARPA can hold: an entry is kept if any
entry that depends on it is kept (its left extension x h w, whose lower order it is,
and the entries of the context h w), so an entry's effective score is the largest
score among it and its dependants; the unigrams are never removed.  The links are
ranked by effective score (ties: shorter n-grams first) and the best kept, up to
``target_links`` model links (the unigrams counted) or down to ``threshold``.

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
"""

import dataclasses
import math

import numpy as np
import pyarrow as pa

from snm_core.io import storage, tables
from snm_core.io.errors import SnmInputError
from snm_core.model.arpa import backoff_form
from snm_core.model.card import write_model_card
from snm_core.model.compact import compile_model, read_model_tables
from snm_core.text import hashing
from snm_core.text.config import parse_config


@dataclasses.dataclass
class PruneResult:
    """What :func:`prune_model` kept and removed (model links are matrix rows)."""

    links_before: int
    links_after: int
    features_before: int
    features_after: int
    threshold: float


def entry_scores(form, context_counts):
    """Relative-entropy score of each entry of a :class:`snm_core.model.arpa.BackoffForm`.

    Parameters
    ----------
    form : BackoffForm
    context_counts : float array, shape (contexts,)
        C(h, *) of each context (its training occurrences), in ``form``'s order.

    Returns
    -------
    float64 array, shape (entries,): D(h, w) C(h, *) / C(*); +inf for unigrams.
    """
    unigram = form.ctx_len[form.l_ctx] == 0
    m, n = form.n_self, form.n_total
    z = form.z[form.l_ctx]
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = (n / z) * -np.log1p(-m / n) + np.log1p(-m / z)
    weight = context_counts[form.l_ctx] / max(float(context_counts.sum()), 1.0)
    return np.where(unigram, np.inf, np.maximum(loss, 0.0) * weight)


def effective_scores(form, scores):
    """Each entry's score raised to the largest of its dependants' (its left
    extensions and the entries of the context it forms), longest n-grams first, so
    that keeping the best-scored entries keeps an n-gram model."""
    effective = scores.copy()
    entry_len = form.ctx_len[form.l_ctx] + 1
    for n in range(form.order, 1, -1):
        rows = np.flatnonzero(entry_len == n)
        for parents in (form.suffix_link[rows], form.prefix_link[rows]):
            has = parents >= 0
            np.maximum.at(effective, parents[has], effective[rows[has]])
    return effective


def select_entries(form, effective, rows_per_entry, target_links=None, threshold=None):
    """Boolean mask of the entries kept, and the threshold that was applied.

    Ranked by effective score, ties broken by shorter n-grams first (a parent's
    effective score is at least its dependants'), then by entry; the best are kept
    until ``target_links`` model links (rows) or while the score is >= ``threshold``.
    """
    entry_len = form.ctx_len[form.l_ctx] + 1
    ranked = np.lexsort((np.arange(len(effective)), entry_len, -effective))
    keep = np.zeros(len(effective), bool)
    if target_links is not None:
        kept_rows = np.cumsum(rows_per_entry[ranked])
        count = int(np.searchsorted(kept_rows, target_links, side="right"))
        count = max(count, int(np.count_nonzero(np.isinf(effective))))  # the unigrams
        keep[ranked[:count]] = True
        applied = float(effective[ranked[count - 1]]) if count else math.inf
    else:
        keep = effective >= threshold
        applied = float(threshold)
    return keep, applied


def prune_model(model_dir, out_dir, target_links=None, threshold=None, layout="hashed",
                say=print):
    """Write the pruned model of ``model_dir`` into ``out_dir`` (a complete model
    directory: eval, score and export-arpa read it, its ``compact/`` in ``layout``);
    returns a :class:`PruneResult`."""
    if (target_links is None) == (threshold is None):
        raise SnmInputError("give --target_links N or --threshold T")
    features, matrix, manifest = read_model_tables(model_dir)
    config = parse_config(manifest["config"])
    if config.ngram_order is None:
        raise SnmInputError(f"{model_dir}: the backoff criterion needs an n-gram model (the "
                            "n-grams of lengths 0..N-1, no skip-grams); use --criterion mass")
    if target_links is not None and target_links < 1:
        raise SnmInputError("--target_links must be at least 1")
    keep_row, applied = _backoff_choice(features, matrix, config, model_dir, target_links,
                                        threshold)
    pruned_features, pruned_matrix = _pruned_tables(features, matrix, keep_row)
    _write_model(model_dir, out_dir, manifest, pruned_features, pruned_matrix, {
        "criterion": "relative entropy in the back-off form (snm_core/model/prune.py)",
        "suffix_closed": True,
        "target_links": target_links, "threshold": applied,
        "links_before": matrix.num_rows, "features_before": features.num_rows,
        "source": model_dir}, layout)
    result = PruneResult(matrix.num_rows, pruned_matrix.num_rows, features.num_rows,
                         pruned_features.num_rows, applied)
    say(f"snm prune: {result.links_after:,} of {result.links_before:,} links "
        f"({result.links_after / max(result.links_before, 1):.1%}), "
        f"{result.features_after:,} of {result.features_before:,} features -> {out_dir}")
    return result


def _backoff_choice(features, matrix, config, model_dir, target_links, threshold):
    """``(keep, threshold applied)``: which matrix rows the backoff criterion keeps.  The
    back-off form is a whole model's arrays: it is gone before the pruned model is
    written and compiled."""
    form = backoff_form(features, matrix, config, model_dir)
    context_counts = np.bincount(form.feature_ctx, weights=features["count"].to_numpy(),
                                 minlength=len(form.ctx_keys))
    effective = effective_scores(form, entry_scores(form, context_counts))
    rows_per_entry = np.bincount(form.row_link, minlength=len(effective))
    keep_entry, applied = select_entries(form, effective, rows_per_entry, target_links,
                                         threshold)
    return keep_entry[form.row_link], applied


def _pruned_tables(features, matrix, keep_row):
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


def _write_model(model_dir, out_dir, manifest, features, matrix, pruning, layout="hashed"):
    """A model directory in the source's bucket layout, its manifest last, ``compact/``
    in ``layout``."""
    start_output(model_dir, out_dir)
    num_buckets = manifest["num_buckets"]
    keys = features["feature"].to_numpy()
    feature_bounds = np.searchsorted(hashing.bucket_of(keys, num_buckets),
                                     np.arange(num_buckets + 1))
    row_bounds = np.concatenate([[0], np.cumsum(features["diversity"].to_numpy())])
    for b in range(num_buckets):
        lo, hi = feature_bounds[b], feature_bounds[b + 1]
        write_bucket(out_dir, b, num_buckets, features.slice(lo, hi - lo),
                     matrix.slice(row_bounds[lo], row_bounds[hi] - row_bounds[lo]))
    pruned = finish_output(out_dir, manifest, matrix.num_rows, features.num_rows, pruning)
    compile_model(out_dir, layout)
    write_model_card(out_dir, pruned)


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
    storage.write_parquet(features.cast(tables.MODEL_FEATURES), storage.join(
        out_dir, tables.bucket_file("features", bucket, num_buckets)))
    storage.write_parquet(matrix.cast(tables.MATRIX), storage.join(
        out_dir, tables.bucket_file("matrix", bucket, num_buckets)))


def finish_output(out_dir, manifest, links, features, pruning):
    """The pruned model's manifest (the source's, with its sizes and ``pruning``),
    written last, after stale bucket files are removed; returns it."""
    num_buckets = manifest["num_buckets"]
    files = [tables.bucket_file(p, b, num_buckets) for p in ("features", "matrix")
             for b in range(num_buckets)]
    storage.remove_stale(out_dir, set(files), ["matrix-*.parquet", "features-*.parquet"])
    pruned = {**manifest, "totals": {"links": links, "features": features},
              "pruning": pruning}
    storage.write_json(pruned, storage.join(out_dir, tables.MANIFEST))
    return pruned


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
    protected ones, M_f* renormalised exactly (see :func:`_pruned_tables`)."""
    ranks, protected = scoring.ranks(features, matrix, heldout_features)
    return _pruned_tables(features, matrix, (ranks >= np.uint64(threshold_rank)) | protected)
