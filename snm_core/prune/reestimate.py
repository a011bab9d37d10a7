"""Pruned n-gram models estimated again from their counts (``snm prune --criterion
reestimate``): count moving, pruning by relative entropy, and E-M, as pocolm does.

A pruned SNM keeps the unpruned model's relative frequencies and can only reweigh
them; what a lower order should predict changes when its longer n-grams go.  This
module builds, from the model's raw counts C(h, w), a back-off model whose lower
orders are estimated for the n-grams that remain:

1. **Discounting with count moving** (all n-grams kept).  Each n-gram carries its
   count and its three largest *pieces* (an integer count is that many pieces of
   1).  An n-gram of order n gives up d = D1 p1 + D2 p2 + D3 p3 + D4 (rest), with
   1 > D1 >= D2 >= D3 >= D4 >= 0 per order; the pieces D1 p1, D2 p2, D3 p3 go to its
   suffix n-gram (the oldest word dropped), merged there with those of the suffix's
   other extensions (its three largest kept).  An n-gram's count at a lower order is
   what its extensions gave it (a generalised Kneser-Ney continuation count), plus
   its occurrences no extension covers (at the start of a sentence).  The result is
   a float-count model: per context h, counts c(h, w), back-off mass D(h) (the sum
   of what was given up) and total T(h), with
   P(w | h) = (c(h, w) + D(h) P(w | h')) / T(h); :data:`UNK_SHARE` of the unigram's
   back-off mass goes to <UNK>, the rest is spread evenly over the words it predicts.
2. **Pruning** by passes (:func:`prune_pass`) at rising thresholds, to a number of
   links (:func:`prune`).  An n-gram that no kept longer n-gram needs (as its suffix, or
   as the n-gram of a context with kept words: what ARPA needs) is scored by the
   log-likelihood lost, over data drawn from the model, when its count moves to its
   context's back-off mass and to its suffix's count (:func:`backoff_loss`, an upper
   bound that counts the effect on every other word of both states), and pruned when
   that is below the threshold, the model changed at once for the n-grams after it.
3. **E-M** after each pass: the unpruned model's *float stats* (the expected count
   of each n-gram as the longest one present, and each context's backed-off count)
   are explained by the pruned model, and its counts re-estimated from the
   posteriors (:func:`float_stats`, :func:`em_step`).  The unpruned model is a fixed
   point.

The discounts above the unigram's are chosen on held-out events (a join directory) by
coordinate search over multiplicative steps; without one the defaults serve.  The
result is written as an SNM model: P(w | h) = N(h, w) / Z(h) with Z(h) = Z(h') T(h) / D(h) and
M_hw = c(h, w) Z(h) / T(h), so ``snm eval``, the layouts and the ARPA export read
it unchanged (:func:`snm_values`).

The whole n-gram table is held in memory (:data:`BYTES_PER_LINK`): the command
refuses a model its ``--memory`` cannot hold.
"""

import dataclasses
import functools
import math
import multiprocessing

import numpy as np
import pyarrow as pa

from snm_core.arpa.backoff import lookup
from snm_core.io import model_files, native
from snm_core.io.arrays import run_starts
from snm_core.io.errors import SnmInputError
from snm_core.text import hashing
from snm_core.text.vocab import UNK_ID

_a = native.address
_prune_pass = native.function("reestimate_prune_pass", [native.ptr, native.i64]
                              + [native.ptr] * 9 + [native.f64], native.i64)

#: The discounts (D1, D2, D3, D4) every order above the unigram starts from.
DEFAULT_DISCOUNTS = (0.8, 0.5, 0.3, 0.1)
#: The unigram's, fixed as pocolm fixes them: tuned on held-out text they fall far below
#: these, which suits the unpruned model and costs a pruned one, whose n-grams back off
#: to the unigram far more often (benchmarks/README.md, "Re-estimated from the counts").
UNIGRAM_DISCOUNTS = (0.75, 0.25, 0.1, 0.0)
#: The share of the unigram's back-off mass that goes to <UNK>, as pocolm gives it; the
#: rest is spread evenly over the words.
UNK_SHARE = 0.5
#: The largest discount a search may set.
MAX_DISCOUNT = 0.99
#: Multiplicative steps of the discount search, one tuple a sweep over the parameters.
#: One sweep: a second gains a pruned model 0.01-0.1% for a minute more on kernel, and a
#: search to convergence lowers the unpruned model's held-out perplexity and raises the
#: pruned model's (benchmarks/README.md, "Re-estimated from the counts").
SEARCH_STEPS = ((0.7, 0.85, 1.15, 1.3),)
#: The first pruning threshold (log-likelihood, in counts), as pocolm's on counts of
#: weight 1; the E-M iterations after each pass; a pass that leaves at most TOLERANCE
#: more n-grams (above the unigrams) than the target is the last.
INITIAL_THRESHOLD = 0.5
EM_ITERATIONS = 2
TOLERANCE = 0.02
MAX_PASSES = 60
#: The steps of the search of discounts for a pruned model, tried in this order (a pruned
#: model gains from larger discounts more often than from smaller).
PRUNED_SEARCH_STEPS = (1.25, 0.8)
#: What the estimate holds, in bytes a link (measured on kernel's 5-gram, rounded up),
#: and what each further process of the search on the pruned model adds (a pruning's
#: models and E-M: 1.0 GiB at kernel's 7.3M links).
BYTES_PER_LINK = 500
BYTES_PER_LINK_A_TRIAL = 200


@dataclasses.dataclass
class NgramTable:
    """A pooled n-gram model's n-grams, by order n = 1..N (index 0 unused).

    ``counts[n]``: C(h, w) of the order-n n-grams; ``state[n]``: their context's index
    among the contexts of length n - 1 (for n = 1, 0: the empty context); ``suffix[n]``:
    the index at order n - 1 of (h', w); ``state_suffix[n]``: for each context of length
    n - 1, the index of h' among the contexts of length n - 2; ``own[n]``: for each
    context of length n, the index of its own n-gram at order n (-1 where it has none: a
    context ending in the sentence start).  ``link_rows[n]`` / ``state_rows[n]``: the rows
    of the model's concatenated matrix / features tables they come from; ``link_keys[n]``
    the links' keys and ``state_keys[n]`` the contexts' (looked up in
    :func:`heldout_events`)."""

    order: int
    counts: list
    state: list
    suffix: list
    own: list
    state_suffix: list
    num_states: list
    link_rows: list
    state_rows: list
    link_keys: list
    state_keys: list

    @property
    def num_links(self):
        return sum(len(c) for c in self.counts[1:])

    @functools.cached_property
    def paths(self):
        """Per order n, ``(suffixes, states)``: dicts over k = 1..n of each order-n
        n-gram's suffix at order k and that suffix's context (its back-off path),
        computed once for the E-M (int32 where the order's n-grams allow)."""
        out = [None]
        for n in range(1, self.order + 1):
            dtype = np.int32 if len(self.counts[n]) < 2 ** 31 else np.int64
            suffixes = {n: np.arange(len(self.counts[n]), dtype=dtype)}
            states = {n: self.state[n].astype(dtype)}
            for k in range(n - 1, 0, -1):
                suffixes[k] = self.suffix[k + 1][suffixes[k + 1]].astype(dtype)
                states[k] = self.state[k][suffixes[k]].astype(dtype)
            out.append((suffixes, states))
        return out

    @functools.cached_property
    def visits(self):
        """Per order n >= 2, ``(suffix_state, visit)``: each n-gram's suffix's context, and
        the order a pruning pass visits the n-grams in: by suffix context, then context
        (pocolm's order: the n-grams that share a back-off state come together)."""
        out = [None, None]
        for n in range(2, self.order + 1):
            suffix_state = self.state[n - 1][self.suffix[n]]
            out.append((suffix_state, np.lexsort((self.state[n], suffix_state))))
        return out


def build_table(features, matrix, keys_for):
    """The :class:`NgramTable` of a model's concatenated ``features`` (words, type,
    diversity) and ``matrix`` (word, count) tables.  ``keys_for(length, words)``: the
    untagged context keys of word rows (the configuration's extractor)."""
    words = features["words"].to_numpy(zero_copy_only=False)
    lengths = np.array([len(w) for w in words], np.int64)
    order = int(lengths.max()) + 1 if len(lengths) else 1
    diversity = features["diversity"].to_numpy()
    feature_of_link = np.repeat(np.arange(len(words)), diversity)
    link_words = matrix["word"].to_numpy().astype(np.int64)
    link_counts = matrix["count"].to_numpy().astype(np.float64)
    feature_keys = np.empty(len(words), np.uint64)
    suffix_keys = np.zeros(len(words), np.uint64)   # the context h' of each context h
    prefix_keys = np.zeros(len(words), np.uint64)   # h[:-1], for h's own n-gram
    for k in range(order):
        rows = np.flatnonzero(lengths == k)
        grid = np.array(list(words[rows]), np.int64).reshape(len(rows), k)
        feature_keys[rows] = keys_for(k, grid)
        if k:
            suffix_keys[rows] = keys_for(k - 1, grid[:, 1:])
            prefix_keys[rows] = keys_for(k - 1, grid[:, :-1])
    link_key = hashing.link_key(feature_keys[feature_of_link], link_words)
    link_length = lengths[feature_of_link]
    table = NgramTable(order, *([None] * (order + 1) for _ in range(5)), [0] * (order + 1),
                       *([None] * (order + 1) for _ in range(4)))
    # contexts of each length, sorted by key; links of each order, sorted by key
    for k in range(order):
        rows = np.flatnonzero(lengths == k)
        rows = rows[np.argsort(feature_keys[rows], kind="stable")]
        table.state_rows[k + 1] = rows
        table.state_keys[k + 1] = feature_keys[rows]
        table.num_states[k + 1] = len(rows)
        if len(np.unique(feature_keys[rows])) != len(rows):
            raise SnmInputError("--criterion reestimate needs a pooled model (one row a "
                                "context); this one has corpus tags: prune it with backoff")
    for k in range(1, order):
        table.state_suffix[k + 1] = lookup(table.state_keys[k],
                                           suffix_keys[table.state_rows[k + 1]])
    for n in range(1, order + 1):
        rows = np.flatnonzero(link_length == n - 1)
        rows = rows[np.argsort(link_key[rows], kind="stable")]
        table.link_rows[n] = rows
        table.link_keys[n] = link_key[rows]
        table.counts[n] = link_counts[rows]
        feature = feature_of_link[rows]
        table.state[n] = lookup(table.state_keys[n], feature_keys[feature])
    for n in range(2, order + 1):
        rows = table.link_rows[n]
        feature = feature_of_link[rows]
        suffix = lookup(table.link_keys[n - 1],
                         hashing.link_key(suffix_keys[feature], link_words[rows]))
        if (suffix < 0).any():
            raise SnmInputError("the model is not a complete n-gram model (an n-gram's "
                                "suffix is missing); --criterion reestimate needs one")
        table.suffix[n] = suffix
    for k in range(1, order):
        rows = table.state_rows[k + 1]
        own_keys = hashing.link_key(prefix_keys[rows],
                                    np.array([w[-1] for w in words[rows]], np.int64))
        table.own[k] = lookup(table.link_keys[k], own_keys)
    table.own[order] = np.zeros(0, np.int64)
    return table


def read_table(model_dir, num_buckets, keys_for):
    """The :class:`NgramTable` of a model directory (every bucket read)."""
    features = pa.concat_tables(
        [model_files.read_bucket(model_dir, "features", b, num_buckets,
                                 columns=["words", "diversity"]) for b in range(num_buckets)])
    matrix = pa.concat_tables(
        [model_files.read_bucket(model_dir, "matrix", b, num_buckets,
                                 columns=["word", "count"]) for b in range(num_buckets)])
    return build_table(features, matrix, keys_for)


# --- 1. discounting with count moving -------------------------------------------------


def _pieces(counts):
    """An integer count's three largest pieces (each at most 1)."""
    return (np.minimum(counts, 1.0), np.clip(counts - 1, 0, 1.0), np.clip(counts - 2, 0, 1.0))


def _merge_pieces(num_groups, *sources):
    """Per group, the three largest pieces of ``sources``: ``(group of each row, pieces)``
    pairs, the pieces a tuple of arrays of the rows."""
    g = np.concatenate([group for group, pieces in sources for _ in pieces])
    v = np.concatenate([p for _, pieces in sources for p in pieces])
    present = v > 0
    g, v = g[present], v[present]
    order = np.lexsort((-v, g))
    g, v = g[order], v[order]
    starts = run_starts(g)
    rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    tops = []
    for r in range(3):
        top = np.zeros(num_groups)
        at = rank == r
        top[g[at]] = v[at]
        tops.append(top)
    return tuple(tops)


@dataclasses.dataclass
class FloatModel:
    """Per order n: ``c[n]`` the n-grams' counts (0: pruned), ``D[n]`` and ``T[n]`` each
    context's back-off mass and total (order 1: one context, no back-off)."""

    c: list
    D: list
    T: list
    threshold: float = 0.0  # the last pass's threshold (:func:`prune`) or loss (:func:`remove`)

    def copy(self):
        return FloatModel([None] + [x.copy() for x in self.c[1:]],
                          [None] + [x.copy() for x in self.D[1:]],
                          [None] + [x.copy() for x in self.T[1:]])

    def num_kept(self):
        return sum(int(np.count_nonzero(x)) for x in self.c[1:])


def discounted(table, discounts, cache=None):
    """The float-count model of every n-gram of ``table`` with ``discounts[n]`` =
    (D1, D2, D3, D4) for order n (step 1 of the module's description).  ``cache`` (a
    dict the caller keeps) holds each order's last result under the discounts of it and
    the orders above, which are all it depends on: a search that changes one order's
    discounts recomputes that order and those below it."""
    N = table.order
    cache = {} if cache is None else cache
    total, pieces = table.counts[N], _pieces(table.counts[N])
    c, D, T = [None] * (N + 1), [None] * (N + 1), [None] * (N + 1)
    for n in range(N, 0, -1):
        key = tuple(tuple(discounts[k]) for k in range(n, N + 1))
        if n in cache and cache[n][0] == key:
            c[n], D[n], T[n], total, pieces = cache[n][1]
            continue
        d1, d2, d3, d4 = discounts[n]
        given = [d * p for d, p in zip((d1, d2, d3), pieces)]
        d = given[0] + given[1] + given[2] + d4 * np.maximum(total - sum(pieces), 0)
        c[n] = total - d
        D[n] = np.bincount(table.state[n], weights=d, minlength=table.num_states[n])
        T[n] = np.bincount(table.state[n], weights=total, minlength=table.num_states[n])
        if n > 1:
            lower = table.counts[n - 1]
            extended = np.bincount(table.suffix[n], weights=table.counts[n],
                                   minlength=len(lower))
            uncovered = np.maximum(lower - extended, 0)  # occurrences no extension covers
            moved = np.bincount(table.suffix[n], weights=d, minlength=len(lower))
            total = moved + uncovered
            pieces = _merge_pieces(len(lower), (table.suffix[n], given),
                                   (np.arange(len(lower)), _pieces(uncovered)))
        cache[n] = (key, (c[n], D[n], T[n], total, pieces))
    # the unigram's back-off mass: UNK_SHARE to <UNK>, the rest spread over the words
    unknown = lookup(table.link_keys[1], hashing.link_key(table.state_keys[1][:1],
                                                          np.array([UNK_ID])))[0]
    share = UNK_SHARE if unknown >= 0 else 0.0
    c1 = c[1] + D[1][0] * (1 - share) / max(len(c[1]), 1)
    if unknown >= 0:
        c1[unknown] += D[1][0] * share
    return FloatModel([None, c1] + c[2:], [None, np.zeros(1)] + D[2:], T)


def probabilities(table, model):
    """P(w | h) of every n-gram of ``table``, by order (pruned ones by back-off)."""
    P = [None, model.c[1] / model.T[1][0]]
    for n in range(2, table.order + 1):
        s = table.state[n]
        P.append((model.c[n] + model.D[n][s] * P[n - 1][table.suffix[n]]) / model.T[n][s])
    return P


# --- held-out events ----------------------------------------------------------------------


@dataclasses.dataclass
class HeldoutEvents:
    """Per order n, each event's context of length n - 1 (-1: not in the model) and its
    n-gram (-1: not in the model)."""

    states: list
    ngrams: list

    def __len__(self):
        return len(self.states[1])


def heldout_events(table, ptr, keys, targets):
    """:class:`HeldoutEvents` of events whose feature keys are ``keys[ptr[i]:ptr[i + 1]]``
    and whose words are ``targets``."""
    N = table.order
    event = np.repeat(np.arange(len(targets)), np.diff(ptr))
    keys = np.asarray(keys, np.uint64)
    targets = np.asarray(targets, np.int64)
    states, ngrams = [None], [None]
    for n in range(1, N + 1):
        state = np.full(len(targets), -1, np.int64)
        at = lookup(table.state_keys[n], keys)
        state[event[at >= 0]] = at[at >= 0]
        ngram = np.full(len(targets), -1, np.int64)
        has = state >= 0
        ngram[has] = lookup(table.link_keys[n], hashing.link_key(
            table.state_keys[n][state[has]], targets[has]))
        states.append(state)
        ngrams.append(ngram)
    return HeldoutEvents(states, ngrams)


def heldout_log_probs(table, model, events):
    """Natural log P(target | history) of each held-out event (-inf where the model
    gives 0: a target no training n-gram has)."""
    known = events.ngrams[1] >= 0
    P = np.zeros(len(events))
    P[known] = model.c[1][events.ngrams[1][known]] / model.T[1][0]
    for n in range(2, table.order + 1):
        state, ngram = events.states[n], events.ngrams[n]
        at = state >= 0
        s = state[at]
        direct = np.zeros(len(s))
        seen = ngram[at] >= 0
        direct[seen] = model.c[n][ngram[at][seen]]
        P[at] = (direct + model.D[n][s] * P[at]) / model.T[n][s]
    with np.errstate(divide="ignore"):
        return np.log(P)


def heldout_perplexity(table, model, events):
    """Perplexity of the held-out events the model can score."""
    logp = heldout_log_probs(table, model, events)
    scored = np.isfinite(logp)
    return math.exp(-logp[scored].sum() / max(int(scored.sum()), 1))


def default_discounts(order):
    """The discounts of orders 1..``order`` before any search."""
    return {n: UNIGRAM_DISCOUNTS if n == 1 else DEFAULT_DISCOUNTS for n in range(1, order + 1)}


def _step(discounts, n, i, step):
    """``discounts`` with order ``n``'s i-th discount multiplied by ``step`` (at most
    :data:`MAX_DISCOUNT`), or None where that changes nothing or breaks their order."""
    trial = list(discounts[n])
    trial[i] = min(MAX_DISCOUNT, trial[i] * step)
    if trial == list(discounts[n]) or any(trial[j] < trial[j + 1] for j in range(3)):
        return None
    return {**discounts, n: tuple(trial)}


def tune_discounts(table, events, say=None):
    """Discounts per order by coordinate search on held-out perplexity, from
    :data:`DEFAULT_DISCOUNTS`: in each sweep of :data:`SEARCH_STEPS`, each parameter in
    turn multiplied by each of the sweep's steps (kept below 1 and in order), the best
    kept."""
    discounts = default_discounts(table.order)
    cache = {}
    best = heldout_perplexity(table, discounted(table, discounts, cache), events)
    for steps in SEARCH_STEPS:
        for n in range(2, table.order + 1):
            for i in range(4):
                for step in steps:
                    candidate = _step(discounts, n, i, step)
                    if candidate is None:
                        continue
                    value = heldout_perplexity(table, discounted(table, candidate, cache),
                                               events)
                    if value < best - 1e-9:
                        best, discounts = value, candidate
            if say:
                say(f"discounts of order {n}: " + ", ".join(f"{d:.3f}" for d in discounts[n])
                    + f" (held-out perplexity {best:.2f})")
    return discounts, best


# --- 2. pruning ---------------------------------------------------------------------------


def _own_needed(table, model, n):
    """The order-n n-grams that are the own n-gram of a context with a kept extension."""
    needed = np.zeros(len(model.c[n]), bool)
    if n < table.order:
        own = table.own[n][table.state[n + 1][model.c[n + 1] > 0]]
        needed[own[own >= 0]] = True
    return needed


def _suffix_needed(table, model, n):
    """The order-n n-grams that are the suffix of a kept n-gram one word longer."""
    needed = np.zeros(len(model.c[n]), bool)
    if n < table.order:
        needed[table.suffix[n + 1][model.c[n + 1] > 0]] = True
    return needed


def prunable(table, model):
    """Per order, the kept n-grams no kept longer n-gram needs: not the suffix of one,
    not the own n-gram of a context that has one (the unigrams are never pruned)."""
    return [None, np.zeros(len(model.c[1]), bool)] + [
        (model.c[n] > 0) & ~_suffix_needed(table, model, n) & ~_own_needed(table, model, n)
        for n in range(2, table.order + 1)]


def backoff_loss(count, backoff, backoff_count, backoff_total):
    """The log-likelihood lost (>= 0), over data drawn from the model with its contexts'
    totals, when an n-gram's count moves to its context's back-off mass ``backoff`` and
    to its suffix's count ``backoff_count`` (of the suffix context's ``backoff_total``,
    back-off included: its total times the suffix's probability).  The other words of
    both contexts are taken as distinct symbols, so this bounds the loss from above."""
    own_share = backoff * backoff_count / backoff_total
    augmented = count + own_share
    others_here = backoff * (backoff_total - backoff_count) / backoff_total
    others_there = np.maximum(backoff_total - backoff_count - others_here, 0)
    same_elsewhere = np.maximum(backoff_count - own_share, 0)
    new_count, new_total = backoff_count + count, backoff_total + count
    new_backoff = backoff + count
    change = (augmented * np.log(new_backoff * new_count / new_total / augmented)
              + same_elsewhere * np.log(new_count * backoff_total / (new_total * backoff_count))
              + others_here * np.log(new_backoff * backoff_total / (new_total * backoff))
              + others_there * np.log(backoff_total / new_total))
    return -change


def prune_scores(table, model):
    """``[(order, n-gram indices, losses)]`` of the prunable n-grams of each order >= 2."""
    P = probabilities(table, model)
    out = []
    for n, candidates in enumerate(prunable(table, model)):
        if n < 2:
            continue
        idx = np.flatnonzero(candidates)
        state = table.state[n][idx]
        suffix = table.suffix[n][idx]
        backoff_total = model.T[n - 1][table.state[n - 1][suffix]]
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = backoff_loss(model.c[n][idx], model.D[n][state],
                                backoff_total * P[n - 1][suffix], backoff_total)
        out.append((n, idx, np.nan_to_num(loss, nan=np.inf)))
    return out


def remove(table, model, scores, number):
    """Prune the ``number`` lowest-scored n-grams of ``scores`` (ties by order, longest
    first, then index): each one's count moves to its context's back-off mass and to its
    suffix; ``model.threshold`` becomes the largest loss removed.  Returns how many were
    removed."""
    if number <= 0 or not scores:
        return 0
    losses = np.concatenate([s[2] for s in scores])
    number = min(number, len(losses))
    ranked = np.lexsort((np.concatenate([s[1] for s in scores]),
                         -np.concatenate([np.full(len(s[1]), s[0]) for s in scores]), losses))
    chosen = np.zeros(len(losses), bool)
    chosen[ranked[:number]] = True
    model.threshold = float(losses[ranked[number - 1]])
    start = 0
    for n, idx, _ in scores:
        take = idx[chosen[start:start + len(idx)]]
        start += len(idx)
        moved = model.c[n][take]
        model.c[n][take] = 0
        model.D[n] += np.bincount(table.state[n][take], weights=moved,
                                  minlength=len(model.D[n]))
        suffix = table.suffix[n][take]
        model.c[n - 1] += np.bincount(suffix, weights=moved, minlength=len(model.c[n - 1]))
        model.T[n - 1] += np.bincount(table.state[n - 1][suffix], weights=moved,
                                      minlength=len(model.T[n - 1]))
    return number


# --- 3. E-M -------------------------------------------------------------------------------


def float_stats(table, model):
    """The float stats of ``model`` (pocolm's): per n-gram, the expected count of its
    word after its context where it is the longest n-gram present, back-off included;
    per context, the expected count of words it backs off for.  Their sum is the
    model's total count."""
    N = table.order
    work = [None] + [x.copy() for x in model.c[1:]]
    backed = [None] + [x.copy() for x in model.D[1:]]
    stats = [None] * (N + 1)
    for n in range(N, 1, -1):
        suffixes, states = table.paths[n]
        with np.errstate(divide="ignore", invalid="ignore"):
            remaining = np.clip(np.where(model.c[n] > 0, work[n] / model.c[n], 0.0), 0, 1)
        weight = model.D[n][states[n]] * remaining
        parts = {}
        for k in range(n - 1, 0, -1):
            s, h = suffixes[k], states[k]
            total = model.T[k][h]
            part = weight * model.c[k][s] / total
            work[k] -= np.bincount(s, weights=part, minlength=len(work[k]))
            parts[k] = part
            weight = weight * model.D[k][h] / total
        running = np.zeros(len(model.c[n]))
        for k in range(1, n):
            running += parts[k]
            backed[k + 1] -= np.bincount(states[k + 1], weights=running,
                                         minlength=len(backed[k + 1]))
        stats[n] = np.maximum(model.c[n] * remaining + sum(parts.values()), 0)
    stats[1] = np.maximum(work[1], 0)
    return stats, [None] + [np.maximum(x, 0) for x in backed[1:]]


def em_step(table, model, stats):
    """One E-M iteration: ``model``'s counts re-estimated to explain ``stats``."""
    N = table.order
    counts_stats, backoff_stats = stats
    counts = [None] + [np.zeros(len(x)) for x in model.c[1:]]
    backoff = [None] + [x.copy() for x in backoff_stats[1:]]
    for n in range(N, 0, -1):
        suffixes, states = table.paths[n]
        context_total = model.T[n][states[n]]
        direct = model.c[n] / context_total
        total = direct.copy()
        via = {}
        weight = model.D[n][states[n]] / context_total
        for k in range(n - 1, 0, -1):
            s, h = suffixes[k], states[k]
            suffix_total = model.T[k][h]
            via[k] = weight * model.c[k][s] / suffix_total
            total += via[k]
            if k > 1:
                weight *= model.D[k][h] / suffix_total
        share = np.divide(counts_stats[n], total, out=np.zeros(len(total)), where=total > 0)
        counts[n] += share * direct
        running = np.zeros(len(total))
        for k in range(1, n):
            counts[k] += np.bincount(suffixes[k], weights=share * via[k],
                                     minlength=len(counts[k]))
            running += via[k]
            backoff[k + 1] += np.bincount(states[k + 1], weights=share * running,
                                          minlength=len(backoff[k + 1]))
    T = [None] + [np.bincount(table.state[n], weights=counts[n],
                              minlength=table.num_states[n]) + backoff[n]
                  for n in range(1, N + 1)]
    return FloatModel(counts, backoff, T)


def prune_pass(table, model, threshold):
    """One pass of pocolm's pruning over ``model`` (changed in place; returned): longest
    n-grams first, each prunable n-gram (:func:`prunable`, with the contexts' own n-grams
    taken at the pass's start and the suffixes as the longer order left them) is pruned
    when its :func:`backoff_loss`, against the model as the pass has left it, is below
    ``threshold``.  The pass is sequential (``reestimate_loops.c``): each pruning moves
    the count at once, so the n-grams scored after it see the larger back-off mass."""
    N = table.order
    P = probabilities(table, model)
    protected = [None, None] + [_own_needed(table, model, n) for n in range(2, N + 1)]
    for n in range(N, 1, -1):
        candidate = (model.c[n] > 0) & ~protected[n] & ~_suffix_needed(table, model, n)
        if n > 2:
            lower_share = (model.D[n - 1][table.state[n - 1]]
                           * P[n - 2][table.suffix[n - 1]])
        else:
            lower_share = np.zeros(len(model.c[1]))
        suffix_state, visit = table.visits[n]
        _prune_pass(_a(visit, np.int64), len(visit), _a(candidate.view(np.uint8)),
                    _a(model.c[n], np.float64), _a(table.state[n], np.int64),
                    _a(table.suffix[n], np.int64), _a(suffix_state, np.int64),
                    _a(model.D[n], np.float64), _a(model.c[n - 1], np.float64),
                    _a(model.T[n - 1], np.float64), _a(lower_share, np.float64),
                    float(threshold))
    return model


def _aim(kept, goal):
    """pocolm's next size to aim for: a step short of the goal while far from it."""
    if kept > 1.5 * goal:
        return kept * max(0.25, (goal / kept) ** 0.5)
    if kept > 1.15 * goal:
        return kept * (goal / kept) ** 0.666
    return goal


def prune(table, model, target_links, em_iterations=EM_ITERATIONS, progress=None):
    """``model`` pruned to ``target_links`` n-grams (at least its unigrams) by passes of
    :func:`prune_pass` at rising thresholds, E-M after each against the unpruned model's
    stats, until a pass leaves at most :data:`TOLERANCE` more n-grams than the target;
    the last few then go by score (:func:`remove`).

    The thresholds follow pocolm's model of sizes: a pass at the last threshold again is
    expected to shrink the model as the last one did (to the power ``repeat``), and a
    threshold t times higher by a further t^-``power``; each pass aims a step short of
    the target while far from it (:func:`_aim`), and thresholds never fall.  A pass that
    leaves fewer n-grams than the target is undone and both powers raised a fifth.
    ``progress(pass, kept, threshold)`` after each kept pass."""
    stats = float_stats(table, model)
    floor = len(model.c[1])
    target = max(int(target_links), floor)
    model = model.copy()
    if model.num_kept() <= target:
        return model
    goal = target - floor   # the n-grams of orders 2 and up to keep
    # each kept pass: (its threshold, the n-grams above the unigrams it left, the model)
    kept_passes = [(0.0, model.num_kept() - floor, model)]
    threshold, repeat, power = INITIAL_THRESHOLD, 0.5, 1.0
    for number in range(1, MAX_PASSES + 1):
        last_threshold, last_kept, last = kept_passes[-1]
        trial = prune_pass(table, last.copy(), threshold)
        kept = trial.num_kept() - floor
        if kept < goal:
            if len(kept_passes) == 1:
                threshold /= 4   # the first threshold was too high for this target
                continue
            if threshold <= last_threshold:
                break            # even the last threshold again overshoots: by score
            repeat, power = min(1.0, repeat * 1.2), power * 1.2
        else:
            for _ in range(em_iterations):
                trial = em_step(table, trial, stats)
            kept_passes = kept_passes[-1:] + [(threshold, kept, trial)]  # two at most
            if progress:
                progress(number, trial.num_kept(), threshold)
            if kept <= goal * (1 + TOLERANCE):
                break
        last_threshold, last_kept, last = kept_passes[-1]
        before = kept_passes[-2][1] if len(kept_passes) > 1 else last_kept
        again = last_kept * (last_kept / before) ** repeat
        aim = _aim(last_kept, goal)
        threshold = last_threshold * (1.0 if again <= aim
                                      else min(4.0, (again / aim) ** (1 / power)))
    model = kept_passes[-1][2]
    kept = model.num_kept()
    if kept > target:
        while kept > target:
            removed = remove(table, model, prune_scores(table, model), kept - target)
            if not removed:
                break
            kept -= removed
        for _ in range(em_iterations):
            model = em_step(table, model, stats)
    model.threshold = kept_passes[-1][0]
    return model


#: The table, held-out events and target of the search's trials, set before its worker
#: processes fork (they read it from there), and each process's cache of discounting.
_TRIALS = {}


def _pruned_trial(discounts):
    """``(held-out perplexity, model)`` of the model pruned with ``discounts``."""
    table, events, target_links = _TRIALS["setup"]
    model = prune(table, discounted(table, discounts, _TRIALS.setdefault("cache", {})),
                  target_links)
    return heldout_perplexity(table, model, events), model


def tune_pruned_discounts(table, events, discounts, target_links, say=None, workers=1):
    """Discounts chosen for the model pruned to ``target_links`` (:func:`prune`): one
    coordinate sweep from ``discounts`` whose objective is the pruned model's held-out
    perplexity, the highest order first, each parameter multiplied by each step of
    :data:`PRUNED_SEARCH_STEPS` in turn and the first that lowers it kept.  What suits
    the unpruned model is not what suits a pruned one, whose n-grams back off far more
    often (benchmarks/README.md, "Re-estimated from the counts"); each trial is a whole
    pruning.  With ``workers`` > 1 a parameter's steps are tried at once in that many
    forked processes, and the first of them that lowers it kept: the same choices as
    one at a time.  Returns ``(discounts, pruned model, its held-out perplexity)``."""
    _TRIALS.clear()
    _TRIALS["setup"] = (table, events, target_links)
    pool = None
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        table.paths, table.visits   # computed once, before the fork, and shared
        pool = multiprocessing.get_context("fork").Pool(workers)
    try:
        trials = functools.partial(pool.imap, chunksize=1) if pool else map
        best, model = _pruned_trial(discounts)
        if say:
            say(f"pruned held-out perplexity {best:.2f} with the unpruned model's discounts")
        for n in range(table.order, 1, -1):
            for i in range(4):
                steps = [(step, _step(discounts, n, i, step)) for step in PRUNED_SEARCH_STEPS]
                steps = [(step, candidate) for step, candidate in steps if candidate]
                for (step, candidate), (value, trial) in zip(
                        steps, trials(_pruned_trial, [c for _, c in steps])):
                    if say:
                        say(f"order {n}'s D{i + 1} times {step:g}: pruned held-out "
                            f"perplexity {value:.2f}")
                    if value < best - 1e-9:
                        best, model, discounts = value, trial, candidate
                        break
            if say:
                say(f"discounts of order {n} for the pruned model: "
                    + ", ".join(f"{d:.3f}" for d in discounts[n])
                    + f" (pruned held-out perplexity {best:.2f})")
    finally:
        if pool:
            pool.terminate()
        _TRIALS.clear()
    return discounts, model, best


# --- writing the model --------------------------------------------------------------------


def snm_values(table, model):
    """``(m, m_star)``: per order, each kept n-gram's M_hw (0 where pruned) and each
    context's M_h*, so that the SNM's sums give the float model's probabilities."""
    N = table.order
    Z = [None, np.full(1, model.T[1][0])]
    m, m_star = [None] * (N + 1), [None] * (N + 1)
    for n in range(1, N + 1):
        if n > 1:
            lower = table.state_suffix[n]
            with np.errstate(divide="ignore", invalid="ignore"):
                Z.append(np.where(model.D[n] > 0, Z[n - 1][lower] * model.T[n] / model.D[n],
                                  Z[n - 1][lower]))
        m[n] = model.c[n] * (Z[n] / model.T[n])[table.state[n]]
        m_star[n] = np.bincount(table.state[n], weights=m[n], minlength=table.num_states[n])
    return m, m_star
