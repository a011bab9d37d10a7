"""The count's memory within the budget: what a worker holds, and the buckets that fit.

A count worker holds, at once: a chunk of feature occurrences being extracted
(:data:`MAX_OCCURRENCES_PER_CHUNK` at most, each with its keys, sort and partial
arrays), its flush buffer (``--flush_links`` pending links) and the bucket it merges
(its partial links, at most the corpus's feature occurrences over the buckets).  The
first two are fixed; :func:`plan_memory` checks them against the budget and sizes the
buckets from the rest.
"""

from snm_core.io.errors import SnmInputError
from snm_core.io.memory import PROCESS_BYTES, format_bytes, round_up

#: Key ranges: a bucket's merge holds ~100 bytes per partial link it sums, so
#: more buckets mean less memory a worker, for a little more time (one shuffle
#: element per bucket pair for the continuation counts).  The memory budget
#: raises it with the corpus (:func:`plan_memory`); never fewer than this.
DEFAULT_NUM_BUCKETS = 64
#: Feature occurrences of one type extracted at once (an upper bound: events x windows).
MAX_OCCURRENCES_PER_CHUNK = 2_000_000
#: What a worker holds, in bytes: a pending link of its flush buffer, a feature
#: occurrence of the chunk it extracts (its keys, sort and partial arrays), a partial
#: link of the bucket it merges.
PENDING_LINK_BYTES = 45
OCCURRENCE_BYTES = 35
MERGE_PARTIAL_BYTES = 100


def plan_memory(budget, workers, words, occurrences_per_event, flush_links, num_buckets=None,
                fixed_buckets=False):
    """The count's buckets within the memory budget, checked before any work.

    A process holds, per worker: a chunk's feature occurrences being extracted, its flush
    buffer, and the bucket it merges.  The first two are fixed; a bucket's merge holds
    its partial links, at most the corpus's feature occurrences (``words`` x
    ``occurrences_per_event``) over the buckets.  Returns the number of buckets: the given
    one (checked), else the fewest that fit, and never fewer than
    :data:`DEFAULT_NUM_BUCKETS` (``fixed_buckets``: an ``--add_to``'s, checked only).
    """
    fixed = {"the process": PROCESS_BYTES,
             "extraction": workers * MAX_OCCURRENCES_PER_CHUNK * OCCURRENCE_BYTES,
             "flush buffers": workers * flush_links * PENDING_LINK_BYTES}
    budget.require("count", fixed)
    merging = workers * words * occurrences_per_event * MERGE_PARTIAL_BYTES
    need = max(1, -(-merging // max(budget.left(fixed), 1)))
    if num_buckets is None:
        return int(min(max(DEFAULT_NUM_BUCKETS, need), 65536))
    if num_buckets < need:
        advice = "re-count from scratch or give --memory" if fixed_buckets else \
            f"give --num_buckets {need} (or leave it out) or --memory"
        raise SnmInputError(
            f"count: {num_buckets} buckets would merge up to {format_bytes(merging // num_buckets)} "
            f"at once (about {words:,} words of text x {occurrences_per_event} feature "
            f"occurrences a word, {workers} worker(s)), over the budget {budget}; {advice} "
            f"{round_up(sum(fixed.values()) + merging // num_buckets)}")
    return num_buckets
