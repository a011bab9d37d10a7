"""``snm prune --criterion backoff``: relative-entropy pruning in the back-off form.

An n-gram SNM is a back-off model (:mod:`snm_core.arpa.backoff`): P(w | h) =
N(h, w) / Z(h) for an entry (h, w) the model has, with N(h, w) = M_hw + N(h', w) and
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
score among it and its dependants; the unigrams are never removed.  The entries are
ranked by effective score (ties: shorter n-grams first, then by key) and the best
kept, up to ``target_links`` model links (an entry's tag copies together, the
unigrams always) or down to ``threshold``.

At any size (:class:`PruneJob`, steps over key-range partitions on disk, run as a
Beam pipeline by ``pipelines/prune.py``): the back-off form's steps, then
``backward n`` for n = N..1, each partition of order n taking the largest effective
score its entries received from order n + 1 and sending each entry's to its suffix
entry and to its context's own entry; the cut for ``target_links`` is found by
radix selection over weighted histograms of the entries' ranks
(:func:`select_cut`); then each partition marks the model rows of the entries it
keeps (:meth:`PruneJob.keep`), sent to their model bucket, which is rewritten
renormalised (:func:`snm_core.prune.criteria.pruned_tables`).
"""

import numpy as np

from snm_core.io.errors import SnmInputError
from snm_core.arpa.partitions import partition_of, read_partition
from snm_core.arpa.backoff import BackoffJob, lookup

#: A rank is three words, compared in order: the effective score's float64 bits (a
#: score is >= 0, so its bits order as it does), N - n (shorter n-grams first), and
#: the complement of the entry's key; selection reads them RANK_DIGIT_BITS at a time.
RANK_DIGIT_BITS = 16
#: (word, shift) of each digit, most significant first (N - n fits one digit).
_DIGITS = [(0, 48), (0, 32), (0, 16), (0, 0), (1, 0), (2, 48), (2, 32), (2, 16), (2, 0)]
RANK_LEVELS = len(_DIGITS)


def entry_scores(n, m, n_total, z, context_count, total_count):
    """D(h, w) C(h, *) / C(*) of entries of order ``n`` (+inf for unigrams).

    Parameters
    ----------
    n : int, the entries' order (1: unigrams)
    m, n_total, z : float64 arrays (k,): M_hw, N(h, w) and Z(h), tags summed
    context_count : float64 array (k,): C(h, *), the context's training occurrences
    total_count : int, C(*): all contexts' occurrences
    """
    if n == 1:
        return np.full(len(m), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = (n_total / z) * -np.log1p(-m / n_total) + np.log1p(-m / z)
    weight = context_count / max(float(total_count), 1.0)
    return np.maximum(loss, 0.0) * weight


class PruneJob(BackoffJob):
    """The back-off form with each entry's score, then effective scores, the cut and
    the rows kept."""

    carried = ("key", "context", "n", "suffix", "m", "rows")
    context_carried = ("key", "z", "c", "entry")
    backoffs = False

    def scan_tables(self):
        return super().scan_tables() + ["links"]

    def scan_links(self, out, links, words):
        """Each model row's entry, in the partition of the entry: where :meth:`keep`
        learns whether it stays."""
        out["links"].write({"key": links["key"], "row": links["row"]},
                           partition_of(links["key"], self.partitions))

    def steps(self):
        return super().steps() + [("backward", n) for n in range(self.order, 0, -1)]

    def entry_columns(self, n, entries, contexts, facts):
        return {**super().entry_columns(n, entries, contexts, facts), "rows": entries["rows"],
                "score": entry_scores(n, entries["m"], entries["n"], contexts["z"],
                                      contexts["c"], facts["context_count"]),
                "suffix": entries["suffix"], "prefix": contexts["entry"]}

    def backward(self, n, partition, facts):
        """Effective scores of the entries of order n: their own, raised to what their
        dependants of order n + 1 sent; sent on to their suffix entry and their
        context's own entry (order n - 1)."""
        entries = self.read(f"entry{n}", partition,
                            ["key", "score", "rows", "suffix", "prefix"])
        effective = entries["score"]
        if 1 < n < self.order:
            received = self.read(f"up{n + 1}", partition)
            found = lookup(entries["key"], received["key"])
            has = found >= 0  # a context's own entry may be absent ("<s>" has none)
            np.maximum.at(effective, found[has], received["effective"][has])
            del received, found, has
        self.write(f"effective{n}", partition, {"key": entries["key"], "effective": effective,
                                                "rows": entries["rows"]}, entries["key"], 1)
        if n > 2:  # order 2 would only lift unigrams, which stay anyway
            targets = np.concatenate([entries["suffix"], entries["prefix"]])
            self.write(f"up{n}", partition, {"key": targets, "effective": np.concatenate(
                [effective, effective])}, targets)
        return {}

    def consumed(self, step):
        name, n = step
        if name == "backward":
            return [f"entry{n}"] + ([f"up{n + 1}"] if 1 < n < self.order else [])
        return super().consumed(step)

    def ranked(self, partition):
        """The entries of a partition, every order: dict of arrays ``key``,
        ``effective``, ``rows``, ``n``."""
        parts = [read_partition([self.path(f"effective{n}", partition)], 0, 1)
                 for n in range(1, self.order + 1)]
        ranked = {name: np.concatenate([p[name] for p in parts])
                  for name in ("key", "effective", "rows")}
        ranked["n"] = np.repeat(np.arange(1, self.order + 1), [len(p["key"]) for p in parts])
        return ranked

    def rank_words(self, ranked):
        """The three words of each entry's rank (see RANK_DIGIT_BITS)."""
        return (np.asarray(ranked["effective"], np.float64).view(np.uint64),
                (self.order - ranked["n"]).astype(np.uint64), ~ranked["key"])

    def histogram(self, partition, level, prefix):
        """:func:`rank_histogram` of a partition's entries."""
        ranked = self.ranked(partition)
        return rank_histogram(self.rank_words(ranked), ranked["rows"], level, prefix)

    def gather(self, partition, prefix):
        """:func:`ranks_with_prefix` of a partition's entries."""
        ranked = self.ranked(partition)
        return ranks_with_prefix(self.rank_words(ranked), ranked["rows"], prefix)

    def keep(self, partition, rule):
        """Mark the model rows of the entries ``rule`` keeps, into the file of
        ``keep/`` of this partition cut by model bucket; returns the totals (kept
        rows and entries, and the lowest effective score kept)."""
        ranked = self.ranked(partition)
        kept = rule.keeps(self, ranked)
        links = read_partition(self.scan_files("links"), partition, self.partitions)
        found = lookup(ranked["key"], links["key"])
        if np.any(found < 0):
            raise SnmInputError(f"{self.model}: a link without its entry; re-run snm apply")
        rows = links["row"][kept[found]]
        self.write("keep", partition, {"row": rows & np.int64(0xFFFFFFFF)}, None,
                   self.num_buckets, by=(rows >> 32).astype(np.uint16))
        lowest = ranked["effective"][kept]
        return {"kept_rows": len(rows), "kept_entries": int(kept.sum()),
                "lowest_kept": [float(lowest.min())] if len(lowest) else []}

    def kept_rows(self, bucket):
        """Positions of the rows a model bucket keeps (int64, sorted)."""
        kept = read_partition([self.path("keep", p) for p in range(self.partitions)],
                              bucket, self.num_buckets)
        return np.sort(kept["row"])


def _digit(words, level):
    word, shift = _DIGITS[level]
    return (words[word] >> np.uint64(shift)) & np.uint64((1 << RANK_DIGIT_BITS) - 1)


def _with_prefix(words, prefix):
    chosen = np.ones(len(words[0]), bool)
    for level, digit in enumerate(prefix):
        chosen &= _digit(words, level) == np.uint64(digit)
    return chosen


def rank_histogram(words, rows, level, prefix):
    """``(rows, entries)``, int64 arrays (2 ** RANK_DIGIT_BITS,): by digit ``level`` of
    their rank (``words``, :meth:`PruneJob.rank_words`), the model rows and the entries
    among those whose higher digits are ``prefix``."""
    chosen = _with_prefix(words, prefix)
    digits = _digit(words, level)[chosen].astype(np.int64)
    size = 1 << RANK_DIGIT_BITS
    return (np.bincount(digits, weights=rows[chosen], minlength=size).astype(np.int64),
            np.bincount(digits, minlength=size))


def ranks_with_prefix(words, rows, prefix):
    """``(rank words (3, k) uint64, rows (k,))`` of the entries whose rank starts with
    ``prefix``."""
    chosen = _with_prefix(words, prefix)
    return np.stack([w[chosen] for w in words]), rows[chosen]


def _rank_above(words, cut):
    """Whether each rank (``words``) is above ``cut`` (three uint64)."""
    above = words[2] > np.uint64(cut[2])
    for level in (1, 0):
        above = (words[level] > np.uint64(cut[level])) | (
            (words[level] == np.uint64(cut[level])) & above)
    return above


class KeepRule:
    """Which entries stay: those scored at least ``threshold``, or (``cut``, from
    :func:`select_cut`) those ranked above the first entry left out, and every entry
    scored +inf (the unigrams); ``cut`` None keeps everything."""

    def __init__(self, threshold=None, cut=None):
        self.threshold, self.cut = threshold, cut

    def keeps(self, job, ranked):
        effective = ranked["effective"]
        if self.threshold is not None:
            return effective >= self.threshold
        if self.cut is None:
            return np.ones(len(effective), bool)
        return np.isinf(effective) | _rank_above(job.rank_words(ranked), self.cut)


def select_cut(histogram, gather, target, gather_limit):
    """The rank of the first entry left out when the best-ranked entries are kept up
    to ``target`` model rows; None if every entry fits.

    Parameters
    ----------
    histogram : callable(level, prefix) -> (rows, entries), each int64
        (2 ** RANK_DIGIT_BITS,): :meth:`PruneJob.histogram` summed over partitions
    gather : callable(prefix) -> (words (3, k), rows (k,)): :meth:`PruneJob.gather`
        concatenated over partitions
    target : int, model rows to keep at most
    gather_limit : int, entries few enough to gather in one process

    Radix selection: each level narrows to the digit where the kept rows pass the
    target; once that digit's entries are few enough they are gathered and ranked.
    """
    prefix, above = [], 0  # the digits chosen; rows ranked above them (all kept)
    for level in range(RANK_LEVELS):
        rows, entries = histogram(level, prefix)
        at_least = above + np.cumsum(rows[::-1])[::-1]  # rows kept down to digit d
        if level == 0 and at_least[0] <= target:
            return None
        digit = int(np.flatnonzero(at_least > target)[-1])
        above = int(at_least[digit + 1]) if digit + 1 < len(rows) else above
        prefix.append(digit)
        if entries[digit] <= gather_limit or level == RANK_LEVELS - 1:
            words, rows = gather(prefix)
            order = np.lexsort(words[::-1])[::-1]  # best first
            first_out = int(np.flatnonzero(above + np.cumsum(rows[order]) > target)[0])
            return tuple(int(w) for w in words[:, order[first_out]])
    raise AssertionError("unreachable")
