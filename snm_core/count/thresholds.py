"""Count thresholds: features seen fewer than N times in training are left out, and links.

``--min_feature_count [TYPES=]N`` (``snm count``, ``snm train``), given any number of
times, later ones overriding earlier ones for the types they name.  TYPES is

* ``skip``: every skip-gram type;
* ``ngram``: every n-gram type of one word or more;
* a type's name, as the count's manifest lists them (``3-gram``, ``skip(r=1,s=*,a=0)``);
* nothing (a bare N): every type but the empty feature.

The empty feature (``0-gram``, the unigram distribution) is never left out.  A feature
below its type's threshold goes with all its links, after the bucket's counts are
complete, so what is kept is exact: C(f,*), C(f,w) and the diversity of every kept
feature are the counts of the whole text.  Continuation counts count the kept
extensions only (:mod:`snm_core.count.sketch` drops the others before they are counted).

``--min_link_count [TYPES=]N`` takes the same TYPES and leaves out the links (f, w) of
those types seen fewer than N times, and a feature left without links.  A kept
feature's C(f,*) stays the whole text's (its c(w|f) = C(f,w)/C(f,*) do not sum to one:
what the links left out carried is not given to the others); its diversity counts its
kept links.

A type's threshold may not be below the threshold of the type it extends (an n-gram of
the (n-1)-gram; a skip-gram (r, s, a) of (r-1, s, a)): an extension occurs at most as
often as the feature it extends, so the kept features stay closed under suffixes, which
scoring, back-off pruning and ARPA export rely on.
"""

import numpy as np
import pyarrow as pa

from snm_core.count import size_thresholds
from snm_core.io.arrays import run_starts
from snm_core.io.errors import SnmInputError

OPTION = "--min_feature_count"
LINK_OPTION = "--min_link_count"


def parse(specs, feature_types, parents, option=OPTION):
    """``{type name: N}`` (N >= 2, in the types' order) of the ``[TYPES=]N`` ``specs``.

    ``feature_types``: the configuration's :class:`~snm_core.text.config.FeatureType`\\ s;
    ``parents``: each type's index of the type it extends, -1 if none
    (:func:`snm_core.count.continuation.parent_types`).
    """
    minimum = [1] * len(feature_types)
    names = [t.name for t in feature_types]
    for spec in specs:
        selector, _, value = str(spec).rpartition("=")
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise SnmInputError(f"{option} {spec}: give [TYPES=]N with N a whole number of at "
                                "least 1, e.g. skip=2")
        chosen = _select(selector, feature_types, names, spec, option)
        for i in chosen:
            minimum[i] = n
    for i, p in enumerate(parents):
        if p >= 0 and minimum[i] < minimum[p]:
            raise SnmInputError(
                f"{option}: {names[i]} has threshold {minimum[i]}, below the {minimum[p]} of "
                f"{names[p]}, the type it extends; give it at least {minimum[p]}")
    return {name: n for name, n in zip(names, minimum) if n > 1}


def _select(selector, feature_types, names, spec, option):
    if selector == "":
        return [i for i, t in enumerate(feature_types) if t.num_words > 0]
    if selector == "skip":
        return [i for i, t in enumerate(feature_types) if t.kind == "skip"]
    if selector == "ngram":
        return [i for i, t in enumerate(feature_types) if t.kind == "ngram" and t.adjacent > 0]
    if selector == "0-gram":
        raise SnmInputError(f"{option} {spec}: the empty feature (0-gram) gives the unigram "
                            "distribution and is always kept")
    if selector in names:
        return [names.index(selector)]
    raise SnmInputError(f"{option} {spec}: no feature type {selector!r} in this configuration; "
                        f"give skip, ngram or one of {', '.join(names[1:])}")


def per_type(thresholds, feature_names):
    """The threshold of each type (1: none) as an int64 array, from ``{name: N}``."""
    return np.array([thresholds.get(name, 1) for name in feature_names], dtype=np.int64)


def collapse_links(links, keep, collapsed_word):
    """A batch's summed links partial (sorted by feature, then word) with the rows not in
    the bool mask ``keep`` summed into one row a feature, of word ``collapsed_word`` (the
    vocabulary's size: no word's id): the link sketch's early drop, which keeps what
    C(f,*) needs and leaves the rows to :func:`keep_counted`."""
    dropped = ~keep
    feature, count = links["feature"][dropped], links["count"][dropped]
    starts = run_starts(feature)
    merged = {"feature": np.concatenate([links["feature"][keep], feature[starts]]),
              "word": np.concatenate([links["word"][keep],
                                      np.full(len(starts), collapsed_word, np.int32)]),
              "count": np.concatenate([links["count"][keep], np.add.reduceat(count, starts)])}
    # kept rows first, each feature's collapsed row after them: (feature, word) order
    order = np.argsort(merged["feature"], kind="stable")
    return {name: column[order] for name, column in merged.items()}


def keep_counted(features, links, minimum, link_minimum=None, collapsed_word=None,
                 partial=None):
    """A bucket's tables without the features below their type's threshold, nor their
    links, nor the links below their type's link threshold (and the features left
    without links).

    ``features`` (:data:`snm_core.io.tables.FEATURES`, sorted by key) and ``links`` (its
    links, grouped by feature in the same order, ``diversity`` rows each); ``minimum``
    and ``link_minimum``: :func:`per_type`; ``collapsed_word``: the word of the rows
    :func:`collapse_links` made, left out too; ``partial``: ``(lower, cut, widths)``,
    links seen at least ``lower[t]`` times whose bin is below ``cut`` kept as well
    (:mod:`snm_core.count.size_thresholds`).  Returns ``(features, links, left_out)``,
    ``left_out`` the total ``below_threshold_occurrences`` (the C(f,w) of the links
    left out).
    """
    count = features["count"].to_numpy()
    diversity = features["diversity"].to_numpy()
    type_index = features["type"].to_numpy().astype(np.int64)
    kept = count >= minimum[type_index]
    link_kept = np.repeat(kept, diversity)
    if link_minimum is not None:
        link_count, link_type = links["count"].to_numpy(), np.repeat(type_index, diversity)
        above = link_count >= link_minimum[link_type]
        if partial is not None:
            lower, cut, widths = partial
            above |= (link_count >= lower[link_type]) & (
                size_thresholds.link_bins(features, links, widths) < cut)
        link_kept &= above
    if collapsed_word is not None:
        link_kept &= links["word"].to_numpy() != collapsed_word
    if link_kept.all():
        return features, links, {"below_threshold_occurrences": 0}
    left_out = int(links["count"].to_numpy()[~link_kept].sum())
    row_feature = np.repeat(np.arange(len(count)), diversity)
    kept_diversity = np.bincount(row_feature[link_kept], minlength=len(count))
    alive = kept_diversity > 0
    features = features.filter(pa.array(alive))
    features = features.set_column(features.schema.get_field_index("diversity"), "diversity",
                                   pa.array(kept_diversity[alive].astype(np.int64)))
    return features, links.filter(pa.array(link_kept)), {
        "below_threshold_occurrences": left_out}
