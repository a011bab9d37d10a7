"""The adjustment problem compiled for the fit's C loops: multinomial loss on held-out
data and its gradient, mini-batch AdaGrad (paper, section 3; DESIGN.md 4.4-4.6 and 5).

For an event e with features F(e) (those present in small M) and target t,
P(t | e) = y_t(e) / y(e), y_t(e) = sum_f M_ft, y(e) = sum_f M_f*, with
M_fw = c(w|f) exp(A(f, w)) and A(f, w) = sum_k theta_k h_k(f, w).

Links of one row with the same C(f,w) (and continuation count) form a class: without
lexicalized meta-features they share A and M_fw, and a class of ``mult`` links trains
as one unit; lexicalized ones make every link a unit.  ``renormalize="batch"`` computes
M_f* exactly for every row a mini-batch touches (the exact gradient of the batch's
log-likelihood); ``"epoch"`` is the paper's choice, M_f* from the start of the epoch.

A batch is one call into the C loops (:mod:`snm_core.fit.kernels`): forward over the
touched rows, the events, the gradient and AdaGrad, split between threads with every
position's gradient summed in an order that does not depend on their number, so theta
does not either.  theta holds the hashed slots some small-M link uses, in slot order,
or the whole ``hash_size`` table when more than ``IDENTITY_SHARE`` of it is in use;
:meth:`AdjustmentProblem.dense_theta` scatters them into the table apply reads.
"""

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from snm_core.fit import kernels
from snm_core.io.arrays import concat_ranges, sorted_distinct
from snm_core.io.threads import ordered_map
from snm_core.text import hashing

#: Share of held-out sentences held back to choose the variant and the epochs.
VALIDATION_SHARE = 0.1
#: Events whose log-likelihood is computed at once (bounds the pair arrays).
EVAL_CHUNK = 1 << 14
#: When more than this share of the hashed slots is in use, theta is the whole
#: table instead of the slots in use: a position is then the slot, without a
#: lookup in the slot index (a large part of a lexicalized batch), for a little
#: more memory.
IDENTITY_SHARE = 0.5


def default_threads():
    return max(1, min(os.cpu_count() or 1, 8))


# --- the compiled problem ---------------------------------------------------------------

class AdjustmentProblem:
    """Small M, the events and the meta-features, compiled for training.

    Parameters
    ----------
    small_m_tables : iterable of pyarrow.Table (schema ``tables.SMALL_M``), or of
        functions that return one (called on the threads)
        Small M in key-range buckets: each table sorted by (feature, word), the
        tables in key order (as ``snm join`` writes them).
    events : Events
    spec : snm_core.fit.metafeatures.MetaFeatureSpec
    type_fingerprint : uint64 array indexed by type id
    num_feature_types : int
        Feature types per tag (a type id is ``tag * num_feature_types + type``).
    threads : int, optional
        Threads a batch is split between (default: the cores, at most 8).
        Results do not depend on it.

    Memory (bytes): a row 56, a class 12-20 (count, continuation, links in
    it) plus 4 per stored entry (lexicalized: 14 with diversity; the
    unlexicalized classes share theirs by signature), a lexicalized link 4
    (its word), a held-out feature occurrence 8, a weight 16 (theta, AdaGrad
    sum, gradient) and, during a batch, 8 per unit of the rows it touches and
    ~8 per gradient pair of a round (``kernels.ROUND_UNITS`` units).
    """

    def __init__(self, small_m_tables, events, spec, type_fingerprint, num_feature_types,
                 threads=None):
        self.spec = spec
        self.type_fingerprint = type_fingerprint
        self.threads = threads or default_threads()
        if not 1 <= self.threads <= kernels.MAX_THREADS:
            raise ValueError(f"threads must be between 1 and {kernels.MAX_THREADS}")
        self._spec = kernels.Spec.of(spec)
        self._pool = None
        self._pool_lock = threading.Lock()
        self._compile(small_m_tables, events, num_feature_types)
        self._index_weights()

    # --- compiling ------------------------------------------------------------------

    def _compile(self, small_m_tables, events, num_feature_types):
        pair_event = np.repeat(np.arange(len(events)), np.diff(events.ptr))
        by_key = np.argsort(events.keys, kind="stable")
        sorted_keys = events.keys[by_key]
        parts = {name: [] for name in ("key", "type", "count", "diversity", "class_ptr",
                                       "class_count", "class_continuation", "class_word",
                                       "class_mult")}
        pair_index, pair_rows, pair_ranks = [], [], []
        n_rows = n_classes = 0

        def compile_bucket(table):
            """A bucket's rows and classes, and the event pairs of its features (their
            rows local to the bucket); None for an empty bucket."""
            table = table() if callable(table) else table
            if table.num_rows == 0:
                return None
            rows, classes, unit_rank = self._compile_bucket(table, num_feature_types)
            # Event features that fall in this bucket's key range.
            keys = rows["key"]
            lo = np.searchsorted(sorted_keys, keys[0], side="left")
            hi = np.searchsorted(sorted_keys, keys[-1], side="right")
            pos = np.searchsorted(keys, sorted_keys[lo:hi])
            pos_ok = np.minimum(pos, len(keys) - 1)
            hit = keys[pos_ok] == sorted_keys[lo:hi]
            pairs = by_key[lo:hi][hit]
            local_row = pos_ok[hit]
            target = events.target[pair_event[pairs]].astype(np.int64)
            # Links are sorted by (row, word): one searchsorted finds (row, target).
            packed_links = (rows.pop("link_row") << 32) | rows.pop("link_word")
            packed = (local_row.astype(np.int64) << 32) | target
            lpos = np.minimum(np.searchsorted(packed_links, packed), len(packed_links) - 1)
            found = packed_links[lpos] == packed
            ranks = np.where(found, unit_rank[lpos], -1).astype(np.int32)
            return rows, classes, pairs, local_row, ranks

        # Buckets read and compiled on the threads (Parquet's reads, numpy's sorts and
        # searches release the GIL), joined in key order.
        compiled = ordered_map(self._thread_pool(), compile_bucket, small_m_tables,
                               self.threads)
        for rows, classes, pairs, local_row, ranks in filter(None, compiled):
            pair_index.append(pairs)
            pair_rows.append((local_row + n_rows).astype(np.int32))
            pair_ranks.append(ranks)
            for name, values in rows.items():
                parts[name].append(values)
            parts["class_ptr"][-1] = parts["class_ptr"][-1][:-1] + n_classes
            for name, values in classes.items():
                parts["class_" + name].append(values)
            n_rows += len(rows["key"])
            n_classes += len(classes["count"])

        def cat(name, dtype):
            values = parts.pop(name)
            return (np.concatenate(values).astype(dtype, copy=False) if values
                    else np.zeros(0, dtype))

        self.num_rows = n_rows
        self.num_classes = n_classes
        self.row_key = cat("key", np.uint64)
        self.row_type_id = cat("type", np.int64)
        self.row_type = self.type_fingerprint[self.row_type_id].astype(np.uint64)
        self.row_count = cat("count", np.int64)
        self.row_diversity = cat("diversity", np.int64)
        self.row_class_ptr = np.r_[cat("class_ptr", np.int64), n_classes]
        self.class_count = cat("class_count", np.int64)
        self.class_continuation = (cat("class_continuation", np.int64)
                                   if self.spec.continuation else None)
        self.class_mult = cat("class_mult", np.int32)
        self.num_links = int(self.class_mult.sum(dtype=np.int64))
        if self.spec.uses_target:  # units are links, grouped by class
            self.link_word = cat("class_word", np.int32)
            self.class_link_ptr = np.r_[0, np.cumsum(self.class_mult, dtype=np.int64)]
            self.row_unit_ptr = self.class_link_ptr[self.row_class_ptr]
        else:  # units are classes
            self.link_word = self.class_link_ptr = None
            self.row_unit_ptr = self.row_class_ptr
        self._map_events(events, pair_event, np.concatenate(pair_index) if pair_index
                         else np.zeros(0, np.int64),
                         np.concatenate(pair_rows) if pair_rows else np.zeros(0, np.int32),
                         np.concatenate(pair_ranks) if pair_ranks else np.zeros(0, np.int32))

    def _compile_bucket(self, table, num_feature_types):
        """Rows, link classes and each link's unit rank within its row, for one bucket."""
        feature = table["feature"].to_numpy()
        word = table["word"].to_numpy().astype(np.int64)
        count = table["count"].to_numpy()
        starts = np.flatnonzero(np.r_[True, feature[1:] != feature[:-1]])
        link_row = np.repeat(np.arange(len(starts), dtype=np.int64),
                             np.diff(np.r_[starts, len(feature)]))
        cont = table["continuation"].to_numpy() if self.spec.continuation else \
            np.zeros(len(feature), np.int64)
        # Classes: a row's links by (C(f,w), continuation), links in word order within.
        order = np.lexsort((cont, count, link_row))
        r, c, d = link_row[order], count[order], cont[order]
        new = np.r_[True, (r[1:] != r[:-1]) | (c[1:] != c[:-1]) | (d[1:] != d[:-1])]
        cls_start = np.flatnonzero(new)
        row_first_class = np.searchsorted(r[cls_start], np.arange(len(starts) + 1))
        mult = np.diff(np.r_[cls_start, len(order)])
        if self.spec.uses_target:  # units are links, in class order
            unit = np.empty(len(order), np.int64)
            unit[order] = np.arange(len(order))
            row_first_unit = starts
        else:  # units are classes
            unit = np.empty(len(order), np.int64)
            unit[order] = np.cumsum(new) - 1
            row_first_unit = row_first_class[:-1]
        rows = {
            "key": feature[starts],
            "type": (table["tag"].to_numpy()[starts].astype(np.int64) * num_feature_types
                     + table["type"].to_numpy()[starts]),
            "count": table["feature_count"].to_numpy()[starts],
            "diversity": table["diversity"].to_numpy()[starts],
            "class_ptr": row_first_class,
            "link_row": link_row,
            "link_word": word,
        }
        classes = {"count": c[cls_start], "mult": mult.astype(np.int32)}
        if self.spec.continuation:
            classes["continuation"] = d[cls_start]
        if self.spec.uses_target:
            classes["word"] = word[order].astype(np.int32)  # one a link, not a class
        return rows, classes, unit - row_first_unit[link_row]

    def _map_events(self, events, pair_event, pair_index, pair_row, pair_rank):
        """Keep the events some feature of which has seen the target; CSR of their pairs."""
        order = np.argsort(pair_index, kind="stable")  # back to event order
        pair_event = pair_event[pair_index[order]]
        pair_row, pair_rank = pair_row[order], pair_rank[order]
        # An event whose target no feature has seen has P = 0 whatever theta: left out.
        seen = np.zeros(len(events), bool)
        seen[pair_event[pair_rank >= 0]] = True
        keep = seen[pair_event]
        self.num_unseen_targets = int(len(events) - seen.sum())
        self.event_sentence = events.sentence[seen]
        self.pair_row = pair_row[keep]
        self.pair_rank = pair_rank[keep]
        pair_event = (np.cumsum(seen) - 1)[pair_event[keep]]
        self.num_events = int(seen.sum())
        self.event_ptr = np.searchsorted(pair_event, np.arange(self.num_events + 1))

    def _index_weights(self):
        """Theta's positions: the slots in use, and the stored class entries."""
        words = -(-self.spec.hash_size // 64)
        self._problem = kernels.problem(self._arrays())
        parts = self._row_parts(self.threads)
        bitmaps = [np.zeros(words, np.uint64) for _ in parts]
        self._run(kernels.lib().mark_used_slots,
                  [(ctypes.byref(self._spec), ctypes.byref(self._problem), lo, hi,
                    kernels.address(bits)) for (lo, hi), bits in zip(parts, bitmaps)])
        bits = np.bitwise_or.reduce(bitmaps) if bitmaps else np.zeros(words, np.uint64)
        del bitmaps
        used = np.unpackbits(bits.view(np.uint8), bitorder="little")[:self.spec.hash_size]
        del bits
        self.weights_used = int(np.count_nonzero(used))
        if self.weights_used > IDENTITY_SHARE * self.spec.hash_size:
            # Nearly every slot is in use: theta is the whole table, and a slot's
            # position is the slot (one cache miss less per entry).
            self.slot_index = None
            self.num_params = self.spec.hash_size
        else:
            self.slot_index = kernels.slot_index(used.view(bool))
            self.num_params = self.weights_used
        del used
        self.width = kernels.class_width(self.spec)
        self.positions = self.class_signature = None
        if self.width:
            classes, rows = self._position_rows(parts)
            dtype = np.uint16 if self.num_params <= 1 << 16 else np.int32
            self.positions = np.empty(len(classes) * self.width, dtype)
            self._problem = kernels.problem(self._arrays(), self.width, self.num_params)
            pos16 = self.positions if dtype == np.uint16 else None
            pos32 = None if pos16 is not None else self.positions
            bounds = np.linspace(0, len(classes), self.threads + 1).astype(np.int64)
            self._run(kernels.lib().store_positions, [
                (ctypes.byref(self._spec), ctypes.byref(self._problem), kernels.address(rows),
                 kernels.address(classes), int(lo), int(hi), kernels.address(pos16),
                 kernels.address(pos32)) for lo, hi in zip(bounds[:-1], bounds[1:])])
        self._problem = kernels.problem(self._arrays(), self.width, self.num_params)
        del self.row_type_id
        self._workspace = kernels.Workspace()

    def _position_rows(self, parts):
        """``(classes, rows)`` whose untargeted entries' positions are stored, one each.

        Without the feature identity among the row meta-features
        (unlexicalized), a class's entries depend only on its row's type and the
        buckets of its counts: classes with the same signature share one row of
        positions (far fewer signatures than classes).
        """
        if self.spec.variant != "unlexicalized":
            classes = np.arange(self.num_classes, dtype=np.int64)
            return classes, np.repeat(np.arange(self.num_rows, dtype=np.int64),
                                      np.diff(self.row_class_ptr))
        keys = np.empty(self.num_classes, np.int64)
        self._run(kernels.lib().class_signatures,
                  [(ctypes.byref(self._spec), ctypes.byref(self._problem),
                    kernels.address(self.row_type_id), lo, hi, kernels.address(keys))
                   for lo, hi in parts])
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        first = np.r_[True, ordered[1:] != ordered[:-1]]
        signature = np.empty(self.num_classes, np.int32)
        signature[order] = np.cumsum(first) - 1
        self.class_signature = signature
        classes = order[first]  # the lowest class of each signature, in signature order
        return classes, np.searchsorted(self.row_class_ptr, classes, side="right") - 1

    def _arrays(self):
        arrays = {"row_key": self.row_key, "row_type": self.row_type,
                  "row_count": self.row_count, "row_diversity": self.row_diversity,
                  "row_class_ptr": self.row_class_ptr, "row_unit_ptr": self.row_unit_ptr,
                  "class_count": self.class_count,
                  "class_continuation": self.class_continuation, "class_mult": self.class_mult,
                  "class_link_ptr": self.class_link_ptr, "link_word": self.link_word}
        if hasattr(self, "num_params"):
            arrays["slot_index"] = self.slot_index
            arrays["class_signature"] = self.class_signature
            if self.positions is not None:
                arrays["pos16" if self.positions.dtype == np.uint16 else "pos32"] = \
                    self.positions
        return arrays

    # --- running the loops ------------------------------------------------------------

    def _thread_pool(self):
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="fit")
        return self._pool

    def _run(self, function, calls):
        """``function(*args)`` for each args tuple, on the thread pool; checks the status."""
        if len(calls) == 1:
            results = [function(*calls[0])]
        else:
            results = [f.result() for f in [self._thread_pool().submit(function, *args)
                                            for args in calls]]
        if any(results):
            raise RuntimeError(f"{function.__name__} failed ({results})")

    def _row_parts(self, parts):
        """``parts`` ranges of rows holding about equal numbers of units."""
        if self.num_rows == 0:
            return [(0, 0)]
        offset = self.row_unit_ptr
        cuts = np.searchsorted(offset, np.linspace(0, offset[-1], parts + 1)[1:-1])
        bounds = np.r_[0, np.clip(cuts, 0, self.num_rows), self.num_rows]
        return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a] or [(0, 0)]

    # --- forward and gradient -------------------------------------------------------

    def _batch(self, events, stale_m_star=None):
        """The :class:`kernels.Batch` of ``events``: the rows they touch, their pairs."""
        pairs = concat_ranges(self.event_ptr[events], self.event_ptr[events + 1])
        pair_row = self.pair_row[pairs]
        rows = sorted_distinct(pair_row).astype(np.int64)
        local = np.searchsorted(rows, pair_row).astype(np.int64)
        offset = np.r_[0, np.cumsum(self.row_unit_ptr[rows + 1] - self.row_unit_ptr[rows])]
        rank = self.pair_rank[pairs]
        pair_unit = np.where(rank >= 0, offset[local] + rank, -1)
        event_pairs = np.r_[0, np.cumsum(self.event_ptr[events + 1] - self.event_ptr[events])]
        stale = None if stale_m_star is None else np.ascontiguousarray(stale_m_star[rows])
        return kernels.batch(rows, offset, event_pairs, local, pair_unit, stale)

    def _step(self, theta, acc, grad, events, gamma, stale_m_star):
        if theta.dtype != np.float32 or not theta.flags.c_contiguous:
            raise TypeError("theta must be a contiguous float32 array")
        batch = self._batch(np.asarray(events, np.int64), stale_m_star)
        a = kernels.address
        loglik = kernels.lib().batch_step(
            ctypes.byref(self._spec), ctypes.byref(self._problem), ctypes.byref(batch),
            a(theta, np.float32), a(acc, np.float32), a(grad, np.float64), gamma,
            self.threads, self._workspace.handle)
        if np.isnan(loglik):
            raise MemoryError("the fit ran out of memory in a batch")
        return float(loglik)

    def batch(self, theta, events, stale_m_star=None, gradient=True):
        """Log-likelihood of ``events`` and its gradient with respect to theta.

        Parameters
        ----------
        theta : float (num_params,) (computed in float32, as training keeps it)
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
        events = np.asarray(events, np.int64)
        theta = np.ascontiguousarray(theta, np.float32)
        if not gradient and stale_m_star is None:
            return self.log_likelihood(theta, events), None
        grad = np.zeros(self.num_params)
        loglik = self._step(theta, np.zeros(0, np.float32), grad, events, 0.0, stale_m_star)
        return loglik, grad if gradient else None

    def step(self, theta, acc, grad, events, gamma, stale_m_star=None):
        """One AdaGrad step on ``events``, in place; returns their log-likelihood before it.

        ``grad`` (float64, num_params) must be zero; it is left zero.
        """
        return self._step(theta, acc, grad, events, gamma, stale_m_star)

    def m_star(self, theta, events=None):
        """Exact M_f* at ``theta``: float64 (num_rows,), of every row, or (with
        ``events``) of the rows those events touch (the others left NaN)."""
        theta = np.ascontiguousarray(theta, np.float32)
        out = np.empty(self.num_rows)
        if events is None:
            rows, offset = None, self.row_unit_ptr
        else:
            out[:] = np.nan
            events = np.asarray(events, np.int64)
            rows = sorted_distinct(self.pair_row[concat_ranges(
                self.event_ptr[events], self.event_ptr[events + 1])]).astype(np.int64)
            offset = np.r_[0, np.cumsum(self.row_unit_ptr[rows + 1] - self.row_unit_ptr[rows])]
        values = out if rows is None else np.empty(len(rows))
        kernels.lib().forward(ctypes.byref(self._spec), ctypes.byref(self._problem),
                              kernels.address(theta), kernels.address(rows),
                              kernels.address(offset), self.num_rows if rows is None
                              else len(rows), self.threads, None, kernels.address(values))
        if rows is not None:
            out[rows] = values
        return out

    def log_likelihood(self, theta, events=None, m_star=None):
        """Sum of log P over ``events`` (default: all) with exact normalisation.

        ``m_star`` (from :meth:`m_star` at the same theta) saves its pass.
        """
        theta = np.ascontiguousarray(theta, np.float32)
        events = np.arange(self.num_events) if events is None else np.asarray(events, np.int64)
        if m_star is None:
            m_star = self.m_star(theta, events)
        lib, a = kernels.lib(), kernels.address
        total = 0.0
        for start in range(0, len(events), EVAL_CHUNK):
            chunk = events[start:start + EVAL_CHUNK]
            pairs = concat_ranges(self.event_ptr[chunk], self.event_ptr[chunk + 1])
            pair_row = self.pair_row[pairs].astype(np.int64)
            rank = self.pair_rank[pairs]
            has = np.flatnonzero(rank >= 0)
            # Target units in row order: each row's entries are enumerated once a run.
            by_row = has[np.argsort(pair_row[has], kind="stable")]
            rows = pair_row[by_row]
            units = self.row_unit_ptr[rows] + rank[by_row]
            classes = (np.searchsorted(self.class_link_ptr, units, side="right") - 1
                       if self.spec.uses_target else units)
            values = np.empty(len(by_row))
            bounds = np.linspace(0, len(by_row), self.threads + 1).astype(np.int64)
            self._run(lib.unit_values, [
                (ctypes.byref(self._spec), ctypes.byref(self._problem), a(theta),
                 a(rows[lo:hi]), a(classes[lo:hi]), a(units[lo:hi]), int(hi - lo),
                 a(values[lo:hi])) for lo, hi in zip(bounds[:-1], bounds[1:])])
            m_index = np.full(len(pairs), -1, np.int64)
            m_index[by_row] = np.arange(len(by_row))
            event_pairs = np.r_[0, np.cumsum(self.event_ptr[chunk + 1] - self.event_ptr[chunk])]
            total += lib.events_pass(len(chunk), a(event_pairs), a(pair_row), a(m_star),
                                     a(m_index), a(values), None, None, None, None, None)
        return float(total)

    def dense_theta(self, theta):
        """The ``hash_size`` weight table (float32) the apply stage reads."""
        if self.slot_index is None:
            return np.asarray(theta, np.float32).copy()
        dense = np.zeros(self.spec.hash_size, dtype=np.float32)
        lines = self.slot_index.reshape(-1, 8)
        block = 1 << 12  # index lines a step: the slot arrays stay small
        for lo in range(0, len(lines), block):
            part = lines[lo:lo + block]
            marks = np.unpackbits(part[:, 1:].copy().view(np.uint8), bitorder="little")
            slots = np.flatnonzero(marks) + lo * kernels.INDEX_SLOTS
            first = int(part[0, 0])
            dense[slots] = theta[first:first + len(slots)]
        return dense

    def weights_in_use(self):
        """Number of hashed weights some small-M link has a non-zero entry for."""
        return self.weights_used

    def split_events(self, share=VALIDATION_SHARE):
        """Deterministic (train, validation) event indices; whole sentences go one way."""
        sentence_hash = hashing.mix64(self.event_sentence.astype(np.uint64))
        valid = (sentence_hash % np.uint64(1000)) < np.uint64(round(share * 1000))
        return np.flatnonzero(~valid), np.flatnonzero(valid)

    def close(self):
        """Stop the worker threads and free the batch buffers (also done when collected)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._workspace = kernels.Workspace()
