"""Loss checks: a stage's last step compares what it read with what it wrote.

A runner that drops outputs (Beam's Dask runner drops what a DoFn emits from
``finish_bundle``) would otherwise leave a complete-looking, wrong directory.
Each check raises :class:`SnmStageError` before the manifest is written.
"""

import collections

from snm_core.io.errors import SnmStageError


def add_totals(total, more):
    """Sum the totals ``more`` into ``total`` (in place, returned): numbers add, lists
    (e.g. the text shards read, checked by :func:`check_each_once`) concatenate."""
    for name, value in more.items():
        total[name] = total.get(name, [] if isinstance(value, list) else 0) + value
    return total


def check_equal(stage, read_what, read, wrote_what, wrote):
    """``read`` (what the stage's input held) must equal ``wrote`` (what its output holds)."""
    if read != wrote:
        raise SnmStageError(f"{stage}: {read_what} = {read:,} but {wrote_what} = {wrote:,}; "
                            "the runner lost or repeated work, so no manifest was written")


def check_each_once(stage, what, expected, reported):
    """Every item of ``expected`` (e.g. the text shards listed) is in ``reported`` once."""
    counts = collections.Counter(reported)
    missing = sorted(set(expected) - set(counts))
    repeated = sorted(item for item, n in counts.items() if n > 1)
    unexpected = sorted(set(counts) - set(expected))
    for problem, items in (("never reported", missing), ("reported twice", repeated),
                           ("not asked for", unexpected)):
        if items:
            shown = ", ".join(str(i) for i in items[:3]) + (", ..." if len(items) > 3 else "")
            raise SnmStageError(f"{stage}: {len(items)} of {len(expected)} {what} {problem} "
                                f"({shown}); the runner lost or repeated work, so no manifest "
                                "was written")
