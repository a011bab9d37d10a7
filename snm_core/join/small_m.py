"""Held-out events and small M as tables (the logic of ``snm join``, without Beam).

* :func:`events_table`: one row per predicted word with its feature keys;
* :func:`select_rows`: the rows of one count bucket whose feature occurs in
  the held-out events (the small-M rows), with the feature's counts beside
  every link.
"""

import numpy as np
import pyarrow as pa

from snm_core.io import tables
from snm_core.io.arrays import concat_ranges
from snm_core.io.errors import SnmInputError


def events_table(events, file_index, sentence_lines):
    """One row per event: file, line, target, features (list of keys, in extraction order)."""
    order = np.argsort(events.event, kind="stable")
    counts = np.bincount(events.event, minlength=events.num_events)
    offsets = np.zeros(events.num_events + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.table({
        "file": pa.array(np.full(events.num_events, file_index, np.int16)),
        "line": pa.array(np.asarray(sentence_lines, np.int64)[events.sentence]),
        "target": pa.array(events.target),
        "features": pa.ListArray.from_arrays(pa.array(offsets), pa.array(events.key[order])),
    }, schema=tables.EVENTS)


#: The count's feature columns :func:`select_rows` reads.
FEATURE_COLUMNS = ("feature", "tag", "type", "count", "diversity")
#: The count's link columns it reads: a link's key is its feature's, repeated (the key
#: column is the costliest to decode).
LINK_COLUMNS = ("word", "count", "continuation")


def select_rows(features, links, keys):
    """The small-M rows: links of the features whose key is in ``keys``.

    Parameters
    ----------
    features : pyarrow.Table (count schema), sorted by feature
    links : pyarrow.Table (count schema; :data:`LINK_COLUMNS` are read), sorted by
        (feature, word): each feature's ``diversity`` links in the features' order
    keys : ndarray of uint64, sorted, distinct

    Returns
    -------
    pyarrow.Table with schema :data:`snm_core.io.tables.SMALL_M`
    """
    feature = features["feature"].to_numpy()
    diversity = features["diversity"].to_numpy()
    if diversity.sum() != links.num_rows:
        raise SnmInputError("count bucket files disagree: diversities do not sum to the "
                            "number of links; re-run snm count")
    # The held-out keys searched among the bucket's features (a few thousand searches,
    # not one a feature), then their links taken by row range.
    at = np.searchsorted(feature, keys)
    inside = at < len(feature)  # keys are sorted: only a tail falls past the last feature
    at = at[inside]
    rows = at[feature[at] == keys[inside]]
    repeat = diversity[rows]
    ends = np.cumsum(diversity)
    chosen = links.take(pa.array(concat_ranges(ends[rows] - repeat, ends[rows])))
    selected = features.take(pa.array(rows))
    return pa.table({
        "feature": np.repeat(feature[rows], repeat),
        "word": chosen["word"],
        "count": chosen["count"],
        "continuation": chosen["continuation"],
        "feature_count": np.repeat(selected["count"].to_numpy(), repeat),
        "diversity": np.repeat(repeat, repeat),
        "tag": np.repeat(selected["tag"].to_numpy(), repeat),
        "type": np.repeat(selected["type"].to_numpy(), repeat),
    }, schema=tables.SMALL_M)
