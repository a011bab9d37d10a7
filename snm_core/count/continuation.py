"""Continuation counts (Kneser-Ney's N1+(. f w)), the count's fourth step
(:mod:`snm_core.count.counting`): every link of a type that extends a shorter one (an
n-gram of the (n-1)-gram) names the link it extends; the names are shuffled to that
link's bucket and counted there.
"""

import numpy as np
import pyarrow as pa

from snm_core.io.arrays import group_rows, run_starts, stable_argsort, take_runs
from snm_core.io.radix import sort_uint64
from snm_core.text import hashing


def parent_types(config):
    """For each feature type, the type it extends by one older word (-1 if none).

    An n-gram of length n extends the (n-1)-gram; a skip-gram (r, s, a) extends
    (r-1, s, a) when r >= 2 and the configuration has that type.
    """
    from snm_core.text.config import FeatureType

    types = config.feature_types()
    index = {t: i for i, t in enumerate(types)}
    parents = np.full(len(types), -1, dtype=np.int64)
    for i, t in enumerate(types):
        if t.kind == "ngram" and t.adjacent >= 1:
            parent = FeatureType("ngram", 0, 0, t.adjacent - 1)
        elif t.kind == "skip" and t.remote >= 2:
            parent = FeatureType("skip", t.remote - 1, t.skip, t.adjacent)
        else:
            continue
        parents[i] = index.get(parent, -1)
    return parents


def extension_keys(features, links, extractor, parents):
    """Where each link (f', w) of a type that extends another sends its continuation.

    The link extends (f, w), f being f' without its oldest word (same tag);
    every distinct f' of a (f, w) adds one to the continuation count of (f, w),
    the number of distinct words seen right before f followed by w (Kneser-Ney's
    N1+(. f w)).

    Returns
    -------
    parent_feature : uint64 (k,), key of f for the k links that extend one
    parent_link : uint64 (k,), :func:`snm_core.text.hashing.link_key` of (f, w)
    """
    n_types = len(extractor.feature_types)
    type_index = features["type"].to_numpy().astype(np.int64)
    type_id = features["tag"].to_numpy().astype(np.int64) * n_types + type_index
    parent_key = np.zeros(features.num_rows, dtype=np.uint64)
    has_parent = parents[type_index] >= 0 if features.num_rows else np.zeros(0, bool)
    lists = features["words"].combine_chunks()
    flat = lists.values.to_numpy()
    starts = lists.offsets.to_numpy()[:-1]
    # The rows of each (tag, type), from one sort, not a scan of all rows per type.
    by_type, bounds = group_rows(type_id, len(extractor.tags) * n_types)
    for t in np.flatnonzero(parents >= 0):
        width = extractor.feature_types[t].num_words
        for g in range(len(extractor.tags)):
            rows = by_type[bounds[g * n_types + t]:bounds[g * n_types + t + 1]]
            if not len(rows):
                continue
            # Every row of one type has its width: all but its first word are one
            # run of the list values.
            words = take_runs(flat, starts[rows] + 1, width - 1)
            parent_key[rows] = extractor.keys_for(g * n_types + parents[t], words)
    diversity = features["diversity"].to_numpy()
    link_has = np.repeat(has_parent, diversity)
    link_parent = np.repeat(parent_key, diversity)[link_has]
    word = links["word"].to_numpy()[link_has]
    return link_parent, hashing.link_key(link_parent, word)


def add_continuation(links, extension_link_keys):
    """``links`` with a ``continuation`` column: how many extension keys name each link.

    ``extension_link_keys``: an array of keys, or an iterable of such arrays (chunks of
    one bucket's names, counted one at a time: a bucket holding the empty context is
    named by every link of the 1-word contexts, more as the corpus grows).
    """
    if isinstance(extension_link_keys, np.ndarray):
        extension_link_keys = [extension_link_keys]
    own = hashing.link_key(links["feature"].to_numpy(), links["word"].to_numpy())
    order, own = stable_argsort(own, return_sorted=True)
    starts = run_starts(own)
    distinct = own[starts]
    named_times = np.zeros(len(distinct), dtype=np.int64)
    for keys in extension_link_keys:
        ext = np.array(keys, np.uint64)
        sort_uint64(ext)
        ext_starts = run_starts(ext)
        named, times = ext[ext_starts], np.diff(np.r_[ext_starts, len(ext)])
        if not len(named) or not len(distinct):
            continue
        at = np.minimum(np.searchsorted(distinct, named), len(distinct) - 1)
        found = distinct[at] == named  # names of no link are not counted
        named_times[at[found]] += times[found]
    counts = np.zeros(len(own), dtype=np.int64)
    counts[order] = np.repeat(named_times, np.diff(np.r_[starts, len(own)]))
    return links.append_column("continuation", pa.array(counts))
