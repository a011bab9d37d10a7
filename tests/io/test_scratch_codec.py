"""The count's compressed scratch columns (snm_core/io/scratch_codec.py): every array
comes back bit for bit, and sorted keys take fewer bytes than they hold."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from snm_core.io import scratch_codec

DTYPES = [np.uint64, np.int64, np.int32, np.uint16, np.uint8, np.int16, np.float32]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(DTYPES).flatmap(lambda dtype: hnp.arrays(
    dtype, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=40))))
def test_a_column_decodes_to_the_same_bits(array):
    target = np.empty_like(array)
    scratch_codec.decode_into(scratch_codec.encode(array), target)
    assert target.tobytes() == array.tobytes()


def test_sorted_keys_and_small_counts_compress():
    """A scratch part's key column is runs sorted by key (its high bytes change slowly) and
    its counts are mostly 1: both well under their raw bytes."""
    rng = np.random.default_rng(5)
    keys = np.concatenate([np.sort(rng.integers(0, 2**60, 50_000, dtype=np.uint64))
                           for _ in range(4)])
    counts = np.minimum(rng.geometric(0.8, len(keys)), 1000).astype(np.int32)
    assert len(scratch_codec.encode(keys)) < 0.8 * keys.nbytes
    assert len(scratch_codec.encode(counts)) < 0.2 * counts.nbytes


def test_a_cut_or_misplaced_block_is_an_error():
    """A block cut short, or read as fewer rows than it holds, fails rather than giving
    other numbers."""
    block = scratch_codec.encode(np.arange(1000, dtype=np.uint64) * 7919)
    for cut in (block[:len(block) // 2], block[:-1]):
        with pytest.raises(OSError):
            scratch_codec.decode_into(cut, np.empty(1000, np.uint64))
    with pytest.raises(OSError):
        scratch_codec.decode_into(block, np.empty(999, np.uint64))
