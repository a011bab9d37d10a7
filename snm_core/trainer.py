"""The adjustment model: multinomial loss on held-out data, mini-batch AdaGrad (paper, section 3).

Model.  For an event e with features F(e) (those present in small M) and target t,

    P(t | e) = y_t(e) / y(e),  y_t(e) = sum_f M_ft,  y(e) = sum_f M_f*,
    M_fw = c(w|f) exp(A(f, w)),  A(f, w) = sum_k theta_k h_k(f, w).

Link classes.  Links of one row whose meta-features coincide have the same
A, and the same c(w|f) whenever the meta-features include the link count, so
they share M_fw: one class of ``m`` links stands for all of them.  With
unlexicalized or feature-only meta-features a class is (feature, C(f,w)),
about 7x fewer than links on the kernel 5-gram small M; lexicalized
meta-features name the target, so every link is its own class.  Everything
below runs over classes, vectorised over a whole mini-batch.

Gradient (eq. 5 and 8).  d log P(e) / d A_fw = M_fw [1_w(e)/y_t(e) - 1/y(e)]
for f in F(e).  Over a mini-batch B the second term is applied once per
touched row: alpha_f(B) = sum_{e in B, f in F(e)} 1/y(e), times M_fw of every
link of the row.  A class's gradient is spread over its meta-features'
weights: d/d theta_k = sum_classes G_class * weight_k(class), where feature-level
meta-features are summed per row first.

Normalisation.  ``renormalize="batch"`` computes M_f* exactly for every row
the mini-batch touches before its forward pass (the exact gradient of the
batch's log-likelihood; it costs nothing extra, since the second gradient
term needs those rows' M_fw anyway).  ``renormalize="epoch"`` is the paper's
choice: y(e) uses M_f* from the start of the epoch.

AdaGrad (eq. 6-7), as ascent on the log-likelihood (the paper writes the
descent form): acc_k += g_k**2 (starting at Delta_0); theta_k += gamma g_k / sqrt(acc_k).

Parameters live in a compact vector over the hashed indices that occur in
small M; :meth:`AdjustmentProblem.dense_theta` scatters them into the
``hash_size`` table that the apply stage reads.
"""

import dataclasses
import json
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from snm_core import hashing, metafeatures
from snm_core.arrays import sorted_distinct
from snm_core.errors import SnmInputError
from snm_core.features import type_salt

GAMMA = 0.1
DELTA0 = 1.0
BATCH_SIZE = 2048
#: Share of held-out sentences held back to choose the number of epochs.
VALIDATION_SHARE = 0.1


def concat_ranges(starts, ends):
    """Indices ``[s0, e0) + [s1, e1) + ...`` as one int64 array (vectorised)."""
    lengths = ends - starts
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return np.arange(total, dtype=np.int64) + offsets


# --- inputs ---------------------------------------------------------------------------

@dataclasses.dataclass
class SmallM:
    """Rows (features) and links of small M, links sorted by (row, word).

    row_key uint64, row_type int32 (type id, tag-major), row_count int64 C(f,*),
    row_diversity int64; link_row int64, link_word int32, link_count int64 C(f,w).
    """

    row_key: np.ndarray
    row_type: np.ndarray
    row_count: np.ndarray
    row_diversity: np.ndarray
    link_row: np.ndarray
    link_word: np.ndarray
    link_count: np.ndarray

    @classmethod
    def from_table(cls, table, num_feature_types):
        feature = table["feature"].to_numpy()
        starts = np.flatnonzero(np.r_[True, feature[1:] != feature[:-1]]) if len(feature) \
            else np.zeros(0, np.int64)
        return cls(
            row_key=feature[starts],
            row_type=(table["tag"].to_numpy()[starts].astype(np.int32) * num_feature_types
                      + table["type"].to_numpy()[starts]),
            row_count=table["feature_count"].to_numpy()[starts],
            row_diversity=table["diversity"].to_numpy()[starts],
            link_row=np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(feature)])),
            link_word=table["word"].to_numpy().astype(np.int32),
            link_count=table["count"].to_numpy(),
        )


@dataclasses.dataclass
class Events:
    """Held-out events: target (n,), sentence id (n,), CSR ``ptr`` (n+1,) over feature ``keys``."""

    target: np.ndarray
    sentence: np.ndarray
    ptr: np.ndarray
    keys: np.ndarray

    @classmethod
    def from_table(cls, table):
        features = table["features"].combine_chunks() if isinstance(
            table["features"], pa.ChunkedArray) else table["features"]
        offsets = features.offsets.to_numpy().astype(np.int64)
        return cls(target=table["target"].to_numpy().astype(np.int32),
                   sentence=(table["file"].to_numpy().astype(np.int64) << 40)
                   + table["line"].to_numpy(),
                   ptr=offsets - offsets[0],
                   keys=features.flatten().to_numpy())

    def __len__(self):
        return len(self.target)


def load_join(directory):
    """``(SmallM, Events, manifest)`` from a ``snm join`` output directory."""
    from snm_core import tables

    manifest = tables.read_manifest(directory, "join")
    names = sorted(manifest["files"])
    small = [pq.read_table(os.path.join(directory, n)) for n in names if n.startswith("small_m-")]
    events = [pq.read_table(os.path.join(directory, n)) for n in names if n.startswith("events-")]
    if not events:
        raise SnmInputError(f"{directory}: no held-out events; is the held-out text empty?")
    small_m = SmallM.from_table(pa.concat_tables(small), len(manifest["feature_types"]))
    return small_m, Events.from_table(pa.concat_tables(events)), manifest


def type_fingerprints(manifest):
    """Stable hash of each type id's (tag, type name), for the ``type`` meta-feature."""
    from snm_core.config import parse_config

    types = parse_config(manifest["config"]).feature_types()
    return np.array([type_salt(tag, t) for tag in manifest["tags"] for t in types],
                    dtype=np.uint64)


# --- the compiled problem ---------------------------------------------------------------

class AdjustmentProblem:
    """Small M, the events and the meta-features, compiled for vectorised training.

    Parameters
    ----------
    small_m : SmallM
    events : Events
    spec : snm_core.metafeatures.MetaFeatureSpec
    type_fingerprint : uint64 array indexed by type id
    """

    def __init__(self, small_m, events, spec, type_fingerprint):
        self.spec = spec
        n_rows = len(small_m.row_key)
        self.num_rows = n_rows
        self._build_classes(small_m)
        self._build_events(small_m, events)
        row_groups = metafeatures.feature_groups(
            spec, small_m.row_key, type_fingerprint[small_m.row_type], small_m.row_count,
            small_m.row_diversity)
        row_idx, self.row_wt = metafeatures.stack(row_groups, spec.hash_size, n_rows)
        cls_groups = metafeatures.link_groups(spec, row_groups, self.cls_row, self._cls_word,
                                              self._cls_link_count)
        cls_idx, self.cls_wt = metafeatures.stack(cls_groups, spec.hash_size, len(self.cls_row))
        # Compact parameter space: the hashed indices that occur (weight > 0).
        used = np.concatenate([row_idx[self.row_wt > 0], cls_idx[self.cls_wt > 0]])
        self.param_index = sorted_distinct(used)
        self.row_idx = np.searchsorted(self.param_index, row_idx).clip(
            0, max(len(self.param_index) - 1, 0)).astype(np.int32)
        self.cls_idx = np.searchsorted(self.param_index, cls_idx).clip(
            0, max(len(self.param_index) - 1, 0)).astype(np.int32)
        self.group_names = ([g.name for g in row_groups], [g.name for g in cls_groups])
        del self._cls_word, self._cls_link_count

    @property
    def num_params(self):
        return len(self.param_index)

    def _build_classes(self, m):
        """Group each row's links into classes of identical meta-features."""
        if self.spec.uses_target:
            order = np.arange(len(m.link_row))  # every link is a class
        else:
            order = np.lexsort((m.link_word, m.link_count, m.link_row))
        row, count, word = m.link_row[order], m.link_count[order], m.link_word[order]
        if self.spec.uses_target:
            new = np.ones(len(row), dtype=bool)
        else:
            new = np.r_[True, (row[1:] != row[:-1]) | (count[1:] != count[:-1])] if len(row) \
                else np.zeros(0, bool)
        starts = np.flatnonzero(new)
        self.cls_row = row[starts]
        self._cls_word = word[starts]
        self._cls_link_count = count[starts]
        self.cls_mult = np.diff(np.r_[starts, len(row)]).astype(np.float64)
        self.cls_c = count[starts] / m.row_count[self.cls_row].astype(np.float64)
        self.row_cls_ptr = np.searchsorted(self.cls_row, np.arange(self.num_rows + 1))
        link_class = np.empty(len(order), np.int64)
        link_class[order] = np.cumsum(new) - 1
        self._link_class = link_class

    def _build_events(self, m, events):
        """Map event features to rows and each (row, target) to its class (-1 if none)."""
        pair_event = np.repeat(np.arange(len(events)), np.diff(events.ptr))
        pos = np.searchsorted(m.row_key, events.keys)
        pos_ok = np.minimum(pos, max(self.num_rows - 1, 0))
        present = (pos < self.num_rows) & (m.row_key[pos_ok] == events.keys) if self.num_rows \
            else np.zeros(len(events.keys), bool)
        pair_event, pair_row = pair_event[present], pos[present]
        target = events.target[pair_event]
        # Links are sorted by (row, word): find (row, target) with one searchsorted.
        packed_links = (m.link_row.astype(np.int64) << 32) | m.link_word.astype(np.int64)
        packed = (pair_row.astype(np.int64) << 32) | target.astype(np.int64)
        lpos = np.searchsorted(packed_links, packed)
        lpos_ok = np.minimum(lpos, max(len(packed_links) - 1, 0))
        found = (lpos < len(packed_links)) & (packed_links[lpos_ok] == packed) \
            if len(packed_links) else np.zeros(len(packed), bool)
        pair_cls = np.where(found, self._link_class[lpos_ok] if len(packed_links) else -1, -1)
        del self._link_class
        # An event whose target no feature has seen has P = 0 whatever theta: left out.
        seen = np.zeros(len(events), bool)
        seen[pair_event[pair_cls >= 0]] = True
        keep_pair = seen[pair_event]
        self.num_unseen_targets = int(len(events) - seen.sum())
        new_index = np.cumsum(seen) - 1
        self.event_sentence = events.sentence[seen]
        self.event_target = events.target[seen]
        self.pair_row = pair_row[keep_pair].astype(np.int64)
        self.pair_cls = pair_cls[keep_pair].astype(np.int64)
        pair_event = new_index[pair_event[keep_pair]]
        self.event_ptr = np.searchsorted(pair_event, np.arange(len(self.event_target) + 1))
        self.event_len = np.diff(self.event_ptr)
        self.num_events = len(self.event_target)

    # --- forward and gradient -------------------------------------------------------

    def _row_classes(self, rows):
        """Classes of ``rows`` (sorted distinct): global index and local row of each."""
        starts, ends = self.row_cls_ptr[rows], self.row_cls_ptr[rows + 1]
        classes = concat_ranges(starts, ends)
        local_row = np.repeat(np.arange(len(rows)), ends - starts)
        return classes, local_row, starts

    def _adjusted(self, theta, rows, classes, local_row):
        """M of each class and M_f* of each row, at ``theta`` (compact)."""
        a_row = (theta[self.row_idx[rows]] * self.row_wt[rows]).sum(axis=1)
        a_cls = a_row[local_row] + (theta[self.cls_idx[classes]] * self.cls_wt[classes]).sum(axis=1)
        m = self.cls_c[classes] * np.exp(a_cls)
        m_star = np.bincount(local_row, weights=self.cls_mult[classes] * m, minlength=len(rows))
        return m, m_star

    def batch(self, theta, events, stale_m_star=None, gradient=True):
        """Log-likelihood of ``events`` and its gradient with respect to compact theta.

        Parameters
        ----------
        theta : float64 (num_params,)
        events : int array of event indices
        stale_m_star : float64 (num_rows,), optional
            M_f* to use in y(e) (the paper's per-epoch normalisation); default:
            exact M_f* at ``theta``.
        gradient : bool
            If False return ``(loglik, None)``.

        Returns
        -------
        loglik : float, sum of natural-log probabilities
        grad : float64 (num_params,) or None
        """
        pairs = concat_ranges(self.event_ptr[events], self.event_ptr[events + 1])
        pair_event = np.repeat(np.arange(len(events)), self.event_len[events])
        pair_row = self.pair_row[pairs]
        rows = sorted_distinct(pair_row)
        local = np.searchsorted(rows, pair_row)
        classes, cls_local_row, starts = self._row_classes(rows)
        m, m_star = self._adjusted(theta, rows, classes, cls_local_row)
        norm = m_star if stale_m_star is None else stale_m_star[rows]
        y = np.bincount(pair_event, weights=norm[local], minlength=len(events))
        pair_cls = self.pair_cls[pairs]
        has = pair_cls >= 0
        # Position of the target's class among `classes`: classes of local row r
        # start at offset[r] and follow the global order.
        offset = np.r_[0, np.cumsum(self.row_cls_ptr[rows + 1] - starts)[:-1]]
        target_local = offset[local[has]] + (pair_cls[has] - starts[local[has]])
        m_target = m[target_local]
        y_t = np.bincount(pair_event[has], weights=m_target, minlength=len(events))
        loglik = float(np.sum(np.log(y_t)) - np.sum(np.log(y)))
        if not gradient:
            return loglik, None
        first = np.bincount(target_local, weights=m_target / y_t[pair_event[has]],
                            minlength=len(classes))
        alpha = np.bincount(local, weights=1.0 / y[pair_event], minlength=len(rows))
        g_cls = first - alpha[cls_local_row] * self.cls_mult[classes] * m
        g_row = np.bincount(cls_local_row, weights=g_cls, minlength=len(rows))
        grad = np.bincount(self.row_idx[rows].ravel(),
                           weights=(g_row[:, None] * self.row_wt[rows]).ravel(),
                           minlength=self.num_params)
        grad += np.bincount(self.cls_idx[classes].ravel(),
                            weights=(g_cls[:, None] * self.cls_wt[classes]).ravel(),
                            minlength=self.num_params)
        return loglik, grad

    def m_star(self, theta):
        """Exact M_f* of every row at ``theta``."""
        rows = np.arange(self.num_rows)
        classes, local_row, _ = self._row_classes(rows)
        return self._adjusted(theta, rows, classes, local_row)[1]

    def log_likelihood(self, theta, events=None):
        """Sum of log P over ``events`` (default: all) with exact normalisation."""
        events = np.arange(self.num_events) if events is None else events
        total = 0.0
        for start in range(0, len(events), 65536):
            total += self.batch(theta, events[start:start + 65536], gradient=False)[0]
        return total

    def dense_theta(self, theta):
        """The ``hash_size`` weight table (float32) the apply stage reads."""
        dense = np.zeros(self.spec.hash_size, dtype=np.float32)
        dense[self.param_index] = theta
        return dense

    def split_events(self, share=VALIDATION_SHARE):
        """Deterministic (train, validation) event indices; whole sentences go one way."""
        sentence_hash = hashing.mix64(self.event_sentence.astype(np.uint64))
        valid = (sentence_hash % np.uint64(1000)) < np.uint64(round(share * 1000))
        return np.flatnonzero(~valid), np.flatnonzero(valid)


# --- training -----------------------------------------------------------------------------

@dataclasses.dataclass
class TrainSettings:
    """AdaGrad settings (paper, section 4.1 defaults)."""

    epochs: int = 1
    batch_size: int = BATCH_SIZE
    gamma: float = GAMMA
    delta0: float = DELTA0
    renormalize: str = "batch"
    seed: int = 0

    def __post_init__(self):
        if self.renormalize not in ("batch", "epoch"):
            raise SnmInputError(f"renormalize must be 'batch' or 'epoch', got {self.renormalize!r}")
        if self.epochs < 0 or self.batch_size < 1 or self.gamma <= 0 or self.delta0 <= 0:
            raise SnmInputError("need epochs >= 0, batch_size >= 1, gamma > 0 and delta0 > 0")


def perplexity(loglik, n):
    return float(np.exp(-loglik / n)) if n else float("nan")


def train(problem, settings, train_events=None, valid_events=None, log=None, progress=None,
          stop=None):
    """Mini-batch AdaGrad on ``train_events``; returns compact theta and the per-epoch log.

    Parameters
    ----------
    problem : AdjustmentProblem
    settings : TrainSettings
    train_events, valid_events : int arrays (default: all events, none)
    log : callable(dict), called once per epoch (and for epoch 0, before training)
    progress : callable(epoch, done_events, total_events), called after each batch
    stop : callable(history) -> bool, asked after each epoch whether to stop early

    Returns
    -------
    theta : float64 (num_params,)
    history : list of dicts, one per epoch (0 = untrained): loss, perplexities, seconds
    """
    train_events = np.arange(problem.num_events) if train_events is None else train_events
    theta = np.zeros(problem.num_params)
    acc = np.full(problem.num_params, settings.delta0)
    rng = np.random.default_rng(settings.seed)
    history = []

    def record(epoch, seconds, train_loglik=None):
        if train_loglik is None:
            train_loglik = problem.log_likelihood(theta, train_events)
        entry = {"epoch": epoch, "seconds": round(seconds, 3),
                 "train_events": int(len(train_events)),
                 "train_loss": -train_loglik / max(len(train_events), 1),
                 "train_perplexity": perplexity(train_loglik, len(train_events)),
                 "nonzero_params": int(np.count_nonzero(theta))}
        if valid_events is not None and len(valid_events):
            valid = problem.log_likelihood(theta, valid_events)
            entry.update(valid_events=int(len(valid_events)),
                         valid_loss=-valid / len(valid_events),
                         valid_perplexity=perplexity(valid, len(valid_events)))
        history.append(entry)
        if log:
            log(entry)

    record(0, 0.0)
    for epoch in range(1, settings.epochs + 1):
        start = time.perf_counter()
        order = rng.permutation(train_events)
        stale = problem.m_star(theta) if settings.renormalize == "epoch" else None
        for b in range(0, len(order), settings.batch_size):
            _, grad = problem.batch(theta, order[b:b + settings.batch_size], stale)
            acc += grad * grad
            theta += settings.gamma * grad / np.sqrt(acc)
            if progress:
                progress(epoch, min(b + settings.batch_size, len(order)), len(order))
        record(epoch, time.perf_counter() - start)
        if stop is not None and stop(history):
            break
    return theta, history


def write_history(path, history):
    with open(path, "w", encoding="utf-8") as f:
        for entry in history:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
