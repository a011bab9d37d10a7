"""Continuation counts (Kneser-Ney's N1+(. f w)), the count's fourth step
(:mod:`snm_core.count.counting`): every link of a type that extends a shorter one (an
n-gram of the (n-1)-gram) names the link it extends; the names are shuffled to that
link's bucket and counted there.
"""

import numpy as np
import pyarrow as pa

from snm_core.count import counting
from snm_core.io import native
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


def extension_names(features, links, extractor, parents):
    """Where each link (f', w) of a type that extends another sends its continuation.

    The link extends (f, w), f being f' without its oldest word (same tag);
    every distinct f' of a (f, w) adds one to the continuation count of (f, w),
    the number of distinct words seen right before f followed by w (Kneser-Ney's
    N1+(. f w)).  In C (``link_sums.c``), one pass over the features and their links.

    Parameters
    ----------
    features, links : a bucket's tables (:func:`snm_core.count.counting.merge_bucket`):
        each feature's ``diversity`` links, in feature order

    Returns
    -------
    parent_feature : uint64 (k,), key of f for the k links that extend one
    word : int32 (k,), their words: the name is the link (f, w)
    """
    lists = features["words"].combine_chunks() if isinstance(
        features["words"], pa.ChunkedArray) else features["words"]
    # (offsets into all of ``values``, a slice's too)
    offsets = np.ascontiguousarray(lists.offsets.to_numpy(), np.int32)
    words = np.ascontiguousarray(lists.values.to_numpy(), np.int32)
    tag, kind, diversity = (np.ascontiguousarray(features[name].to_numpy(), dtype)
                            for name, dtype in (("tag", np.int16), ("type", np.int16),
                                                ("diversity", np.int64)))
    link_word = np.ascontiguousarray(links["word"].to_numpy(), np.int32)
    types = extractor.feature_types
    num_words = np.array([t.num_words for t in types], np.int32)
    remote = np.array([t.remote for t in types], np.int32)
    salts = np.ascontiguousarray(extractor.type_salts, np.uint64)
    parents = np.ascontiguousarray(parents, np.int64)
    n = len(link_word)
    parent_feature, word = np.empty(n, np.uint64), np.empty(n, np.int32)
    names = _extension_names(
        native.address(parents), native.address(num_words), native.address(remote),
        native.address(salts), len(types), int(hashing.SEQUENCE_SEED), native.address(tag),
        native.address(kind), native.address(offsets), native.address(words),
        native.address(diversity), features.num_rows, native.address(link_word), n,
        native.address(parent_feature), native.address(word))
    if names < 0:
        raise ValueError("a feature's words or links do not match its type's")
    return parent_feature[:names], word[:names]


def names_by_bucket(parent_feature, word, num_buckets, word_type):
    """Names (:func:`extension_names`) grouped by their feature's key-range bucket, as
    :func:`snm_core.count.counting.cut_by_bucket` cuts a partial: ``({"feature", "word"},
    bounds)``, bucket ``b``'s names at ``bounds[b]:bounds[b + 1]`` in their order, the words
    as ``word_type`` (uint16 or int32: the scratch's width).  In C, one pass to count the
    buckets and one to place the names."""
    feature = np.ascontiguousarray(parent_feature, np.uint64)
    word = np.ascontiguousarray(word, np.int32)
    word_type = np.dtype(word_type)
    out_feature, out_word = np.empty(len(feature), np.uint64), np.empty(len(feature), word_type)
    bounds = np.empty(num_buckets + 1, np.int64)
    if _names_by_bucket(native.address(feature), native.address(word), len(feature),
                        num_buckets, word_type.itemsize, native.address(out_feature),
                        native.address(out_word), native.address(bounds)) < 0:
        raise ValueError(f"continuation names: {num_buckets} buckets, or a word wider than "
                         f"{word_type}")
    return {"feature": out_feature, "word": out_word}, bounds


def add_continuation(links, names):
    """``links`` (sorted by (feature, word)) with a ``continuation`` column: how many
    names each link has.

    ``names``: a ``(feature, word)`` pair of arrays (:func:`extension_names`), or an
    iterable of such pairs (chunks of one bucket's names, counted one at a time: a
    bucket holding the empty context is named by every link of the 1-word contexts, more
    as the corpus grows).  Names of no link are not counted.  Each chunk is sorted in C
    (``link_sums.c``) and met with the links in one pass.
    """
    if isinstance(names, tuple):
        names = [names]
    feature = np.ascontiguousarray(links["feature"].to_numpy(), np.uint64)
    word = np.ascontiguousarray(links["word"].to_numpy(), np.int32)
    counts = np.zeros(len(feature), np.int64)
    work = {}  # the sort's buffer, kept from chunk to chunk
    for name_feature, name_word in names:
        name_feature = np.ascontiguousarray(name_feature, np.uint64)
        name_word = counting.narrow_or_int32(name_word)
        m = len(name_feature)
        if not m:
            continue
        records = counting.sort_records(m, work)
        if _count_names(native.address(feature), native.address(word), len(feature),
                        native.address(name_feature), native.address(name_word),
                        name_word.itemsize, m, native.address(records),
                        native.address(counts)) < 0:
            raise ValueError("continuation names: the links are not sorted by (feature, "
                             "word), or a chunk holds 2^32 names or more")
    return links.append_column("continuation", pa.array(counts))


_extension_names = native.function(
    "extension_names", [native.ptr] * 4 + [native.i64, native.u64] + [native.ptr] * 5
    + [native.i64, native.ptr, native.i64, native.ptr, native.ptr], native.i64)
_count_names = native.function(
    "count_names", [native.ptr, native.ptr, native.i64, native.ptr, native.ptr, native.i64,
                    native.i64, native.ptr, native.ptr], native.i64)
_names_by_bucket = native.function(
    "names_by_bucket", [native.ptr, native.ptr, native.i64, native.i64, native.i64,
                        native.ptr, native.ptr, native.ptr], native.i64)
