"""The count's partials in the scratch's narrow columns (16-bit word ids, 32-bit counts)
and back: the merge must see what was sent, whatever the vocabulary and counts.

Oracle: sums of (feature, word) -> count and the feature rows, by Python dictionaries.
"""

import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from snm_core.count import counting

BIG = counting.SCRATCH_COUNT_MAX


def link_sums(partial):
    sums = collections.Counter()
    for f, w, c in zip(partial["feature"].tolist(), partial["word"].tolist(),
                       partial["count"].tolist()):
        sums[f, w] += c
    return sums


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 70_000),
                               st.sampled_from([1, 2, 7, BIG - 1, BIG, BIG + 1, 3 * BIG + 5,
                                                2**40])), max_size=30),
       vocab_size=st.sampled_from([10, 0xFFFF, 0x10000, 200_000]))
def test_links_come_back_with_their_sums_and_order(rows, vocab_size):
    rows = sorted((f, w % vocab_size, c) for f, w, c in rows)
    partial = {"feature": np.array([r[0] for r in rows], np.uint64),
               "word": np.array([r[1] for r in rows], np.int32),
               "count": np.array([r[2] for r in rows], np.int64)}
    sent = counting.to_scratch(partial, "links", vocab_size)
    assert sent["count"].dtype == np.int32 and sent["count"].min(initial=1) > 0
    assert sent["word"].dtype == (np.uint16 if vocab_size <= 0xFFFF else np.int32)
    assert np.all(sent["feature"][1:] >= sent["feature"][:-1])  # still sorted by key
    back = counting.from_scratch(sent, "links")
    assert back["word"].dtype == np.int32 and back["count"].dtype == np.int64
    assert link_sums(back) == link_sums(partial)
    # The merge sums the pieces of a large count back into one link.
    merged = counting.merge_links([back])
    assert dict(zip(zip(merged["feature"].to_pylist(), merged["word"].to_pylist()),
                    merged["count"].to_pylist())) == dict(link_sums(partial))


def test_feature_words_keep_their_padding():
    words = np.array([[3, 0xFFFE, -1], [-1, -1, -1], [7, 8, 9]], np.int32)
    partial = {"feature": np.array([1, 2, 3], np.uint64), "type": np.array([0, 1, 2]),
               "words": words}
    narrow = counting.to_scratch(partial, "features", 0xFFFF)
    assert narrow["words"].dtype == np.uint16 and narrow["words"].nbytes == words.nbytes // 2
    back = counting.from_scratch(narrow, "features")
    np.testing.assert_array_equal(back["words"], words)
    assert back["words"].dtype == np.int32
    wide = counting.to_scratch(partial, "features", 0x10000)  # ids up to 0xFFFF: no room
    assert wide["words"].dtype == np.int32
    np.testing.assert_array_equal(counting.from_scratch(wide, "features")["words"], words)
