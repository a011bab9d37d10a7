"""Progress of long work: a bar on a terminal, a log line every few seconds otherwise.

Every stage that can run for more than a few seconds reports through
:class:`Progress`: in the process the user started, a tqdm bar with rate and
time left when stderr is a terminal, and otherwise (a log file, a scheduler, a
Beam worker in another process) a line on the ``snm.progress`` logger every
:data:`LOG_SECONDS`, so that hours of work are never silent.  A Beam worker
uses it with ``bar=False``: its lines reach the user through the runner's
logging (the local runner's threads share the user's stderr).

>>> with Progress("demo", total=3, unit="bucket", bar=False) as progress:
...     for _ in range(3):
...         progress.update()
>>> progress.done
3
"""

import logging
import sys
import threading
import time

#: Seconds between two progress lines when there is no bar.
LOG_SECONDS = 5.0
LOGGER = logging.getLogger("snm.progress")
LOGGER.setLevel(logging.INFO)


def _terminal():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """How far ``stage`` is: ``update(n)`` as work is done (thread-safe), ``close()`` at the
    end (or use it as a context manager).

    Parameters
    ----------
    stage : str, what is shown first (``"count"``, ``"export-arpa: order 3"``)
    total : int, optional: the work in all (a percentage and time left when known)
    unit : str: what is counted (``"word"``, ``"bucket"``)
    bar : bool, optional: a bar (default: when stderr is a terminal) or log lines
    every : float: seconds between log lines
    """

    def __init__(self, stage, total=None, unit="it", bar=None, every=LOG_SECONDS):
        self.stage, self.total, self.unit, self.every = stage, total, unit, every
        self.done = 0
        self.started = self.last = time.monotonic()
        self._lock = threading.Lock()
        self._bar = None
        if bar if bar is not None else _terminal():
            from tqdm import tqdm  # a bar's rate, time left and terminal handling
            self._bar = tqdm(total=total, desc=stage, unit=unit, unit_scale=True,
                             dynamic_ncols=True, leave=False, file=sys.stderr)

    def update(self, n=1):
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(n)
                return
            now = time.monotonic()
            if now - self.last < self.every:
                return
            self.last = now
            LOGGER.info(self.line(now))

    def line(self, now=None):
        """The progress as one line: what is done, the rate and, with a total, the share."""
        seconds = max((now or time.monotonic()) - self.started, 1e-9)
        share = f" of {self.total:,} ({100 * self.done / self.total:.0f}%)" \
            if self.total else ""
        return (f"{self.stage}: {self.done:,}{share} {self.unit}s, "
                f"{self.done / seconds:,.0f} {self.unit}s/s")

    def close(self):
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
