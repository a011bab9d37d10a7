"""Counting links (f, w) and features with numpy and pyarrow, many sentences at a time.

The count pipeline is four pure steps; the Beam code only moves their
outputs around (DESIGN.md, "Speed"):

1. :func:`batch_partials`: one batch's links, summed, and its distinct
   features with their type and words, sorted by feature key.
2. :func:`cut_by_bucket`: a worker finds the key-range buckets' rows in the
   partials of many batches and sends one part per bucket (the concatenation
   of its slices).
3. :func:`merge_links` then :func:`merge_features` (together
   :func:`merge_bucket`; :func:`merge_bucket_chunks` a chunk of partials at a
   time): sum all partials of one bucket and produce its final tables, sorted,
   with C(f,*) and the diversity of each feature.
4. :func:`snm_core.count.continuation.extension_names` then
   :func:`~snm_core.count.continuation.add_continuation`: every link of a type
   that extends a shorter one (an n-gram of the (n-1)-gram) names the link it
   extends; the names are shuffled to that link's bucket and counted there
   (Kneser-Ney's continuation count N1+(. f w)).

Partials are dicts of numpy arrays (they pickle cheaply):

* links: ``feature`` uint64, ``word`` int32, ``count`` int64 (in scratch: narrower,
  :func:`links_to_scratch`)
* features: ``feature`` uint64, ``type`` int32 (type id: tag-major), optionally ``links``
  (int64, each row's links in the links partial: a step that changes the links drops
  it or makes it again), and the identity
  words oldest first, either as ``words`` int32 (n, w) padded with -1 (w at most the
  extractor's ``max_words``; a batch's partial has its type's number of words), or as
  ``width`` uint8 (n,) and ``word`` (every row's words one after another), as the
  scratch and the merge keep them (:func:`features_from_scratch`,
  :func:`distinct_features`)

In the scratch a part's links do not carry their keys: its features rows say how many
of the links that follow, in key order, are theirs (:func:`scratch_groups`).
"""

import numpy as np
import pyarrow as pa

from snm_core.io import key_ranges, native, tables
from snm_core.io.arrays import group_rows, padded_lists, run_starts

_sum_links = native.function("sum_links", [native.ptr, native.ptr, native.i64, native.ptr,
                                           native.i64, native.i64] + [native.ptr] * 4,
                             native.i64)
_batch_links = native.function("batch_links", [native.ptr] * 3 + [native.i64] + [native.ptr] * 8,
                               native.i64)
_distinct_feature_rows = native.function(
    "distinct_feature_rows", [native.ptr] * 4 + [native.i64, native.i64] + [native.ptr] * 7,
    native.i64)


def batch_partials(events, work=None):
    """Summed links and distinct features of one batch, both sorted by feature key.

    The occurrences are sorted by (feature key, word) in C (``link_sums.c``), each with
    its index, and summed in one pass: runs of equal (key, word) are the links, their
    lengths the counts; runs of equal keys the features.  The key order lets
    :func:`cut_by_bucket` find its key ranges without copying.

    Parameters
    ----------
    events : snm_core.text.features.EventFeatures
    work : a dict that keeps the sort's buffer between calls, or None

    Returns
    -------
    links : links partial, sorted by (feature, word)
    features : features partial, one row per distinct key (type and words of
        its first occurrence, and ``links``, its number of links), sorted by feature
    """
    key = np.ascontiguousarray(events.key, np.uint64)
    event = np.ascontiguousarray(events.event, np.int64)
    target = np.ascontiguousarray(events.target, np.int32)
    n = len(key)
    out_key, out_word, out_count = np.empty(n, np.uint64), np.empty(n, np.int32), \
        np.empty(n, np.int64)
    feature_key, first, features = np.empty(n, np.uint64), np.empty(n, np.int64), \
        np.zeros(1, np.int64)
    feature_links = np.empty(n, np.int64)
    records = sort_records(n, work)
    links = _batch_links(native.address(key), native.address(event), native.address(target),
                         n, native.address(records), native.address(out_key),
                         native.address(out_word), native.address(out_count),
                         native.address(feature_key), native.address(first),
                         native.address(feature_links), native.address(features))
    if links < 0:
        raise ValueError(f"{n:,} occurrences: a batch's chunk takes fewer than 2^32")
    # The first occurrence of each key: the choice matters only for colliding keys, but
    # stays fixed.
    first = first[:int(features[0])]
    return ({"feature": out_key[:links], "word": out_word[:links], "count": out_count[:links]},
            {"feature": feature_key[:len(first)], "type": events.type[first],
             "words": events.context_words(first, narrow=True),
             "links": feature_links[:len(first)]})


class ShardSums:
    """The links of one-key features summed over a whole shard, not sent batch by batch.

    A feature with no context words (the empty context: one key per tag) is followed by
    every word, so each batch's partial holds a row for nearly every distinct word, and
    all of them go to the one bucket of that key: sent per batch, that bucket's merge
    grows as batches x words, with the corpus.  Summed here in a dense array over the
    vocabulary, a shard sends one row per word.
    """

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        self.sums = {}  # feature key -> (features partial of one row, counts by word)

    def add(self, links, features):
        """Sum a batch partial of one feature (``features`` has one row) into the shard's."""
        key = int(features["feature"][0])
        if key not in self.sums:
            self.sums[key] = (features, np.zeros(self.vocab_size, np.int64))
        self.sums[key][1][links["word"]] += links["count"]  # words are distinct in a partial

    def partials(self):
        """The sums as ``(links partials, features partials)``, one pair per key, sorted as
        :func:`batch_partials` sorts; the sums start again."""
        links, features = [], []
        for key, (feature_row, counts) in sorted(self.sums.items()):
            words = np.flatnonzero(counts)
            links.append({"feature": np.full(len(words), key, np.uint64),
                          "word": words.astype(np.int32), "count": counts[words]})
            features.append({**feature_row, "links": np.array([len(words)], np.int64)})
        self.sums = {}
        return links, features


#: The scratch keeps word ids in 16 bits when every id of the vocabulary (and the link
#: sketch's collapsed word, the vocabulary's size) is at most this: partials are written
#: to scratch as they are sent and read back once.
SCRATCH_WORD_LIMIT = 0xFFFF
#: The scratch keeps counts in 16 bits; a larger count travels as several rows of one
#: link, which the merge sums (in a batch's partials only the most frequent links come
#: near it: the empty context's, summed over a shard, and a sketch's collapsed rows).
SCRATCH_COUNT_MAX = np.iinfo(np.uint16).max
#: The merge's sort carries counts in 32 bits: larger ones are cut likewise.
MERGE_COUNT_MAX = np.iinfo(np.int32).max


def split_counts(partial, limit):
    """A links partial whose counts above ``limit`` are cut into rows of one link, each
    at most ``limit``, in place of the row.  Rows keep their order."""
    feature, word, count = partial["feature"], partial["word"], partial["count"]
    if len(count) and int(count.max()) > limit:
        rows, count = cut_into_pieces(count, limit)
        feature, word = feature[rows], word[rows]
    return {"feature": feature, "word": word, "count": count}


def cut_into_pieces(values, limit):
    """Each of ``values`` (non-negative) cut into pieces of ``limit``, its last piece the
    rest: ``(rows, pieces)``, ``rows`` the value each piece comes from, in order (a
    value of at most ``limit``, 0 included, is one piece)."""
    pieces = np.maximum(-(-values // limit), 1)
    rows = np.repeat(np.arange(len(values)), pieces)
    last = np.arange(len(rows)) - np.repeat(np.cumsum(pieces) - pieces, pieces) \
        == pieces[rows] - 1
    return rows, np.where(last, values[rows] - (pieces[rows] - 1) * limit, limit)


def links_to_scratch(partial, vocab_size):
    """A links partial in the narrow columns of the scratch (:func:`merge_links` reads
    them as they are).  Rows keep their order."""
    cut = split_counts(partial, SCRATCH_COUNT_MAX)
    return {"feature": cut["feature"],
            "word": cut["word"].astype(scratch_word_type(vocab_size), copy=False),
            "count": cut["count"].astype(np.uint16)}


#: A scratch features row names at most this many links (``links``, uint16); a feature
#: with more in one part (the empty context's, summed over a shard) travels as several
#: rows of one identity, which the merge takes as one, as it takes one feature's rows
#: from many batches.
SCRATCH_FEATURE_LINKS_MAX = np.iinfo(np.uint16).max


def links_without_keys(links, features):
    """A part's links (sorted by feature) without their keys, named by its features
    partial (sorted by key) instead.

    Returns ``(features, keyed, loose)``: ``features`` with ``links`` (uint16), how many
    of ``keyed``'s rows (``word``, ``count``; in order) belong to each row, a feature
    of more than :data:`SCRATCH_FEATURE_LINKS_MAX` taking several rows; ``loose`` the
    links (all columns) of keys no features row holds: a link sketch's collapsed rows of
    a feature it sent no row of (``pipelines/count_sketch.py``, ``collapse``),
    which need their keys."""
    key, per_feature = links["feature"], features.get("links")
    features = {name: column for name, column in features.items() if name != "links"}
    loose = None
    if per_feature is None or int(per_feature.sum(dtype=np.int64)) != len(key):
        # (batch_partials's counts hold unless a link was cut into rows since)
        per_feature, loose = links_per_feature(key, features["feature"])
    if len(per_feature) and int(per_feature.max()) > SCRATCH_FEATURE_LINKS_MAX:
        rows, per_feature = cut_into_pieces(per_feature, SCRATCH_FEATURE_LINKS_MAX)
        features = {name: column[rows] for name, column in features.items()}
    features = {**features, "links": per_feature.astype(np.uint16)}
    if loose is None:
        return (features, {"word": links["word"], "count": links["count"]},
                {name: column[:0] for name, column in links.items()})
    keep = ~loose
    return (features, {"word": links["word"][keep], "count": links["count"][keep]},
            {name: column[loose] for name, column in links.items()})


def links_per_feature(key, feature_keys):
    """How many of the links (their features' keys ``key``, sorted) each of
    ``feature_keys`` (sorted) has, matched by the links' runs of one key (a search of
    every link's key cost as much as the rest of a merged bucket's step), and a mask of
    the links of other keys (None if there are none)."""
    if np.any(feature_keys[1:] < feature_keys[:-1]):
        raise ValueError("a features partial is not sorted by key")
    starts = run_starts(key)
    run_keys, runs = key[starts], np.diff(np.r_[starts, len(key)])
    if np.any(run_keys[1:] <= run_keys[:-1]):
        raise ValueError("a links partial is not sorted by feature")
    if np.array_equal(run_keys, feature_keys):  # every link's feature has its row
        return runs, None
    at = np.searchsorted(feature_keys, run_keys)
    found = at < len(feature_keys)
    found[found] = feature_keys[at[found]] == run_keys[found]
    per_feature = np.zeros(len(feature_keys), np.int64)
    per_feature[at[found]] = runs[found]
    return per_feature, None if found.all() else np.repeat(~found, runs)


def links_from_scratch(rows, keyed, loose):
    """A links partial (in the scratch's widths) from :func:`links_without_keys`'s parts,
    each concatenated over the same parts: ``rows`` the features rows' ``feature`` and
    ``links``, ``keyed`` and ``loose``.  The links come in another order than they were
    sent (the keyed, then the loose); the merge sorts them."""
    per_row = rows["links"]
    if int(per_row.sum(dtype=np.int64)) != len(keyed["word"]):
        raise ValueError(f"scratch features name {int(per_row.sum(dtype=np.int64))} links, "
                         f"their links column holds {len(keyed['word'])}")
    feature = np.repeat(rows["feature"], per_row)
    if not len(loose["feature"]):  # as a rule: no copy of the columns
        return {"feature": feature, "word": keyed["word"], "count": keyed["count"]}
    return {"feature": np.concatenate([feature, loose["feature"]]),
            "word": np.concatenate([keyed["word"], loose["word"]]),
            "count": np.concatenate([keyed["count"], loose["count"]])}


def scratch_type_type(num_type_ids):
    """The scratch's dtype of a count's tag-major type ids (``num_type_ids``: tags x feature
    types; None: 32 bits), one for every part, which the merge concatenates."""
    return np.int16 if num_type_ids is not None and num_type_ids <= 1 << 15 else np.int32


def features_to_scratch(partial, vocab_size, num_type_ids=None):
    """A features partial in the scratch's columns, as two groups of columns:
    ``(rows, words)``.  ``rows`` keeps each row's key and type (:func:`scratch_type_type`)
    and gives its number of words (``width``, uint8); ``words`` (``{"word": ...}``) is
    every row's words in row order, without padding: a batch's features have their type's
    words, at most nine, where padded rows would carry the longest type's.
    :func:`features_from_scratch` reads them back."""
    words = partial["words"]
    present = words >= 0
    if present.all():  # one type's features: each row full
        flat, width = words.ravel(), np.full(len(words), words.shape[1], np.uint8)
    else:
        flat, width = words[present], present.sum(axis=1).astype(np.uint8)
    rows = {"feature": partial["feature"],
            "type": partial["type"].astype(scratch_type_type(num_type_ids), copy=False),
            "width": width}
    if "links" in partial:  # links_without_keys's
        rows["links"] = partial["links"]
    return rows, {"word": flat.astype(scratch_word_type(vocab_size), copy=False)}


def features_from_scratch(rows, words):
    """The features partial of :func:`features_to_scratch`'s two groups (each
    concatenated over the same parts, in the same order): each row's key, type and
    ``width`` words, and ``word``, every row's words one after another."""
    width = rows["width"]
    if int(width.sum(dtype=np.int64)) != len(words["word"]):
        raise ValueError(f"scratch features name {int(width.sum(dtype=np.int64))} words, "
                         f"their words column holds {len(words['word'])}")
    return {"feature": rows["feature"], "type": rows["type"], "width": width,
            "word": words["word"]}


def scratch_groups(links, features, vocab_size=None, num_type_ids=None):
    """One part's links and features partials (each sorted by key) as the scratch's
    groups of columns (``vocab_size``, ``num_type_ids`` None: 32-bit word and type ids):
    ``links`` without their keys (:func:`links_without_keys`), ``loose_links``,
    ``features`` (with ``links``) and ``feature_words``."""
    features, keyed, loose = links_without_keys(links_to_scratch(links, vocab_size), features)
    rows, words = features_to_scratch(features, vocab_size, num_type_ids)
    return {"links": keyed, "loose_links": loose, "features": rows, "feature_words": words}


def cut_scratch_groups(links, features, num_buckets, vocab_size, num_type_ids=None):
    """:func:`scratch_groups` cut by bucket: ``{group: (columns, bounds)}`` for
    :meth:`pipelines.shuffle.ArrayShuffle.send_cut` (a bucket's keyed links are those its
    features rows name)."""
    features, keyed, loose = links_without_keys(links_to_scratch(links, vocab_size), features)
    (rows, bounds), words = cut_features(features, num_buckets, vocab_size, num_type_ids)
    link_ends = np.zeros(len(rows["links"]) + 1, np.int64)
    np.cumsum(rows["links"], dtype=np.int64, out=link_ends[1:])
    return {"links": (keyed, link_ends[bounds]), "loose_links": cut_by_bucket(loose, num_buckets),
            "features": (rows, bounds), "feature_words": words}


def merged_links_to_scratch(links, feature_keys, vocab_size):
    """A bucket's merged links (a table sorted by (feature, word)) in the scratch's columns,
    for the step that adds their continuation counts, as two groups of columns:
    ``{"links": {"word", "count"}, "link_runs": {"per_feature"}}``.

    The links do not carry their feature's key: ``per_feature`` (uint32) holds how many
    links each of ``feature_keys`` (the bucket's features file's, sorted; a feature may
    have none) has, and :func:`merged_links_from_scratch` repeats the keys.  Words take
    the scratch's width, counts 32 bits unless one is larger."""
    per_feature, stray = links_per_feature(links["feature"].to_numpy(),
                                           np.asarray(feature_keys, np.uint64))
    if stray is not None:
        raise ValueError("merged links name a feature the features file does not hold")
    count = links["count"].to_numpy()
    narrow = np.uint32 if not len(count) or int(count.max()) <= np.iinfo(np.uint32).max \
        else np.int64
    return {"links": {"word": links["word"].to_numpy().astype(scratch_word_type(vocab_size)),
                      "count": count.astype(narrow)},
            "link_runs": {"per_feature": per_feature.astype(np.uint32)}}


def merged_links_from_scratch(groups, feature_keys):
    """The merged links table (feature, word int32, count int64) of
    :func:`merged_links_to_scratch`'s groups and the same ``feature_keys``."""
    links, per_feature = groups["links"], groups["link_runs"]["per_feature"]
    if len(per_feature) != len(feature_keys) or \
            int(per_feature.sum(dtype=np.int64)) != len(links["word"]):
        raise ValueError(f"scratch links: {len(links['word'])} links, the features file "
                         f"{len(feature_keys)} features, their links "
                         f"{int(per_feature.sum(dtype=np.int64))}")
    return pa.table({"feature": np.repeat(np.asarray(feature_keys, np.uint64), per_feature),
                     "word": links["word"].astype(np.int32),
                     "count": links["count"].astype(np.int64)})


def cut_features(partial, num_buckets, vocab_size, num_type_ids=None):
    """A features partial cut by bucket (:func:`cut_by_bucket`) in the scratch's two
    groups: ``((rows, bounds), (words, word_bounds))``."""
    ordered, bounds = cut_by_bucket(partial, num_buckets)
    rows, words = features_to_scratch(ordered, vocab_size, num_type_ids)
    word_ends = np.zeros(len(rows["width"]) + 1, np.int64)
    np.cumsum(rows["width"], dtype=np.int64, out=word_ends[1:])
    return (rows, bounds), (words, word_ends[bounds])


def scratch_word_type(vocab_size):
    """16-bit word ids for a vocabulary that fits them; None: 32-bit."""
    return np.uint16 if vocab_size is not None and vocab_size <= SCRATCH_WORD_LIMIT \
        else np.int32


def concat_partials(parts):
    """Concatenate partial dicts column by column (None for an empty list; one part
    is returned as a new dict of the same arrays, not copied)."""
    if not parts:
        return None
    if len(parts) == 1:
        return dict(parts[0])
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


_COUNTED_LINKS = pa.schema([("feature", pa.uint64()), ("word", pa.int32()),
                           ("count", pa.int64())])


def partials_from_tables(links, features, extractor, collapsed_word=None):
    """A count bucket's tables as one part, as if counted anew (for adding more data, or
    thresholding again).

    ``collapsed_word``: where a feature's C(f,*) exceeds its links' sum (a count with
    link thresholds), add a row of that word carrying the difference, as the link
    sketch's collapsed rows do (:func:`snm_core.count.thresholds.collapse_links`), so
    that the merge gives the feature its whole C(f,*) again.

    Returns ``{"links": links partial, "features": features partial}``.
    """
    n_types = len(extractor.feature_types)
    type_id = (features["tag"].to_numpy().astype(np.int32) * n_types
               + features["type"].to_numpy().astype(np.int32))
    words, _ = padded_lists(features["words"], extractor.max_words, np.int32)
    link_rows = {"feature": links["feature"].to_numpy(), "word": links["word"].to_numpy(),
                 "count": links["count"].to_numpy()}
    if collapsed_word is not None and links.num_rows:
        diversity = features["diversity"].to_numpy()
        ends = np.cumsum(diversity)
        summed = np.add.reduceat(link_rows["count"], ends - diversity)
        short = np.flatnonzero(features["count"].to_numpy() > summed)
        if len(short):  # each after its feature's last link: (feature, word) order kept
            at, keys = ends[short], features["feature"].to_numpy()[short]
            link_rows = {
                "feature": np.insert(link_rows["feature"], at, keys),
                "word": np.insert(link_rows["word"], at, np.int32(collapsed_word)),
                "count": np.insert(link_rows["count"], at,
                                   features["count"].to_numpy()[short] - summed[short])}
    return {"links": link_rows,
            "features": {"feature": features["feature"].to_numpy(), "type": type_id,
                         "words": words}}


def cut_by_bucket(partial, num_buckets):
    """A partial ordered by key-range bucket, and where each bucket's rows are.

    A partial sorted by feature key (as :func:`batch_partials` makes them) is
    returned as it is, each bucket's first row found by binary search; any
    other is reordered by bucket first (stably).

    Returns
    -------
    ordered : partial (the same dict of arrays, or a reordered copy)
    bounds : ndarray of int64, shape (num_buckets + 1,); bucket ``b``'s rows are
        ``bounds[b]:bounds[b + 1]``
    """
    keys = partial["feature"]
    if np.all(keys[1:] >= keys[:-1]):
        bounds = np.r_[np.searchsorted(keys, key_ranges.bucket_starts(num_buckets)), len(keys)]
        return partial, bounds.astype(np.int64)
    order, bounds = group_rows(key_ranges.bucket_of(keys, num_buckets), num_buckets)
    return {k: v[order] for k, v in partial.items()}, bounds


def merge_bucket(link_parts, feature_parts, num_feature_types):
    """Final tables of one bucket from all its partials: :func:`merge_links` then
    :func:`merge_features`.

    Parameters
    ----------
    link_parts : list of links partials (emptied: the merge copies them)
    feature_parts : list of features partials (emptied likewise)
    num_feature_types : int
        Feature types per tag, to split a type id into (tag, type).

    Returns
    -------
    links : pyarrow.Table, feature, word, count (no continuation yet), sorted by (feature, word)
    features : pyarrow.Table, schema :data:`snm_core.io.tables.FEATURES`, sorted by feature
    collisions : int, keys that two different features share (their counts are merged)
    """
    links = merge_links(link_parts)
    return (links,) + merge_features(feature_parts, links, num_feature_types)


def merge_links(link_parts, work=None):
    """One bucket's links partials, summed: a table sorted by (feature, word).

    ``link_parts`` is a list of links partials, in the merge's columns or the scratch's
    (:func:`links_to_scratch`); it is emptied (the arrays are copied, so the parts can
    go: a bucket's peak memory).  ``work``: a dict that keeps the sort's buffer between
    calls (:func:`merge_bucket_chunks`).

    One sort in C (``link_sums.c``) of records that carry the word and count with
    the key, then one pass that sums equal (feature, word): an argsort would need a
    gather of each column at random afterwards, which cost more than the sort.
    """
    if not link_parts:
        return _COUNTED_LINKS.empty_table()
    parts = concat_partials(link_parts)
    link_parts.clear()
    if parts["count"].dtype.itemsize > 4 and len(parts["count"]) and \
            int(parts["count"].max()) > MERGE_COUNT_MAX:
        parts = split_counts(parts, MERGE_COUNT_MAX)  # larger counts as several rows
    feature = np.ascontiguousarray(parts.pop("feature"), np.uint64)
    word = narrow_or_int32(parts.pop("word"))
    count = parts.pop("count")
    if count.dtype not in (np.int32, np.int64):  # the scratch's uint16, or merged sums
        count = count.astype(np.int32 if count.dtype.itemsize < 4 else np.int64)
    count = np.ascontiguousarray(count)
    n = len(feature)
    out_feature, out_word = np.empty(n, np.uint64), np.empty(n, np.int32)
    out_count, records = np.empty(n, np.int64), sort_records(n, work)
    rows = _sum_links(native.address(feature), native.address(word), word.itemsize,
                      native.address(count), count.itemsize, n, native.address(records),
                      native.address(out_feature), native.address(out_word),
                      native.address(out_count))
    if rows < 0:
        raise ValueError("a partial link's count is out of the merge's range")
    return pa.table({"feature": out_feature[:rows], "word": out_word[:rows],
                     "count": out_count[:rows]})


def narrow_or_int32(word):
    """Word ids as ``link_sums.c`` reads them: uint16 as they are, others as int32."""
    return np.ascontiguousarray(word, np.uint16 if word.dtype == np.uint16 else np.int32)


def sort_records(n, work=None):
    """Work space of ``link_sums.c``'s sort: two buffers of ``n`` 16-byte records, kept in
    ``work`` (a dict, or None) for the next call: a buffer this large is mapped afresh at
    each allocation, and the kernel then zeroes it a page at a time."""
    work = {} if work is None else work
    if "records" not in work or len(work["records"]) < 2 * n:
        work["records"] = np.empty((2 * n, 2), np.uint64)
    return work["records"][:2 * n]


def merge_bucket_chunks(rows, read, num_feature_types, max_rows, collapsed_word=None,
                        work=None):
    """:func:`merge_bucket` of a bucket whose partials are read a chunk at a time.

    A bucket holding a frequent feature (a context like "the" or ``<s>``, followed by
    thousands of words) gets that feature's partial links of every batch, so its share
    of the corpus grows with the corpus, not with the buckets.  Read in chunks, each
    summed with the sums so far, its merge sums at most ``max_rows`` rows at once (the
    sums so far and a chunk's; a part larger than what is left is read alone),
    whatever the corpus.  With one chunk this is :func:`merge_bucket`.

    Parameters
    ----------
    rows : list of int, the partial links of each part, in order
    read : ``read(start, stop, group)`` -> the ``"links"`` or ``"features"`` partial of
        parts ``start:stop``, concatenated
    num_feature_types : int
    max_rows : int
    collapsed_word : the word of a link sketch's collapsed rows
        (:func:`snm_core.count.thresholds.collapse_links`), or None.  Those of a feature
        no batch sent a row of (every link of it collapsed everywhere: a feature the
        thresholds leave out) are dropped here.
    work : a dict that keeps the merge's sort buffer between chunks and calls, or None

    Returns ``(links, features, collisions, orphaned)``: ``orphaned`` the occurrences
    those dropped rows counted.
    """
    links = features = None
    collisions = start = 0
    while start < len(rows):
        held = links.num_rows if links is not None else 0
        stop, reading = start + 1, rows[start]
        while stop < len(rows) and held + reading + rows[stop] <= max_rows:
            reading += rows[stop]
            stop += 1
        parts = [read(start, stop, "links")]
        if links is not None:  # the sums so far: first, as their parts came first
            parts.insert(0, {name: links[name].to_numpy() for name in links.column_names})
        links = merge_links(parts, work)
        parts = [read(start, stop, "features")]
        if features is not None:
            parts.insert(0, features)
        features, found = distinct_features(parts, work)
        collisions += found
        start = stop
    if links is None:
        return merge_bucket([], [], num_feature_types) + (0,)
    orphaned = 0
    if collapsed_word is not None:
        links, orphaned = _without_orphans(links, features["feature"], collapsed_word)
    return links, feature_table(features, links, num_feature_types), collisions, orphaned


def _without_orphans(links, feature_keys, collapsed_word):
    """``links`` (a table sorted by feature) without the rows of features not in the
    sorted ``feature_keys`` (which must all be collapsed rows), and their counts' sum."""
    keys = links["feature"].to_numpy()
    at = np.minimum(np.searchsorted(feature_keys, keys), max(len(feature_keys) - 1, 0))
    known = feature_keys[at] == keys if len(feature_keys) else np.zeros(len(keys), bool)
    if known.all():
        return links, 0
    if np.any(links["word"].to_numpy()[~known] != collapsed_word):
        raise ValueError("links of a feature no batch sent: only collapsed rows may be")
    return links.filter(pa.array(known)), int(links["count"].to_numpy()[~known].sum())


def merge_features(feature_parts, links, num_feature_types):
    """One bucket's feature table from its features partials and its merged links.

    Returns ``(features, collisions)``: the table (schema
    :data:`snm_core.io.tables.FEATURES`, one row per feature of ``links``, with
    C(f,*) and the diversity from the links) and the number of keys that two
    different features share.  ``feature_parts`` is emptied.
    """
    if not feature_parts:
        return tables.FEATURES.empty_table(), 0
    features, collisions = distinct_features(feature_parts)
    return feature_table(features, links, num_feature_types), collisions


def distinct_features(feature_parts, work=None):
    """Features partials -> one row per key (its first occurrence), sorted by key.

    A part's words may be padded rows (``words``, as :func:`batch_partials` makes them)
    or each row's words one after another (``width`` and ``word``, as the scratch keeps
    them: :func:`features_from_scratch`).  Returns ``(features, collisions)``: the
    distinct features in the second form, and the number of rows that share a key with
    the row before them but name another feature (a 64-bit collision: about
    n**2 / 2**65 pairs expected among n features).  ``feature_parts`` is emptied.
    One sort in C of (key, row) records, then one pass (``link_sums.c``).
    """
    feats = concat_partials([_flat_words(p) for p in feature_parts])
    feature_parts.clear()
    key = np.ascontiguousarray(feats["feature"], np.uint64)
    kind = np.ascontiguousarray(feats["type"], np.int32)
    width = np.ascontiguousarray(feats["width"], np.uint8)
    words = narrow_or_int32(feats["word"])
    del feats
    m = len(key)
    out_key, out_type = np.empty(m, np.uint64), np.empty(m, np.int32)
    out_width, out_words = np.empty(m, np.uint8), np.empty(len(words), np.int32)
    collisions, offsets = np.zeros(1, np.int64), np.empty(m + 1, np.int64)
    records = sort_records(m, work)
    rows = _distinct_feature_rows(
        native.address(key), native.address(kind), native.address(width),
        native.address(words), words.itemsize, m, native.address(offsets),
        native.address(records), native.address(out_key), native.address(out_type),
        native.address(out_width), native.address(out_words), native.address(collisions))
    if rows < 0:
        raise ValueError(f"{m:,} feature rows: a merge takes fewer than 2^32")
    kept_width = out_width[:rows]
    return {"feature": out_key[:rows], "type": out_type[:rows], "width": kept_width,
            "word": out_words[:int(kept_width.sum(dtype=np.int64))]}, int(collisions[0])


def _flat_words(features):
    """A features partial with its words one row after another (``width``, ``word``)."""
    if "words" not in features:
        return features
    rows, words = features_to_scratch(features, None)
    return {**rows, **words}


def feature_table(features, links, num_feature_types):
    """The feature table of a bucket's distinct features (:func:`distinct_features`) and
    its merged links: C(f,*) and the diversity of each feature from the links."""
    feature = links["feature"].to_numpy()
    count = links["count"].to_numpy()
    row_starts = run_starts(feature)
    row_keys = feature[row_starts]
    row_count = np.add.reduceat(count, row_starts)
    diversity = np.diff(np.r_[row_starts, len(feature)])
    if not np.array_equal(features["feature"], row_keys):
        raise ValueError("feature rows and link rows disagree: every feature must have links")
    type_id = features["type"].astype(np.int64)
    offsets = np.zeros(len(row_keys) + 1, dtype=np.int32)
    np.cumsum(features["width"], out=offsets[1:])
    words_list = pa.ListArray.from_arrays(pa.array(offsets),
                                          pa.array(features["word"].astype(np.int32,
                                                                           copy=False)))
    return pa.table({
        "feature": row_keys,
        "tag": (type_id // num_feature_types).astype(np.int16),
        "type": (type_id % num_feature_types).astype(np.int16),
        "count": row_count.astype(np.int64),
        "diversity": diversity.astype(np.int64),
        "words": words_list,
    }, schema=tables.FEATURES)


def chunk_bounds(rows, max_rows):
    """Consecutive parts of ``rows`` rows each in runs of at most ``max_rows`` (a part
    larger than that is a run alone).

    Returns the runs' bounds: run ``i`` is parts ``bounds[i]:bounds[i + 1]``.
    """
    bounds, held = [0], 0
    for i, n in enumerate(rows):
        if held and held + n > max_rows:
            bounds.append(i)
            held = 0
        held += n
    if len(rows):
        bounds.append(len(rows))
    return bounds
