"""Loss checks: a stage's last step compares what it read with what it wrote.

A runner that drops outputs (Beam's Dask runner drops what a DoFn emits from
``finish_bundle``) would otherwise leave a complete-looking, wrong directory.
A stage's checks run together (:class:`Checks`): one :class:`SnmStageError` names
every one that failed, before the manifest is written.
"""

import collections

from snm_core.io.errors import SnmStageError


def add_totals(total, more):
    """Sum the totals ``more`` into ``total`` (in place, returned): numbers add, lists
    (e.g. the text shards read, checked by :meth:`Checks.each_once`) concatenate."""
    for name, value in more.items():
        total[name] = total.get(name, [] if isinstance(value, list) else 0) + value
    return total


class Checks:
    """A stage's loss checks, all of them run: leaving the block raises one
    :class:`SnmStageError` that names every check that failed.  Together they tell
    what happened: a shard missing beside one not asked for says its name changed on
    the way; its statistics missing while its links were written, that only they were
    lost; both missing, that it was never read."""

    def __init__(self, stage):
        self.stage, self.problems = stage, []

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None and self.problems:
            raise SnmStageError(f"{self.stage}: {'; '.join(self.problems)}; the runner lost "
                                "or repeated work, so no manifest was written")
        return False

    def equal(self, read_what, read, wrote_what, wrote):
        """``read`` (what the stage's input held) must equal ``wrote`` (what its output
        holds)."""
        if read != wrote:
            self.problems.append(f"{read_what} = {read:,} but {wrote_what} = {wrote:,}")

    def each_once(self, what, expected, reported):
        """Every item of ``expected`` (e.g. the text shards listed) is in ``reported``
        once."""
        counts = collections.Counter(reported)
        expected = list(expected)
        for problem, items in (
                ("never reported", sorted(set(expected) - set(counts))),
                ("reported twice", sorted(item for item, n in counts.items() if n > 1)),
                ("not asked for", sorted(set(counts) - set(expected)))):
            if items:
                shown = ", ".join(str(i) for i in items[:3]) + (", ..." if len(items) > 3
                                                                 else "")
                self.problems.append(f"{len(items)} of {len(expected)} {what} {problem} "
                                     f"({shown})")


def check_each_once(stage, what, expected, reported):
    """One :meth:`Checks.each_once`."""
    with Checks(stage) as checks:
        checks.each_once(what, expected, reported)
