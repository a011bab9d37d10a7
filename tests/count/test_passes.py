"""How many passes a count makes over its text: as many as its scratch needs to fit the
disk (pipelines/count.py runs them; tests/count/test_sketch.py checks that they give the
files of one pass)."""

from pipelines.count import bucket_passes
from snm_core.count.budget import (
    COMPRESSED_SCRATCH_SHARE,
    SCRATCH_BYTES_PER_OCCURRENCE,
    THRESHOLDED_SCRATCH_BYTES_PER_OCCURRENCE,
    SCRATCH_SHARE_OF_FREE_DISK,
    passes_for_disk,
    passes_for_rest,
)


def test_one_pass_while_the_scratch_fits_half_the_free_disk():
    occurrences = 1_000_000
    scratch = occurrences * SCRATCH_BYTES_PER_OCCURRENCE
    assert passes_for_disk(occurrences, False, 2 * scratch) == (1, False)
    # beyond one pass, compressed files: fewer passes than raw ones would need
    compressed = int(scratch * COMPRESSED_SCRATCH_SHARE)
    assert passes_for_disk(occurrences, False, 2 * scratch - 1) == (1, True)
    assert passes_for_disk(occurrences, False, 2 * compressed - 2) == (2, True)
    assert passes_for_disk(occurrences, False, compressed // 2) == (4, True)
    # thresholds leave out before the scratch: fewer bytes an occurrence
    assert passes_for_disk(occurrences, True, 2 * scratch - 1) == (1, False)
    assert THRESHOLDED_SCRATCH_BYTES_PER_OCCURRENCE < SCRATCH_BYTES_PER_OCCURRENCE
    assert passes_for_disk(10 ** 12, False, None) == (1, False)  # object storage: unknown
    # --compress_scratch always or never: the passes of those files
    assert passes_for_disk(occurrences, False, 2 * scratch - 1, False) == (2, False)
    assert passes_for_disk(occurrences, False, scratch // 2, False) == (4, False)
    assert passes_for_disk(occurrences, False, 2 * scratch, True) == (1, True)
    assert passes_for_disk(occurrences, False, compressed // 2, True) == (4, True)


def test_passes_share_the_buckets_once_each():
    for buckets in (1, 7, 64, 587):
        for passes in (1, 2, 3, 4, 10, 1000):
            ranges = bucket_passes(buckets, passes)
            assert len(ranges) == min(passes, buckets)
            assert [lo for lo, _ in ranges][0] == 0 and ranges[-1][1] == buckets
            assert all(hi == next_lo for (_, hi), (next_lo, _) in zip(ranges, ranges[1:]))
            sizes = [hi - lo for lo, hi in ranges]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


def test_the_passes_left_are_planned_from_the_scratch_measured():
    room = 1000  # the bytes one pass may write
    free = int(room / SCRATCH_SHARE_OF_FREE_DISK)
    # 4 buckets took 800 bytes: the other 12 need 2,400, three rooms
    assert passes_for_rest(800, 4, 12, free) == 3
    assert passes_for_rest(800, 4, 12, 10 * free) == 1
    # more than the plan thought: more passes, never more than a bucket each
    assert passes_for_rest(4000, 4, 12, free) == 12
    assert passes_for_rest(10 ** 9, 4, 12, free) == 12
    assert passes_for_rest(0, 4, 12, free) == 1
    # nothing measured, nothing left, or the free disk unknown: no new plan
    assert passes_for_rest(None, 4, 12, free) is None
    assert passes_for_rest(800, 4, 0, free) is None
    assert passes_for_rest(800, 4, 12, None) is None
