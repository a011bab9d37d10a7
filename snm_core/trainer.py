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
from snm_core.features import FeatureExtractor

#: Memory for the precomputed meta-feature entries of the rows with the most
#: classes (the empty feature, frequent contexts): a mini-batch touches them
#: all, so hashing them once saves most of the per-batch work.  2 GiB holds the
#: whole kernel skip-10-gram small M with unlexicalized meta-features (~0.6 GB)
#: and the rows that matter of the lexicalized one (3.4 GB in all).
ENTRY_CACHE_BYTES = 2 << 30
#: Classes whose meta-feature entries are hashed or summed at once.
ENTRY_CHUNK = 1 << 14
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


def type_fingerprints(manifest):
    """Stable hash of each type id's (tag, type name), for the ``type`` meta-feature."""
    from snm_core.config import parse_config

    return FeatureExtractor(parse_config(manifest["config"]), manifest["tags"]).type_salts


def load_join(directory, spec, cache_bytes=ENTRY_CACHE_BYTES):
    """``(AdjustmentProblem, manifest)`` for a ``snm join`` output directory.

    Small M is read one bucket file at a time, so only the compiled arrays
    (about 36 bytes a row, 12 a class, 12 a held-out feature occurrence) stay
    in memory.
    """
    from snm_core import tables

    manifest = tables.read_manifest(directory, "join")
    names = sorted(manifest["files"])
    event_tables = [pq.read_table(os.path.join(directory, n)) for n in names
                    if n.startswith("events-")]
    if not event_tables:
        raise SnmInputError(f"{directory}: no held-out events; is the held-out text empty?")
    events = Events.from_table(pa.concat_tables(event_tables))
    del event_tables
    small_m = (pq.read_table(os.path.join(directory, n)) for n in names
               if n.startswith("small_m-"))
    problem = AdjustmentProblem(small_m, events, spec, type_fingerprints(manifest),
                                len(manifest["feature_types"]), cache_bytes)
    return problem, manifest


# --- the compiled problem ---------------------------------------------------------------

class AdjustmentProblem:
    """Small M, the events and the meta-features, compiled for vectorised training.

    Parameters
    ----------
    small_m_tables : iterable of pyarrow.Table (schema ``tables.SMALL_M``)
        Small M in key-range buckets: each table sorted by (feature, word), the
        tables in key order (as ``snm join`` writes them).
    events : Events
    spec : snm_core.metafeatures.MetaFeatureSpec
    type_fingerprint : uint64 array indexed by type id
    num_feature_types : int
        Feature types per tag (a type id is ``tag * num_feature_types + type``).
    cache_bytes : int, optional
        Memory for the precomputed entries of the rows with the most classes;
        the rest are hashed per batch.  Speed only: the results are the same.

    Meta-feature entries are hashed on the fly for the rows a batch touches.
    Weights live in a compact vector over the hashed indices that occur,
    except for lexicalized meta-features, whose millions of indices make the
    full ``hash_size`` table the cheaper representation.
    """

    def __init__(self, small_m_tables, events, spec, type_fingerprint, num_feature_types,
                 cache_bytes=ENTRY_CACHE_BYTES):
        self.spec = spec
        self.type_fingerprint = type_fingerprint
        self._compile(small_m_tables, events, num_feature_types)
        self._cache_pos = None
        if spec.uses_target:
            self.param_index = None
            self.num_params = spec.hash_size
        else:
            self.param_index = self._used_indices()
            self.num_params = len(self.param_index)
            # hashed index -> position in the compact theta: one gather instead of a
            # binary search per entry (4 bytes a table slot).
            self._position = np.zeros(spec.hash_size, np.int32)
            self._position[self.param_index] = np.arange(self.num_params, dtype=np.int32)
        self._fill_cache(cache_bytes)

    # --- compiling ------------------------------------------------------------------

    def _compile(self, small_m_tables, events, num_feature_types):
        pair_event = np.repeat(np.arange(len(events)), np.diff(events.ptr))
        by_key = np.argsort(events.keys, kind="stable")
        sorted_keys = events.keys[by_key]
        rows, classes, pair_rows, pair_classes, pair_index = [], [], [], [], []
        n_rows = n_classes = 0
        for table in small_m_tables:
            if table.num_rows == 0:
                continue
            b_rows, b_classes, link_class = self._compile_bucket(table, num_feature_types)
            # Event features that fall in this bucket's key range.
            keys = b_rows["key"]
            lo = np.searchsorted(sorted_keys, keys[0], side="left")
            hi = np.searchsorted(sorted_keys, keys[-1], side="right")
            pos = np.searchsorted(keys, sorted_keys[lo:hi])
            pos_ok = np.minimum(pos, len(keys) - 1)
            hit = keys[pos_ok] == sorted_keys[lo:hi]
            pairs = by_key[lo:hi][hit]
            local_row = pos_ok[hit]
            target = events.target[pair_event[pairs]].astype(np.int64)
            # Links are sorted by (row, word): one searchsorted finds (row, target).
            packed_links = (b_rows["link_row"] << 32) | b_rows["link_word"]
            packed = (local_row.astype(np.int64) << 32) | target
            lpos = np.minimum(np.searchsorted(packed_links, packed), len(packed_links) - 1)
            found = packed_links[lpos] == packed
            pair_index.append(pairs)
            pair_rows.append(local_row + n_rows)
            pair_classes.append(np.where(found, link_class[lpos] + n_classes, -1))
            del b_rows["link_row"], b_rows["link_word"]
            b_rows["cls_ptr"] = b_rows["cls_ptr"][:-1] + n_classes
            rows.append(b_rows)
            classes.append(b_classes)
            n_rows += len(keys)
            n_classes += len(b_classes["count"])

        def cat(parts, name, dtype):
            return (np.concatenate([p[name] for p in parts]).astype(dtype, copy=False)
                    if parts else np.zeros(0, dtype))

        self.num_rows = n_rows
        self.row_key = cat(rows, "key", np.uint64)
        self.row_type = cat(rows, "type", np.int32)
        self.row_count = cat(rows, "count", np.int64)
        self.row_diversity = cat(rows, "diversity", np.int64)
        self.row_cls_ptr = np.r_[cat(rows, "cls_ptr", np.int64), n_classes]
        self.cls_count = cat(classes, "count", np.int64)
        self.cls_continuation = cat(classes, "continuation", np.int64) \
            if self.spec.continuation else None
        self.cls_mult = cat(classes, "mult", np.float32)
        self.cls_word = cat(classes, "word", np.int32) if self.spec.uses_target else None
        self._map_events(events, pair_event, cat([{"i": p} for p in pair_index], "i", np.int64),
                         cat([{"i": p} for p in pair_rows], "i", np.int32),
                         cat([{"i": p} for p in pair_classes], "i", np.int64))

    def _compile_bucket(self, table, num_feature_types):
        """Rows, link classes and the class of each link, for one small-M bucket."""
        feature = table["feature"].to_numpy()
        word = table["word"].to_numpy().astype(np.int64)
        count = table["count"].to_numpy()
        starts = np.flatnonzero(np.r_[True, feature[1:] != feature[:-1]])
        link_row = np.repeat(np.arange(len(starts), dtype=np.int64),
                             np.diff(np.r_[starts, len(feature)]))
        cont = table["continuation"].to_numpy() if self.spec.continuation else \
            np.zeros(len(feature), np.int64)
        if self.spec.uses_target:
            order = np.arange(len(feature))  # every link is its own class
            new = np.ones(len(feature), dtype=bool)
        else:
            order = np.lexsort((cont, count, link_row))
            r, c, d = link_row[order], count[order], cont[order]
            new = np.r_[True, (r[1:] != r[:-1]) | (c[1:] != c[:-1]) | (d[1:] != d[:-1])]
        cls_start = np.flatnonzero(new)
        cls_row = link_row[order][cls_start]
        link_class = np.empty(len(order), np.int64)
        link_class[order] = np.cumsum(new) - 1
        rows = {
            "key": feature[starts],
            "type": (table["tag"].to_numpy()[starts].astype(np.int32) * num_feature_types
                     + table["type"].to_numpy()[starts]),
            "count": table["feature_count"].to_numpy()[starts],
            "diversity": table["diversity"].to_numpy()[starts],
            "cls_ptr": np.searchsorted(cls_row, np.arange(len(starts) + 1)),
            "link_row": link_row,
            "link_word": word,
        }
        classes = {"count": count[order][cls_start],
                   "continuation": cont[order][cls_start],
                   "mult": np.diff(np.r_[cls_start, len(order)]),
                   "word": word[order][cls_start].astype(np.int32)}
        return rows, classes, link_class

    def _map_events(self, events, pair_event, pair_index, pair_row, pair_cls):
        """Keep the events some feature of which has seen the target; CSR of their pairs."""
        order = np.argsort(pair_index, kind="stable")  # back to event order
        pair_event = pair_event[pair_index[order]]
        pair_row, pair_cls = pair_row[order], pair_cls[order]
        # An event whose target no feature has seen has P = 0 whatever theta: left out.
        seen = np.zeros(len(events), bool)
        seen[pair_event[pair_cls >= 0]] = True
        keep = seen[pair_event]
        self.num_unseen_targets = int(len(events) - seen.sum())
        self.event_sentence = events.sentence[seen]
        self.event_target = events.target[seen]
        self.pair_row = pair_row[keep]
        self.pair_cls = pair_cls[keep]
        pair_event = (np.cumsum(seen) - 1)[pair_event[keep]]
        self.num_events = len(self.event_target)
        self.event_ptr = np.searchsorted(pair_event, np.arange(self.num_events + 1))
        self.event_len = np.diff(self.event_ptr)

    def _row_chunks(self, max_classes=ENTRY_CHUNK):
        """Consecutive row ranges holding about ``max_classes`` classes each (bounds memory)."""
        bounds = np.searchsorted(self.row_cls_ptr, np.arange(0, self.row_cls_ptr[-1],
                                                             max_classes), side="right") - 1
        bounds = sorted_distinct(np.r_[bounds, self.num_rows].clip(0, self.num_rows))
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            yield np.arange(lo, hi)

    def _used_indices(self):
        """Sorted distinct hashed indices with a non-zero weight somewhere in small M."""
        used = []
        for rows in self._row_chunks():
            classes, local_row, _ = self._row_classes(rows)
            (r_idx, r_wt), (c_idx, c_wt) = self._hashed_entries(rows, classes, local_row)
            used.append(sorted_distinct(np.concatenate([r_idx[r_wt > 0], c_idx[c_wt > 0]])))
        return sorted_distinct(np.concatenate(used)) if used else np.zeros(0, np.int64)

    # --- forward and gradient -------------------------------------------------------

    def _row_classes(self, rows):
        """Classes of ``rows`` (sorted distinct): global index and local row of each."""
        starts, ends = self.row_cls_ptr[rows], self.row_cls_ptr[rows + 1]
        classes = concat_ranges(starts, ends)
        local_row = np.repeat(np.arange(len(rows)), ends - starts)
        return classes, local_row, starts

    def _hashed_entries(self, rows, classes, local_row):
        """Hashed meta-feature entries: ``(index, weight)`` for rows (n, Kr) and classes (n, Kc)."""
        return metafeatures.entries(
            self.spec, self.row_key[rows], self.type_fingerprint[self.row_type[rows]],
            self.row_count[rows], self.row_diversity[rows], local_row,
            None if self.cls_word is None else self.cls_word[classes], self.cls_count[classes],
            None if self.cls_continuation is None else self.cls_continuation[classes])

    def _params(self, hashed):
        """Positions in theta of hashed indices."""
        if self.param_index is None:
            return hashed
        return self._position[hashed]

    def _fill_cache(self, budget):
        """Precompute the class entries (theta positions) of the rows with most classes."""
        if self.num_rows == 0:
            return
        sizes = np.diff(self.row_cls_ptr)
        rows = np.argsort(-sizes, kind="stable")
        probe = rows[:1]
        width = self._hashed_entries(probe, *self._row_classes(probe)[:2])[1][0].shape[1]
        # A position takes 2 bytes when theta is short enough (unlexicalized), else 4.
        position_type = np.uint16 if self.num_params <= np.iinfo(np.uint16).max else np.int32
        per_class = (np.dtype(position_type).itemsize + 4) * width  # + float32 weight
        if per_class == 0:
            return
        cached = np.sort(rows[np.cumsum(sizes[rows]) * per_class <= budget])
        if not len(cached):
            return
        self._cache_idx = np.empty((sizes[cached].sum(), width), position_type)
        self._cache_wt = np.empty(self._cache_idx.shape, np.float32)
        offsets = np.r_[0, np.cumsum(sizes[cached])]
        # Hash in chunks of ENTRY_CHUNK classes: the temporaries stay small.
        bounds = sorted_distinct(np.r_[np.searchsorted(offsets, np.arange(0, offsets[-1],
                                                                          ENTRY_CHUNK),
                                                       side="right") - 1, len(cached)])
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            chunk = cached[lo:hi]
            classes, local_row, _ = self._row_classes(chunk)
            _, (c_idx, c_wt) = self._hashed_entries(chunk, classes, local_row)
            self._cache_idx[offsets[lo]:offsets[hi]] = self._params(c_idx)
            self._cache_wt[offsets[lo]:offsets[hi]] = c_wt
        self._cache_pos = np.full(self.num_rows, -1, np.int64)
        self._cache_pos[cached] = offsets[:-1]

    def _row_entries(self, rows):
        """Row entries as theta positions: ``(index (n, Kr), weight (n, Kr))``."""
        (r_idx, r_wt), _ = self._hashed_entries(rows, np.zeros(0, np.int64),
                                                np.zeros(0, np.int64))
        return self._params(r_idx), r_wt

    def _class_entries(self, rows, classes, local_row):
        """Yield ``(lo, hi, index, weight)``: theta positions of the class entries, by chunk.

        Entries come from the cache where they can and are hashed otherwise;
        a chunk holds ``ENTRY_CHUNK`` classes, so the temporaries stay bounded
        whatever the batch touches.
        """
        # Per row of the batch, gathered once for all chunks.
        row_start = (self._cache_pos[rows] if self._cache_pos is not None
                     else np.full(len(rows), -1))
        row_first_cls = self.row_cls_ptr[rows]
        for lo in range(0, max(len(classes), 1), ENTRY_CHUNK):
            hi = min(lo + ENTRY_CHUNK, len(classes))
            cls, row = classes[lo:hi], local_row[lo:hi]
            start = row_start[row]
            hit = start >= 0
            # A cached class sits at its row's cache offset plus its rank in the row
            # (meaningless where the row is not cached).
            pos = start + (cls - row_first_cls[row])
            if hit.all() and len(cls):
                yield lo, hi, self._cache_idx[pos], self._cache_wt[pos]
                continue
            _, (idx, wt) = self._hashed_entries(rows, cls, row)
            idx = self._params(idx)
            if hit.any():
                idx[hit] = self._cache_idx[pos[hit]]
                wt[hit] = self._cache_wt[pos[hit]]
            yield lo, hi, idx, wt

    def _adjusted(self, theta, rows, classes, local_row):
        """M of each class, M_f* of each row and the row entries, at ``theta``."""
        r_idx, r_wt = self._row_entries(rows)
        a_cls = (theta[r_idx] * r_wt).sum(axis=1)[local_row]
        for lo, hi, idx, wt in self._class_entries(rows, classes, local_row):
            a_cls[lo:hi] += (theta[idx] * wt).sum(axis=1)
        c = self.cls_count[classes] / self.row_count[rows][local_row]
        m = c * np.exp(a_cls)
        m_star = np.bincount(local_row, weights=self.cls_mult[classes] * m, minlength=len(rows))
        return m, m_star, (r_idx, r_wt)

    def batch(self, theta, events, stale_m_star=None, gradient=True):
        """Log-likelihood of ``events`` and its gradient with respect to theta.

        Parameters
        ----------
        theta : float (num_params,)
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
        m, m_star, (r_idx, r_wt) = self._adjusted(theta, rows, classes, cls_local_row)
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
        grad = np.bincount(r_idx.ravel(), weights=(g_row[:, None] * r_wt).ravel(),
                           minlength=self.num_params)
        for lo, hi, idx, wt in self._class_entries(rows, classes, cls_local_row):
            grad += np.bincount(idx.ravel(), weights=(g_cls[lo:hi, None] * wt).ravel(),
                                minlength=self.num_params)
        return loglik, grad

    def m_star(self, theta):
        """Exact M_f* of every row at ``theta``."""
        out = np.empty(self.num_rows)
        for rows in self._row_chunks():
            classes, local_row, _ = self._row_classes(rows)
            out[rows] = self._adjusted(theta, rows, classes, local_row)[1]
        return out

    def log_likelihood(self, theta, events=None, chunk=16384):
        """Sum of log P over ``events`` (default: all) with exact normalisation."""
        events = np.arange(self.num_events) if events is None else events
        return sum(self.batch(theta, events[start:start + chunk], gradient=False)[0]
                   for start in range(0, len(events), chunk))

    def dense_theta(self, theta):
        """The ``hash_size`` weight table (float32) the apply stage reads."""
        if self.param_index is None:
            return theta.astype(np.float32)
        dense = np.zeros(self.spec.hash_size, dtype=np.float32)
        dense[self.param_index] = theta
        return dense

    def weights_in_use(self):
        """Number of hashed weights some small-M link has a non-zero entry for."""
        if self.param_index is None:
            return len(self._used_indices())
        return len(self.param_index)

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
    theta : float32 (num_params,)
    history : list of dicts, one per epoch (0 = untrained): loss, perplexities, seconds
    """
    train_events = np.arange(problem.num_events) if train_events is None else train_events
    # float32 halves the memory of the lexicalized hash_size-long vectors; the
    # update itself is computed in float64.
    theta = np.zeros(problem.num_params, dtype=np.float32)
    acc = np.full(problem.num_params, settings.delta0, dtype=np.float32)
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
            touched = np.flatnonzero(grad)
            g = grad[touched]
            acc[touched] += g * g
            theta[touched] += settings.gamma * g / np.sqrt(acc[touched].astype(np.float64))
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
