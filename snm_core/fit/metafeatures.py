"""Meta-features of a link (f, w) and their hashed weights (paper, section 3.2 and Appendix C).

Elementary meta-features
    ``feature``       the feature's identity (its 64-bit key)
    ``type``          its type, with its corpus tag (``man:3-gram``)
    ``feature_count`` C(f,*) as two log2 buckets (see :func:`count_buckets`)
    ``diversity``     optional: the number of distinct words after f, two log2 buckets
    ``target``        the predicted word
    ``link_count``    C(f,w) as two log2 buckets
    ``continuation``  optional: N1+(. f w), the number of distinct words seen right
                      before f followed by w (Kneser-Ney's continuation count), two
                      log2 buckets of N1+ + 1 (0 where f has no longer type)

Conjunctions (Appendix C): start from the feature-related list
``L = [feature, type, feature_count(, diversity)]``; add ``target`` and
``target & g`` for every g in L; then add ``link_count`` and ``link_count & g``
for every g in the list so far; then, optionally, ``continuation`` and
``continuation & g`` for every g so far that does not involve the target
(conjoining it with the target groups too would double the lexicalized
entries for little gain).  The continuation count
goes beyond the paper: held-out training makes it usable (section 1), and on
kernel it brings the adjusted 5-gram below Kneser-Ney.  Variants (paper,
Tables 1-5):

==============  ========================================================
lexicalized     all of the above
unlexicalized   no ``feature`` and no ``target`` (so no target step)
feature-only    no ``target`` and no ``link_count``: A depends on f alone
==============  ========================================================

Decisions where the pseudo-code leaves room (tested in tests/fit/test_metafeatures.py):

* A count's two buckets are floor and ceil of log2(count), weighted by the
  log2 fraction lost in rounding; at an exact power of two the two coincide and
  the pseudo-code gives both weight 0, so we use the one bucket with weight 1.
* The two buckets of one count are alternatives (a soft one-hot), never
  conjoined with each other: the pseudo-code's literal ``Concat`` would also
  make ``link_count_floor & link_count_ceil``, a function of the count alone.
* Every elementary kind has its own hash namespace: feature-count bucket 3,
  link-count bucket 3 and diversity bucket 3 are different meta-features.
* A conjunction's weight is the product of its parts' weights; its hash folds
  the parts' hashes in list order (a multiply-add, cheap; every entry's hash
  gets one full 64-bit mix before it is reduced modulo the table size).
* Every meta-feature ``h`` maps to one of ``hash_size`` weights by its hash
  (multiply-shift, see :func:`stack`); collisions are not prevented (the
  paper's choice).

A group is one (possibly conjoined) meta-feature kind, held as two arrays of
shape (n, E): entry hashes (uint64) and weights (float64), E = 1, 2 or 4
entries per unit (a count contributes two buckets).
"""

import dataclasses

import numpy as np

from snm_core.text import hashing

VARIANTS = ("lexicalized", "unlexicalized", "feature-only")
#: Paper's hash sizes are 200K, 20M and 200M; 2**22 keeps collisions rare for
#: the lexicalized variant on held-out sets of ~100K words and theta at 16 MB.
DEFAULT_HASH_SIZE = 1 << 22


@dataclasses.dataclass(frozen=True)
class MetaFeatureSpec:
    """Which meta-features, and the hashed weight table they share.

    Parameters
    ----------
    variant : {"lexicalized", "unlexicalized", "feature-only"}
    hash_size : int, default 2**22
    diversity : bool, default False
        Add the diversity-count buckets of the feature.
    continuation : bool, default False
        Add the continuation-count buckets of the link (not with feature-only).
    """

    variant: str = "unlexicalized"
    hash_size: int = DEFAULT_HASH_SIZE
    diversity: bool = False
    continuation: bool = False

    def __post_init__(self):
        from snm_core.io.errors import SnmInputError

        if self.variant not in VARIANTS:
            raise SnmInputError(f"unknown meta-feature variant {self.variant!r}; choose one of "
                                f"{', '.join(VARIANTS)}")
        if self.continuation and self.variant == "feature-only":
            raise SnmInputError("feature-only meta-features have no link meta-features; "
                                "drop continuation")
        if not 1 <= self.hash_size <= 1 << 31:
            raise SnmInputError(f"hash_size must be between 1 and 2**31, got {self.hash_size}")

    @property
    def uses_target(self):
        return self.variant == "lexicalized"

    @property
    def uses_link_count(self):
        return self.variant != "feature-only"

    def to_dict(self):
        return dataclasses.asdict(self)


def count_buckets(counts):
    """The two log2 buckets of each count and their weights.

    Parameters
    ----------
    counts : array of int, shape (n,), every count >= 1

    Returns
    -------
    buckets : int64 (n, 2), floor and ceil of log2(count)
    weights : float64 (n, 2), ``ceil - l`` and ``l - floor``; at an exact power of
        two ``[1, 0]`` (one bucket)

    Examples
    --------
    >>> b, w = count_buckets(np.array([1, 3, 8]))
    >>> b.tolist(), np.round(w, 3).tolist()
    ([[0, 0], [1, 2], [3, 3]], [[1.0, 0.0], [0.415, 0.585], [1.0, 0.0]])
    """
    counts = np.asarray(counts, dtype=np.float64)
    if np.any(counts < 1):
        raise ValueError("counts must be at least 1")
    level = np.log2(counts)
    low, high = np.floor(level), np.ceil(level)
    weights = np.stack([high - level, level - low], axis=1)
    exact = low == high
    weights[exact] = (1.0, 0.0)
    return np.stack([low, high], axis=1).astype(np.int64), weights


#: Odd multiplier of the conjunction fold (a 64-bit prime).
_CONJOIN = np.uint64(0x9FB21C651E98DF25)


def namespace(name):
    """The hash namespace of an elementary meta-feature kind."""
    return hashing.fingerprint("metafeature:" + name)


@dataclasses.dataclass
class Group:
    """One meta-feature kind over n units: ``name``, entry ``hashes`` and ``weights`` (n, E)."""

    name: str
    hashes: np.ndarray
    weights: np.ndarray

    @classmethod
    def elementary(cls, name, values, weights=None):
        values = np.asarray(values)
        if values.ndim == 1:
            values = values[:, None]
        if weights is None:
            weights = np.ones(values.shape, dtype=np.float32)
        hashes = hashing.combine(namespace(name), values.astype(np.uint64).ravel())
        return cls(name, hashes.reshape(values.shape), np.asarray(weights, dtype=np.float32))

    def take(self, index):
        return Group(self.name, self.hashes[index], self.weights[index])

    def conjoin(self, other):
        """``self & other``: every pair of entries, weights multiplied."""
        n = len(self.hashes)
        ea, eb = self.hashes.shape[1], other.hashes.shape[1]
        # Elementary hashes are already well mixed: a multiply-add keeps the order
        # of the parts; stack() mixes every final hash once more.
        hashes = (self.hashes[:, :, None] * _CONJOIN) + other.hashes[:, None, :]
        weights = self.weights[:, :, None] * other.weights[:, None, :]
        return Group(f"{self.name}&{other.name}", hashes.reshape(n, ea * eb),
                     weights.reshape(n, ea * eb))


def feature_groups(spec, key, type_fingerprint, feature_count, diversity):
    """The feature-related list L of Appendix C, one unit per feature (row).

    Parameters
    ----------
    spec : MetaFeatureSpec
    key : uint64 (n,); type_fingerprint : uint64 (n,) (stable hash of tag and type)
    feature_count, diversity : int (n,)
    """
    groups = []
    if spec.variant != "unlexicalized":
        groups.append(Group.elementary("feature", key))
    groups.append(Group.elementary("type", type_fingerprint))
    groups.append(Group.elementary("feature_count", *count_buckets(feature_count)))
    if spec.diversity:
        groups.append(Group.elementary("diversity", *count_buckets(diversity)))
    return groups


def link_groups(spec, row_groups, row_of_unit, word, link_count, continuation=None):
    """Meta-feature groups that depend on the word or the link's counts, one unit per link class.

    ``row_groups`` are :func:`feature_groups` over rows, ``row_of_unit`` maps
    each unit to its row.  Returns only the groups not already in
    ``row_groups`` (a unit's full list is row groups + these).
    """
    current = [g.take(row_of_unit) for g in row_groups]
    untargeted = list(current)  # groups without the target: what continuation conjoins with
    added = []
    if spec.uses_target:
        target = Group.elementary("target", word)
        new = [target] + [target.conjoin(g) for g in current]
        current += new
        added += new
    if spec.uses_link_count:
        count = Group.elementary("link_count", *count_buckets(link_count))
        conjoined = [count.conjoin(g) for g in current]
        plain = {id(g) for g in untargeted}
        untargeted += [count] + [c for g, c in zip(current, conjoined) if id(g) in plain]
        new = [count] + conjoined
        current += new
        added += new
    if spec.continuation:
        cont = Group.elementary("continuation", *count_buckets(np.asarray(continuation) + 1))
        added += [cont] + [cont.conjoin(g) for g in untargeted]
    return added


def stack(groups, hash_size, n):
    """Concatenate groups into ``(index int64 (n, K), weight float32 (n, K))``.

    Each entry's hash gets one full 64-bit mix (spreading the cheap conjunction
    folds), then maps into ``[0, hash_size)`` by multiply-shift on its top 32
    bits: as uniform as a modulo and much faster than a 64-bit division.
    """
    if not groups:
        return np.zeros((n, 0), np.int64), np.zeros((n, 0), np.float32)
    hashes = hashing.mix64(np.concatenate([g.hashes for g in groups], axis=1))
    weights = np.concatenate([g.weights for g in groups], axis=1)
    hashes >>= np.uint64(32)
    hashes *= np.uint64(hash_size)
    hashes >>= np.uint64(32)
    return hashes.astype(np.int64), weights


def entries(spec, key, type_fingerprint, feature_count, diversity, unit_row, word, link_count,
            continuation=None):
    """Hashed entries of rows (features) and of link units (links or link classes).

    Parameters
    ----------
    spec : MetaFeatureSpec
    key, type_fingerprint, feature_count, diversity : arrays (n_rows,)
    unit_row : int array (n_units,), the row of each unit (index into the row arrays)
    word, link_count : arrays (n_units,) (``word`` may be None unless lexicalized)

    Returns
    -------
    (row_index (n_rows, Kr), row_weight), (unit_index (n_units, Ku), unit_weight)
    """
    row_groups = feature_groups(spec, key, type_fingerprint, feature_count, diversity)
    unit_groups = link_groups(spec, row_groups, unit_row, word, link_count, continuation)
    return (stack(row_groups, spec.hash_size, len(key)),
            stack(unit_groups, spec.hash_size, len(unit_row)))


def adjustment(theta, row_entries, unit_entries, unit_row):
    """A(f, w) of every unit: its row's weighted weights plus its own.

    ``row_entries`` and ``unit_entries`` are ``(index, weight)`` pairs whose
    indices point into ``theta``.
    """
    (r_idx, r_wt), (u_idx, u_wt) = row_entries, unit_entries
    a_row = (theta[r_idx] * r_wt).sum(axis=1)
    return a_row[unit_row] + (theta[u_idx] * u_wt).sum(axis=1)
