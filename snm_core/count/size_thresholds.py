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

Between the level that does not fit and the next, which does, a share of the links the
step would leave out is kept: those whose *bin* (:func:`link_bins`, one of
:data:`BINS`, from a hash of the word and of the newest words of the feature, which a
feature shares with the features it extends and that extend it) is below a cut.  A link
and the link it extends, both at their type's threshold, fall in one bin, so the kept
model stays suffix-closed; as every step raises a threshold by one at most, the links
and features kept at each cut are read off histograms too.
"""

import math

import numpy as np

from snm_core.io.errors import SnmInputError

#: Link counts at or above this share the histograms' last cell: a level above it is
#: never needed (a model whose every link was seen this often is a handful of links).
CAP = 1024
#: The n-gram length from which n-gram links take the level's threshold itself.
PIVOT_ORDER = 6
#: Bins of the links a step between levels leaves out; the share kept is a multiple of
#: 1 / BINS.  Thresholds of BINS or more are stepped whole.
BINS = 64
_BIN_SHIFT = np.uint64(64 - 6)  # log2(BINS)


def _mix(x):
    """splitmix64's finaliser, elementwise (uint64, wrapping)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def root_widths(feature_types, parents):
    """For each type, how many of a feature's newest words the type shares with every type
    of its chain (the type it extends, the type that one extends, ...): the words of the
    chain's first type; 0 for the empty feature."""
    widths = np.zeros(len(feature_types), np.int64)
    for i, t in enumerate(feature_types):
        root = i
        while parents[root] >= 0 and feature_types[parents[root]].num_words > 0:
            root = parents[root]
        widths[i] = feature_types[root].num_words
    return widths


def link_bins(features, links, widths):
    """The bin (uint8, below :data:`BINS`) of each link of a bucket: a hash of its word
    and of its feature's newest ``widths[type]`` words (the words lists hold the oldest
    first), the same for a link and the links it extends or that extend it."""
    lists = features["words"].combine_chunks()
    flat = lists.values.to_numpy().astype(np.uint64)
    ends = lists.offsets.to_numpy()[1:].astype(np.int64)
    width = widths[features["type"].to_numpy().astype(np.int64)]
    mixed = _mix(width.astype(np.uint64))
    for j in range(int(width.max(initial=0))):
        has = width > j
        at = np.where(has, ends - width + j, 0)
        word = np.take(flat, at) if len(flat) else np.zeros(len(at), np.uint64)
        mixed = np.where(has, _mix(mixed ^ (word + np.uint64(1))), mixed)
    link_feature = np.repeat(mixed, features["diversity"].to_numpy())
    word = links["word"].to_numpy().astype(np.uint64)
    return (_mix(link_feature ^ (word + np.uint64(1))) >> _BIN_SHIFT).astype(np.uint8)


class Histograms:
    """Of a count (bucket histograms add up): ``links[t, c]`` the links of type t seen c
    times (c capped at :data:`CAP`), ``features[t, c]`` the features of type t whose most
    frequent link was seen c times; ``binned_links[t, c, b]`` and ``binned_features[t, c,
    b]`` the same for c below :data:`BINS`, by the link's bin (a feature: the least bin of
    its links seen c times)."""

    def __init__(self, links, features, binned_links, binned_features):
        self.links, self.features = links, features
        self.binned_links, self.binned_features = binned_links, binned_features

    @classmethod
    def empty(cls, num_types):
        return cls(*(np.zeros((num_types, CAP + 1), np.int64) for _ in range(2)),
                   *(np.zeros((num_types, BINS, BINS), np.int64) for _ in range(2)))

    def __add__(self, other):
        return Histograms(self.links + other.links, self.features + other.features,
                          self.binned_links + other.binned_links,
                          self.binned_features + other.binned_features)

    def arrays(self):
        return {"links": self.links, "features": self.features,
                "binned_links": self.binned_links, "binned_features": self.binned_features}


def _table(rows, column, num_types, width):
    return np.bincount(rows * width + column, minlength=num_types * width)


def histograms(features, links, num_types, widths):
    """The :class:`Histograms` of one count bucket: ``features``, ``links`` its tables
    (:data:`snm_core.io.tables.FEATURES` with ``type``, ``diversity`` and ``words``;
    :data:`~snm_core.io.tables.LINKS` with ``count`` and ``word``), the links grouped by
    feature in its order; ``widths``: :func:`root_widths`."""
    counts = Histograms.empty(num_types)
    diversity = features["diversity"].to_numpy()
    if not features.num_rows or not diversity.sum():
        return counts
    feature_type = features["type"].to_numpy().astype(np.int64)
    link_type = np.repeat(feature_type, diversity)
    link_count = np.minimum(links["count"].to_numpy(), CAP).astype(np.int64)
    has_links = diversity > 0
    starts = np.r_[0, np.cumsum(diversity)[:-1]][has_links]
    most = np.maximum.reduceat(link_count, starts)
    kinds = feature_type[has_links]
    counts.links = _table(link_type, link_count, num_types, CAP + 1).reshape(num_types, CAP + 1)
    counts.features = _table(kinds, most, num_types, CAP + 1).reshape(num_types, CAP + 1)
    bins = link_bins(features, links, widths).astype(np.int64)
    low = link_count < BINS
    counts.binned_links = _table(link_type[low], link_count[low] * BINS + bins[low], num_types,
                                 BINS * BINS).reshape(num_types, BINS, BINS)
    at_most = np.where(link_count == np.repeat(most, diversity[has_links]), bins, BINS)
    least = np.minimum.reduceat(at_most, starts)
    low = most < BINS
    counts.binned_features = _table(kinds[low], most[low] * BINS + least[low], num_types,
                                    BINS * BINS).reshape(num_types, BINS, BINS)
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


def kept(counts, minimum, partial=None):
    """``(features, links)`` a count of :class:`Histograms` ``counts`` keeps with the link
    thresholds ``minimum`` (one a type) and, ``partial`` being ``(lower, cut)``, the links
    seen ``lower[t]`` times (one less than ``minimum[t]``, below :data:`BINS`) whose bin is
    below ``cut``."""
    at_least = np.arange(CAP + 1)[None, :] >= np.minimum(minimum, CAP)[:, None]
    features = int(counts.features[at_least].sum())
    links = int(counts.links[at_least].sum())
    if partial is not None:
        lower, cut = partial
        for t in np.flatnonzero(lower < minimum):
            features += int(counts.binned_features[t, lower[t], :cut].sum())
            links += int(counts.binned_links[t, lower[t], :cut].sum())
    return features, links


def _steps_by_one(lower, minimum):
    moving = lower < minimum
    return bool(np.all(minimum - lower <= 1) and np.all(lower[moving] < BINS))


def choose(counts, feature_types, given, fits):
    """The lowest level whose kept ``(features, links)`` satisfy ``fits(features, links)``,
    and the largest share of the step to it that does too: ``(level, thresholds, partial,
    features, links)``, ``thresholds`` :func:`ladder`'s, ``partial`` None or ``(lower,
    cut)`` (:func:`kept`).  Raises :class:`SnmInputError` when even level :data:`CAP`
    does not fit."""
    lower = None
    for level in range(1, CAP + 1):
        minimum = ladder(level, feature_types, given)
        features, links = kept(counts, minimum)
        if fits(features, links):
            if lower is not None and _steps_by_one(lower, minimum):
                for cut in range(BINS - 1, 0, -1):
                    more = kept(counts, minimum, (lower, cut))
                    if fits(*more):
                        return level, minimum, (lower, cut), *more
            return level, minimum, None, features, links
        lower = minimum
    raise SnmInputError(f"no link thresholds up to {CAP} give a model that small "
                        f"({features:,} features and {links:,} links at the highest); "
                        "give a larger size")
