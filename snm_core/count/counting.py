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
4. :func:`snm_core.count.continuation.extension_keys` then
   :func:`~snm_core.count.continuation.add_continuation`: every link of a type
   that extends a shorter one (an n-gram of the (n-1)-gram) names the link it
   extends; the names are shuffled to that link's bucket and counted there
   (Kneser-Ney's continuation count N1+(. f w)).

Partials are dicts of numpy arrays (they pickle cheaply):

* links: ``feature`` uint64, ``word`` int32, ``count`` int64
* features: ``feature`` uint64, ``type`` int32 (type id: tag-major), ``words``
  int32 (n, w), identity words oldest first, padded with -1; w at most the
  extractor's ``max_words`` (a batch's partial has its type's number of words, the
  merge pads them all to ``max_words``)
"""

import numpy as np
import pyarrow as pa

from snm_core.io import key_ranges, tables
from snm_core.io.arrays import (group_rows, padded_lists, padded_rows, run_starts,
                                 stable_argsort, take_rows)
from snm_core.io.radix import argsort_runs, sort_runs

#: Bits of a packed (feature index, word) pair given to the word id.
_WORD_BITS = 32


def batch_partials(events):
    """Summed links and distinct features of one batch, both sorted by feature key.

    The occurrences are sorted by feature key (:func:`snm_core.io.arrays.stable_argsort`),
    numbered by run of equal keys, and each packed into one uint64 (run
    number, word) that a second sort orders: runs of equal values are the
    links, their lengths the counts.  Faster than numbering the keys with a
    hash table (pyarrow's dictionary encoding), and the key order lets
    :func:`cut_by_bucket` find its key ranges without copying.

    Parameters
    ----------
    events : snm_core.text.features.EventFeatures

    Returns
    -------
    links : links partial, sorted by (feature, word)
    features : features partial, one row per distinct key (type and words of
        its first occurrence), sorted by feature
    """
    order, keys = stable_argsort(events.key, return_sorted=True)
    new_key = np.ones(len(keys), dtype=bool)
    np.not_equal(keys[1:], keys[:-1], out=new_key[1:])
    run = np.cumsum(new_key) - 1
    packed = (run.astype(np.uint64) << np.uint64(_WORD_BITS)) | \
        events.target[events.event][order].astype(np.uint64)
    sort_runs(packed, _WORD_BITS)  # in order by run already: each run's words sorted
    starts = run_starts(packed)
    unique = packed[starts]
    key_starts = np.flatnonzero(new_key)
    distinct = keys[key_starts]
    links = {"feature": distinct[(unique >> np.uint64(_WORD_BITS)).astype(np.int64)],
             "word": (unique & np.uint64((1 << _WORD_BITS) - 1)).astype(np.int32),
             "count": np.diff(np.r_[starts, len(packed)]).astype(np.int64)}
    # The first occurrence of each key (the sort is stable): the choice matters
    # only for colliding keys, but stays fixed.
    first = order[key_starts]
    features = {"feature": distinct, "type": events.type[first],
                "words": events.context_words(first, narrow=True)}
    return links, features


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
            features.append(feature_row)
        self.sums = {}
        return links, features


#: The scratch keeps word ids in 16 bits when every id of the vocabulary (and the link
#: sketch's collapsed word, the vocabulary's size) is at most this: partials are written
#: to scratch as they are sent and read back once.
SCRATCH_WORD_LIMIT = 0xFFFF
#: The scratch keeps counts in 32 bits; a larger count travels as several rows of one
#: link, which the merge sums (a batch's counts never come near it).
SCRATCH_COUNT_MAX = np.iinfo(np.int32).max


def links_to_scratch(partial, vocab_size):
    """A links partial in the narrow columns of the scratch (:func:`links_from_scratch`
    reads it back).  Rows keep their order."""
    feature, word, count = partial["feature"], partial["word"], partial["count"]
    large = count > SCRATCH_COUNT_MAX
    if large.any():
        pieces = np.where(large, -(-count // SCRATCH_COUNT_MAX), 1)
        rows = np.repeat(np.arange(len(count)), pieces)
        first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
        last = np.arange(len(rows)) - first_piece == pieces[rows] - 1
        count = np.where(last, count[rows] - (pieces[rows] - 1) * SCRATCH_COUNT_MAX,
                         SCRATCH_COUNT_MAX)
        feature, word = feature[rows], word[rows]
    return {"feature": feature,
            "word": word.astype(_scratch_word_type(vocab_size), copy=False),
            "count": count.astype(np.int32)}


def links_from_scratch(partial):
    """A links partial of :func:`links_to_scratch` in the merge's columns: word ids
    int32, counts int64."""
    return {**partial, "word": partial["word"].astype(np.int32, copy=False),
            "count": partial["count"].astype(np.int64, copy=False)}


def features_to_scratch(partial, vocab_size):
    """A features partial in the scratch's columns, as two groups of columns:
    ``(rows, words)``.  ``rows`` keeps each row's key and type and gives its number of
    words (``width``, uint8); ``words`` (``{"word": ...}``) is every row's words in row
    order, without padding: a batch's features have their type's words, at most nine,
    where padded rows would carry the longest type's.  :func:`features_from_scratch`
    reads them back."""
    words = partial["words"]
    present = words >= 0
    if present.all():  # one type's features: each row full
        flat, width = words.ravel(), np.full(len(words), words.shape[1], np.uint8)
    else:
        flat, width = words[present], present.sum(axis=1).astype(np.uint8)
    return ({"feature": partial["feature"], "type": partial["type"], "width": width},
            {"word": flat.astype(_scratch_word_type(vocab_size), copy=False)})


def features_from_scratch(rows, words, max_words):
    """The features partial of :func:`features_to_scratch`'s two groups (each
    concatenated over the same parts, in the same order), its words padded to
    ``max_words`` columns with -1."""
    width = rows["width"]
    if int(width.sum(dtype=np.int64)) != len(words["word"]):
        raise ValueError(f"scratch features name {int(width.sum(dtype=np.int64))} words, "
                         f"their words column holds {len(words['word'])}")
    return {"feature": rows["feature"], "type": rows["type"],
            "words": padded_rows(words["word"], width, max_words, np.int32)}


def scratch_groups(links, features, vocab_size=None):
    """One part's links and features partials as the scratch's groups of columns
    (``vocab_size`` None: 32-bit word ids)."""
    rows, words = features_to_scratch(features, vocab_size)
    return {"links": links_to_scratch(links, vocab_size), "features": rows,
            "feature_words": words}


def cut_features(partial, num_buckets, vocab_size):
    """A features partial cut by bucket (:func:`cut_by_bucket`) in the scratch's two
    groups: ``((rows, bounds), (words, word_bounds))``."""
    ordered, bounds = cut_by_bucket(partial, num_buckets)
    rows, words = features_to_scratch(ordered, vocab_size)
    word_ends = np.zeros(len(rows["width"]) + 1, np.int64)
    np.cumsum(rows["width"], dtype=np.int64, out=word_ends[1:])
    return (rows, bounds), (words, word_ends[bounds])


def _scratch_word_type(vocab_size):
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


def merge_links(link_parts):
    """One bucket's links partials, summed: a table sorted by (feature, word).

    ``link_parts`` is a list of links partials; it is emptied (the arrays are
    copied, so the parts can go: a bucket's peak memory).

    Two stable sorts instead of the much slower ``np.lexsort``: by feature
    (:func:`snm_core.io.arrays.stable_argsort`), then each feature's run by word
    (:func:`snm_core.io.radix.argsort_runs` of (run number, word) packed into one
    int64).  Rows are gathered at random only once, by the first sort: the second
    moves them only within a feature's run, and its sorted values are the (run, word)
    pairs themselves.
    """
    if not link_parts:
        return _COUNTED_LINKS.empty_table()
    parts = concat_partials(link_parts)
    link_parts.clear()
    by_feature, feature = stable_argsort(parts.pop("feature"), return_sorted=True)
    word = parts.pop("word")[by_feature].astype(np.int64)
    count = parts.pop("count")[by_feature]
    del by_feature
    new_feature = np.empty(len(feature), dtype=bool)
    new_feature[:1] = True
    np.not_equal(feature[1:], feature[:-1], out=new_feature[1:])
    run = np.cumsum(new_feature) - 1
    distinct = feature[new_feature]
    del feature, new_feature
    word_bits = int(word.max()).bit_length() if len(word) else 0
    run <<= np.int64(word_bits)
    run |= word
    del word
    by_word, packed = argsort_runs(run.view(np.uint64), word_bits)  # runs in order already
    packed = packed.view(np.int64)
    del run
    count = count[by_word]  # within runs: nearly in place
    del by_word
    starts = run_starts(packed)
    packed = packed[starts]
    return pa.table({"feature": distinct[packed >> np.int64(word_bits)],
                     "word": (packed & np.int64((1 << word_bits) - 1)).astype(np.int32),
                     "count": np.add.reduceat(count, starts).astype(np.int64)
                     if len(count) else count.astype(np.int64)})


def merge_bucket_chunks(rows, read, num_feature_types, max_rows, collapsed_word=None):
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
        links = merge_links(parts)
        parts = [read(start, stop, "features")]
        if features is not None:
            parts.insert(0, features)
        features, found = distinct_features(parts)
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


def distinct_features(feature_parts):
    """Features partials -> one row per key (its first occurrence), sorted by key.

    Returns ``(features partial, collisions)``: the number of rows that share a key
    with the row before them but name another feature.  ``feature_parts`` (of any
    widths of words: padded to the widest) is emptied.
    """
    width = max(p["words"].shape[1] for p in feature_parts)
    feats = concat_partials([_words_padded(p, width) for p in feature_parts])
    feature_parts.clear()
    by_key, keys = stable_argsort(feats["feature"], return_sorted=True)
    new_key = np.r_[True, keys[1:] != keys[:-1]]
    types, words = feats["type"][by_key], take_rows(feats["words"], by_key)
    del feats
    # Rows with one key must name one feature; two identities on one key is a
    # 64-bit collision (about n**2 / 2**65 pairs expected among n features).
    # Compared column by column: faster than np.any(axis=1) over the rows.
    differs = types[1:] != types[:-1]
    for col in range(words.shape[1]):
        differs |= words[1:, col] != words[:-1, col]
    collisions = int(np.count_nonzero(differs & ~new_key[1:]))
    first = np.flatnonzero(new_key)
    return {"feature": keys[first], "type": types[first],
            "words": take_rows(words, first)}, collisions


def _words_padded(features, width):
    """A features partial with its words padded with -1 to ``width`` columns."""
    missing = width - features["words"].shape[1]
    if not missing:
        return features
    return {**features, "words": np.pad(features["words"], ((0, 0), (0, missing)),
                                        constant_values=-1)}


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
    words = features["words"]
    # Padding (-1) is at the end of each row, so the non-negative values in
    # row order are each row's words, oldest first.
    lengths = np.zeros(len(words), dtype=np.int32)
    for col in range(words.shape[1]):
        lengths += words[:, col] >= 0
    offsets = np.zeros(len(words) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = words.ravel()
    words_list = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat[flat >= 0]))
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
