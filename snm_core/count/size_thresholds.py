"""Link thresholds chosen for a size: the counts a model of at most N links or bytes is
fitted on (``snm train --prune_to`` of a model that is not an n-gram model).

Pruning after the fit removes links the adjustment was fitted with; fitting on the
links kept does far better (DESIGN.md 2.8).  So the count is thresholded again, by
the lowest *level* T of a ladder of link thresholds (:func:`ladder`) whose links and
features fit, and the model is fitted on that.  The kept links and features of every
level are read off two histograms of the count (:func:`histograms`), so the level is
chosen without counting again; :func:`snm_core.count.thresholds.keep_counted` then
keeps exactly those.

Level T asks a skip-gram link, or an n-gram link of :data:`PIVOT_ORDER` words or more,
to be seen T times, and an n-gram link of n < :data:`PIVOT_ORDER` words T / 2^(PIVOT_ORDER
- n) times (rounded up): a 5-gram link half as often as a skip-gram one, a 4-gram link
a quarter.  On kernel's skip-10-gram counts, leaving out the 5-gram links seen once
cost less perplexity a byte than the skip-gram links seen 4 or 5 times (the
measurements: benchmarks/README.md, "Fitted at a size").  The ladder never lowers a
threshold the count was given, and each type's threshold stays at least its parent
type's (an n-gram of fewer words has a lower or equal threshold; a skip-gram's parent
is a skip-gram), so the kept model stays suffix-closed.
"""

import math

import numpy as np

from snm_core.io.errors import SnmInputError

#: Link counts at or above this share the histograms' last cell: a level above it is
#: never needed (a model whose every link was seen this often is a handful of links).
CAP = 1024
#: The n-gram length from which n-gram links take the level's threshold itself.
PIVOT_ORDER = 6


def histograms(features, links, num_types):
    """Of one count bucket: ``(2, num_types, CAP + 1)`` int64, ``[0, t, c]`` the links of
    type t seen c times (c capped at CAP) and ``[1, t, c]`` the features of type t whose
    most frequent link was seen c times.

    ``features``, ``links``: the bucket's tables (:data:`snm_core.io.tables.FEATURES`,
    :data:`~snm_core.io.tables.LINKS`), the links grouped by feature in its order."""
    counts = np.zeros((2, num_types, CAP + 1), np.int64)
    diversity = features["diversity"].to_numpy()
    if not features.num_rows or not diversity.sum():
        return counts
    feature_type = features["type"].to_numpy().astype(np.int64)
    link_count = np.minimum(links["count"].to_numpy(), CAP).astype(np.int64)
    has_links = diversity > 0
    starts = np.r_[0, np.cumsum(diversity)[:-1]][has_links]
    most = np.maximum.reduceat(link_count, starts)
    counts[0] = np.bincount(np.repeat(feature_type, diversity) * (CAP + 1) + link_count,
                            minlength=num_types * (CAP + 1)).reshape(num_types, CAP + 1)
    counts[1] = np.bincount(feature_type[has_links] * (CAP + 1) + most,
                            minlength=num_types * (CAP + 1)).reshape(num_types, CAP + 1)
    return counts


def ladder(level, feature_types, given):
    """The link threshold of each type (int64, 1: none) at ``level``, never below
    ``given`` (the count's own, :func:`snm_core.count.thresholds.per_type`)."""
    minimum = np.array(given, np.int64)
    for i, t in enumerate(feature_types):
        if t.kind == "skip" or t.num_words >= PIVOT_ORDER:
            step = level
        elif t.num_words == 0:
            continue  # the empty feature: the unigram distribution, always whole
        else:
            step = math.ceil(level / 2 ** (PIVOT_ORDER - t.num_words))
        minimum[i] = max(minimum[i], step)
    return minimum


def kept(counts, minimum):
    """``(features, links)`` a count of :func:`histograms` ``counts`` keeps with the link
    thresholds ``minimum`` (one a type)."""
    at_least = np.arange(CAP + 1)[None, :] >= np.minimum(minimum, CAP)[:, None]
    return int(counts[1][at_least].sum()), int(counts[0][at_least].sum())


def choose(counts, feature_types, given, fits):
    """The lowest level whose kept ``(features, links)`` satisfy ``fits(features, links)``:
    ``(level, thresholds, features, links)``, ``thresholds`` :func:`ladder`'s.  Raises
    :class:`SnmInputError` when even level :data:`CAP` does not fit."""
    for level in range(1, CAP + 1):
        minimum = ladder(level, feature_types, given)
        features, links = kept(counts, minimum)
        if fits(features, links):
            return level, minimum, features, links
    raise SnmInputError(f"no link thresholds up to {CAP} give a model that small "
                        f"({features:,} features and {links:,} links at the highest); "
                        "give a larger size")
