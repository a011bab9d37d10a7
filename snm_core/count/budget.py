"""The count's memory within the budget: what a worker holds, and the buckets that fit.

A count worker holds, at once: a chunk of feature occurrences being extracted
(:data:`MAX_OCCURRENCES_PER_CHUNK` at most, or the corpus's, each with its keys, the
sort's records and partial arrays), its flush buffer (``--flush_links`` pending links)
and the bucket it merges (its partial links, at most the corpus's feature occurrences
over the buckets).  The first two are fixed; :func:`plan_memory` checks them against the
budget and sizes the buckets from the rest.
"""

import dataclasses

from snm_core.io.errors import SnmInputError
from snm_core.io.memory import PROCESS_BYTES, format_bytes, round_up

#: Key ranges: a bucket's merge holds ~100 bytes per partial link it sums, so
#: more buckets mean less memory a worker, for a little more time (one shuffle
#: element per bucket pair for the continuation counts).  The corpus and the
#: memory budget raise it (:func:`plan_memory`); never fewer than this.
DEFAULT_NUM_BUCKETS = 64
#: Feature occurrences of the corpus a bucket gets at most: its merge then holds about
#: the same whatever the corpus (~800 MB a worker) and its sorts stay small (a sort's
#: cost per row grows with the rows: cache and TLB misses).  64 buckets up to ~100M
#: words of 5-gram text.
BUCKET_OCCURRENCES = 8_000_000
#: Partial links a merge reads at once (:func:`snm_core.count.counting.merge_bucket_chunks`):
#: a bucket holding a frequent feature's partials of every batch gets more than its
#: share of the corpus, and more as the corpus grows.
MERGE_CHUNK_ROWS = 6_000_000
#: Feature occurrences of one type extracted at once (an upper bound: events x windows).
MAX_OCCURRENCES_PER_CHUNK = 2_000_000
#: Text a count worker reads at once (``--batch_bytes``): each batch's links are summed
#: before they are sent, and a larger batch sums more (on 5-gram text, 0.64 partial
#: links an occurrence at 512 KiB, 0.54 at 4 MiB), so the scratch and the merges get
#: fewer rows; a batch's chunks stay within MAX_OCCURRENCES_PER_CHUNK.
COUNT_BATCH_BYTES = 4 << 20
#: The default ``--flush_links``: the links of about 512 KiB of 5-gram text (a 4 MiB
#: batch is sent in several flushes, each after a feature type), and more with more
#: buckets, so that a flush's part for one bucket stays a few thousand rows (every part
#: is a write and a shuffle element); capped to bound the buffer.
MIN_FLUSH_LINKS = 250_000
FLUSH_LINKS_PER_BUCKET = 4096
MAX_FLUSH_LINKS = 4_000_000
#: What a worker holds, in bytes: a pending link of its flush buffer, a feature
#: occurrence of the chunk it extracts (its keys, the sort's records, the partial arrays
#: and the first occurrences' words, at the peak of ``counting.batch_partials``), a
#: partial link of the bucket it merges.
PENDING_LINK_BYTES = 45
OCCURRENCE_BYTES = 180
MERGE_PARTIAL_BYTES = 100


#: Scratch bytes a feature occurrence of the text makes (its partial rows, narrow and
#: summed per batch), without and with thresholds (whose sketch leaves out what cannot
#: reach them): the upper end of what kernel and sampled text measured (benchmarks/README,
#: "The count's scratch").
SCRATCH_BYTES_PER_OCCURRENCE = 30
THRESHOLDED_SCRATCH_BYTES_PER_OCCURRENCE = 17
#: The share of those bytes that compressed scratch files take
#: (:mod:`snm_core.io.scratch_codec`), the upper end measured.
COMPRESSED_SCRATCH_SHARE = 0.65
#: The share of the free disk one pass's scratch may take: the buckets it writes, and the
#: merged buckets of the passes before it, are beside it.
SCRATCH_SHARE_OF_FREE_DISK = 0.5


def passes_for_disk(occurrences, thresholded, free_bytes, compress=None):
    """``(passes, compressed)``: the passes over the text a count makes so that one pass's
    scratch (its share of the buckets) fits the free disk, and whether its scratch files
    are compressed.  ``compress`` None (``--compress_scratch auto``): one pass of raw
    files where they fit, or where the free disk is unknown (object storage); otherwise
    compressed files (fewer passes re-read the text, for the little time the compression
    takes), in as many passes as those need.  True or False: the passes those files
    need."""
    if free_bytes is None:
        return 1, bool(compress)
    per_occurrence = (THRESHOLDED_SCRATCH_BYTES_PER_OCCURRENCE if thresholded
                      else SCRATCH_BYTES_PER_OCCURRENCE)
    room = max(1, int(free_bytes * SCRATCH_SHARE_OF_FREE_DISK))
    raw = occurrences * per_occurrence
    if compress is None:
        compress = raw > room
    scratch = int(raw * COMPRESSED_SCRATCH_SHARE) if compress else raw
    return max(1, -(-scratch // room)), compress


def passes_for_rest(scratch_bytes, buckets_done, buckets_left, free_bytes):
    """The passes the ``buckets_left`` buckets need, from the scratch the passes so far
    wrote for their ``buckets_done`` buckets (``scratch_bytes``): the same room as
    :func:`passes_for_disk`, of the disk free now (the merged buckets are beside it).
    Buckets are equal ranges of hashed keys, so each takes about the same bytes; the
    measured bytes replace the plan's upper bound, which can be twice what text
    writes.  None where nothing was measured or the free disk is unknown."""
    if scratch_bytes is None or free_bytes is None or not buckets_done or not buckets_left:
        return None
    room = max(1, int(free_bytes * SCRATCH_SHARE_OF_FREE_DISK))
    needed = -(-scratch_bytes * buckets_left // buckets_done)
    return max(1, min(buckets_left, -(-needed // room)))


@dataclasses.dataclass(frozen=True)
class CountPlan:
    """The count's sizes: key-range buckets, the links a worker holds before a flush, and
    the partial links a bucket's merge reads at once."""

    num_buckets: int
    flush_links: int
    merge_rows: int


def default_flush_links(num_buckets):
    return min(max(MIN_FLUSH_LINKS, FLUSH_LINKS_PER_BUCKET * num_buckets), MAX_FLUSH_LINKS)


def plan_memory(budget, workers, words, occurrences_per_event, flush_links=None,
                num_buckets=None, fixed_buckets=False):
    """The count's buckets and flush size within the memory budget, checked before any work.

    A process holds, per worker: a chunk's feature occurrences being extracted, its flush
    buffer, and the bucket it merges.  The first two are fixed; a bucket's merge holds
    its partial links, at most the corpus's feature occurrences (``words`` x
    ``occurrences_per_event``) over the buckets.  The buckets: the given ones (checked;
    ``fixed_buckets``: an ``--add_to``'s), else enough that a bucket gets at most
    :data:`BUCKET_OCCURRENCES` and its merge fits, never fewer than
    :data:`DEFAULT_NUM_BUCKETS`.  ``flush_links`` None: :func:`default_flush_links`.
    A merge reads at most :data:`MERGE_CHUNK_ROWS` partial links at once, fewer if the
    budget needs.
    """
    occurrences = words * occurrences_per_event
    merging = workers * occurrences * MERGE_PARTIAL_BYTES
    buckets = num_buckets or int(min(max(DEFAULT_NUM_BUCKETS,
                                         -(-occurrences // BUCKET_OCCURRENCES)), 65536))
    # The default flush buffers take at most a sixteenth of the budget.
    flush = flush_links or max(1, min(default_flush_links(buckets), budget.working() // (
        16 * workers * PENDING_LINK_BYTES)))
    fixed = {"the process": PROCESS_BYTES,
             "extraction": workers * min(MAX_OCCURRENCES_PER_CHUNK, occurrences)
             * OCCURRENCE_BYTES,
             "flush buffers": workers * flush * PENDING_LINK_BYTES}
    budget.require("count", fixed)
    need = max(1, -(-merging // max(budget.left(fixed), 1)))
    if num_buckets is None:
        buckets = int(min(max(buckets, need), 65536))
    if num_buckets is not None and num_buckets < need:
        advice = "re-count from scratch or give --memory" if fixed_buckets else \
            f"give --num_buckets {need} (or leave it out) or --memory"
        raise SnmInputError(
            f"count: {num_buckets} buckets would merge up to {format_bytes(merging // num_buckets)} "
            f"at once (about {words:,} words of text x {occurrences_per_event} feature "
            f"occurrences a word, {workers} worker(s)), over the budget {budget}; {advice} "
            f"{round_up(sum(fixed.values()) + merging // num_buckets)}")
    merge_rows = min(MERGE_CHUNK_ROWS, max(1, budget.left(fixed) // (
        workers * MERGE_PARTIAL_BYTES)))
    return CountPlan(buckets, flush, merge_rows)
