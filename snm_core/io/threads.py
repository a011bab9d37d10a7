"""Work on a thread pool whose results are taken in order (numpy's, Arrow's and our
compiled loops release the GIL, so threads share the cores)."""

import collections


def ordered_map(pool, fn, items, ahead):
    """``fn`` of each item on ``pool``, results in order, at most ``ahead`` computed
    before they are taken."""
    pending = collections.deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
