"""Pruning an n-gram SNM model to a size (``snm prune``), by relative entropy.

An n-gram SNM is a back-off model (:mod:`snm_core.arpa`): P(w | h) = N(h, w) / Z(h)
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
"""

import dataclasses
import math

import numpy as np
import pyarrow as pa

from snm_core import hashing, storage, tables
from snm_core.arpa import backoff_form
from snm_core.config import parse_config
from snm_core.errors import SnmInputError
from snm_core.model import compile_model, read_model_tables, write_model_card


@dataclasses.dataclass
class PruneResult:
    """What :func:`prune_model` kept and removed (model links are matrix rows)."""

    links_before: int
    links_after: int
    features_before: int
    features_after: int
    threshold: float


def entry_scores(form, context_counts):
    """Relative-entropy score of each entry of a :class:`snm_core.arpa.BackoffForm`.

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


def prune_model(model_dir, out_dir, target_links=None, threshold=None, say=print):
    """Write the pruned model of ``model_dir`` into ``out_dir`` (a complete model
    directory: eval, score and export-arpa read it); returns a :class:`PruneResult`."""
    if (target_links is None) == (threshold is None):
        raise SnmInputError("give --target_links N or --threshold T")
    features, matrix, manifest = read_model_tables(model_dir)
    config = parse_config(manifest["config"])
    if config.ngram_order is None:
        raise SnmInputError(f"{model_dir}: snm prune handles n-gram models (the n-grams of "
                            "lengths 0..N-1, no skip-grams) for now")
    if target_links is not None and target_links < 1:
        raise SnmInputError("--target_links must be at least 1")
    form = backoff_form(features, matrix, config, model_dir)
    context_counts = np.bincount(form.feature_ctx, weights=features["count"].to_numpy(),
                                 minlength=len(form.ctx_keys))
    scores = entry_scores(form, context_counts)
    effective = effective_scores(form, scores)
    rows_per_entry = np.bincount(form.row_link, minlength=len(effective))
    keep_entry, applied = select_entries(form, effective, rows_per_entry, target_links,
                                         threshold)
    keep_row = keep_entry[form.row_link]
    pruned_features, pruned_matrix = _pruned_tables(features, matrix, keep_row)
    _write_model(model_dir, out_dir, manifest, pruned_features, pruned_matrix, {
        "criterion": "relative entropy in the back-off form (snm_core/prune.py)",
        "target_links": target_links, "threshold": applied,
        "links_before": matrix.num_rows, "features_before": features.num_rows,
        "source": model_dir})
    result = PruneResult(matrix.num_rows, pruned_matrix.num_rows, features.num_rows,
                         pruned_features.num_rows, applied)
    say(f"snm prune: {result.links_after:,} of {result.links_before:,} links "
        f"({result.links_after / max(result.links_before, 1):.1%}), "
        f"{result.features_after:,} of {result.features_before:,} features -> {out_dir}")
    return result


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


def _write_model(model_dir, out_dir, manifest, features, matrix, pruning):
    """A model directory in the source's bucket layout, its manifest last."""
    if storage.absolute(out_dir) == storage.absolute(model_dir):
        raise SnmInputError("--out must differ from --model: the source stays intact")
    num_buckets = manifest["num_buckets"]
    storage.makedirs(out_dir)
    storage.remove_file(storage.join(out_dir, tables.MANIFEST))
    for name in ("vocab.txt", "theta.npy", "config.cfg"):
        storage.write_bytes(storage.read_bytes(storage.join(model_dir, name)),
                            storage.join(out_dir, name))
    keys = features["feature"].to_numpy()
    feature_bounds = np.searchsorted(hashing.bucket_of(keys, num_buckets),
                                     np.arange(num_buckets + 1))
    row_bounds = np.concatenate([[0], np.cumsum(features["diversity"].to_numpy())])
    for b in range(num_buckets):
        lo, hi = feature_bounds[b], feature_bounds[b + 1]
        storage.write_parquet(features.slice(lo, hi - lo).cast(tables.MODEL_FEATURES),
                              storage.join(out_dir, tables.bucket_file("features", b,
                                                                       num_buckets)))
        storage.write_parquet(matrix.slice(row_bounds[lo], row_bounds[hi] - row_bounds[lo])
                              .cast(tables.MATRIX),
                              storage.join(out_dir, tables.bucket_file("matrix", b,
                                                                       num_buckets)))
    files = [tables.bucket_file(p, b, num_buckets) for p in ("features", "matrix")
             for b in range(num_buckets)]
    storage.remove_stale(out_dir, set(files), ["matrix-*.parquet", "features-*.parquet"])
    storage.remove_tree(storage.join(out_dir, "compact"))
    pruned = {**manifest, "totals": {"links": matrix.num_rows, "features": features.num_rows},
              "pruning": pruning}
    storage.write_json(pruned, storage.join(out_dir, tables.MANIFEST))
    compile_model(out_dir)
    write_model_card(out_dir, pruned)
