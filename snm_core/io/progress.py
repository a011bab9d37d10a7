"""Progress of long work: a bar on a terminal, a log line every few seconds otherwise.

Work done in the process the user started reports through :class:`Progress`: a
tqdm bar with rate and time left when stderr is a terminal, and otherwise (a log
file, a scheduler) a line on the ``snm.progress`` logger every
:data:`LOG_SECONDS`, so that hours of work are never silent.

A Beam stage's work is done by workers: threads of this process (the local
runner's ``in_memory`` and ``multi_threading`` modes), its children
(``multi_processing``) or processes elsewhere (Dask, Dataflow).  The stage shows
one :class:`StageProgress` in the user's process, counting what all of its
workers did; a worker reports through a :class:`WorkerProgress`, made where the
pipeline is built and pickled with the DoFn:

* in this process (a thread) it adds to the open :class:`StageProgress` directly;
* in a child process it appends a short line to a file that the
  :class:`StageProgress` names in the environment (:data:`CHANNEL_ENV`) while it is
  open, and reads a few times a second;
* anywhere else (a remote worker) it logs a line every :data:`LOG_SECONDS`, one for
  all the copies of the DoFn in that process.

Workers report a batch of text or a bucket at a time, never a line.

>>> with Progress("demo", total=3, unit="bucket", bar=False) as progress:
...     for _ in range(3):
...         progress.update()
>>> progress.done
3
"""

import contextlib
import dataclasses
import functools
import glob
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from typing import Optional

#: Seconds between two progress lines when there is no bar.
LOG_SECONDS = 5.0
#: Seconds between two redraws of a stage's bar from its workers' counts.
POLL_SECONDS = 0.2
#: The environment variable naming the file a stage's worker processes append their
#: progress to (set while a :class:`StageProgress` with a channel is open).
CHANNEL_ENV = "SNM_PROGRESS_CHANNEL"
#: The start of a channel file's name, in the temporary directory: then the pid of the
#: process that made it.
CHANNEL_PREFIX = "snm-progress-"
LOGGER = logging.getLogger("snm.progress")
LOGGER.setLevel(logging.INFO)


def _terminal():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _tqdm(desc, total, unit, bar_format=None):
    from tqdm import tqdm  # a bar's rate, time left and terminal handling
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True,
                unit_divisor=1024 if unit == "B" else 1000, dynamic_ncols=True, leave=False,
                file=sys.stderr, bar_format=bar_format)


def _figure(n, unit):
    """``n`` as a log line shows it: bytes scaled (``118MB``), other units ``1,234``."""
    if unit == "B":
        from tqdm import tqdm
        return tqdm.format_sizeof(n, "B", 1024)
    return f"{n:,.0f}"


def progress_line(what, done, total, unit, seconds):
    """One line of progress: what is done, of the total when known, and the rate."""
    rate = done / max(seconds, 1e-9)
    share = f" of {_figure(total, unit)} ({100 * done / total:.0f}%)" if total else ""
    if unit == "B":
        return f"{what}: {_figure(done, unit)}{share}, {_figure(rate, unit)}/s"
    return f"{what}: {done:,}{share} {unit}s, {rate:,.0f} {unit}s/s"


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
            self._bar = _tqdm(stage, total, unit)

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
        return progress_line(self.stage, self.done, self.total, self.unit,
                             (now or time.monotonic()) - self.started)

    def close(self):
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Status:
    """A line of text shown in place on a terminal, each ``show(text)`` replacing the last,
    cleared by ``close()``: what work that has no count is doing.  Off a terminal, nothing."""

    def __init__(self):
        self._bar = _tqdm("", None, "it", bar_format="{desc}") if _terminal() else None

    def show(self, text):
        if self._bar is not None:
            self._bar.set_description_str(text)

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@dataclasses.dataclass
class _Phase:
    """A step of a stage's work, as its workers report it (``"buckets merged"``)."""

    name: str
    unit: str
    total: Optional[int]
    started: float
    done: int = 0


#: The StageProgress open in this process, which its worker threads add to.
_active = None


class StageProgress:
    """The one progress display of a stage whose work is done by Beam workers, counting what
    all of them reported (see the module docstring): one bar on a terminal, else a line on
    the ``snm.progress`` logger every ``every`` seconds.

    The stage's steps (``phases``: ``"text read"``, then ``"buckets merged"``, ...)
    follow one another; the bar shows the one that started last.

    Parameters
    ----------
    stage : str, shown first (``"count"``)
    totals : dict, optional: ``{phase: total}`` for phases whose total only this process
        knows (the text's bytes); the workers' own totals otherwise
    channel : bool: open a file for worker processes (children of this process) to report
        to, named in the environment while this is open
    bar : bool, optional: a bar (default: when stderr is a terminal) or log lines
    every : float: seconds between log lines
    """

    def __init__(self, stage, totals=None, channel=True, bar=None, every=LOG_SECONDS):
        self.stage, self.totals, self.every = stage, dict(totals or {}), every
        self.bar = bar if bar is not None else _terminal()
        self.phases = {}  # name -> _Phase, in the order they started
        self.started = self.logged = time.monotonic()
        self._channel = channel
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tqdm = self._shown = self._thread = self._reader = None
        self._unread = b""
        self._environment = None

    def add(self, phase, unit, total, n):
        """``n`` more of ``phase`` done (thread-safe)."""
        with self._lock:
            entry = self.phases.get(phase)
            if entry is None:
                entry = self.phases[phase] = _Phase(phase, unit, self.totals.get(phase, total),
                                                    time.monotonic())
            entry.done += n

    def current(self):
        """``(name, unit, total, done, seconds)`` of the phase that started last, or None."""
        with self._lock:
            if not self.phases:
                return None
            phase = list(self.phases.values())[-1]
            return (phase.name, phase.unit, phase.total, phase.done,
                    time.monotonic() - phase.started)

    def __enter__(self):
        global _active
        if self._channel:
            _remove_orphaned_channels(tempfile.gettempdir())
            descriptor, path = tempfile.mkstemp(prefix=f"{CHANNEL_PREFIX}{os.getpid()}-",
                                                suffix=".tsv")
            os.close(descriptor)
            self._reader = open(path, "rb")
            self._environment = os.environ.get(CHANNEL_ENV)
            os.environ[CHANNEL_ENV] = path
        _active = self
        if self.bar:
            # Shown at once: a stage's first phase may start seconds after the stage.
            self._tqdm = _tqdm(self.stage, None, "it", bar_format="{desc}: starting")
        self._thread = threading.Thread(target=self._watch, name=f"snm-progress-{self.stage}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        global _active
        self._stop.set()
        self._thread.join()
        if _active is self:
            _active = None
        if self._reader is not None:
            self._read_channel()
            path = self._reader.name
            self._reader.close()
            os.remove(path)
            if self._environment is None:
                os.environ.pop(CHANNEL_ENV, None)
            else:
                os.environ[CHANNEL_ENV] = self._environment
        if self._tqdm is not None:
            self._show()
            self._tqdm.refresh()  # the last counts, then the bar is cleared
            self._tqdm.close()

    def _watch(self):
        while not self._stop.wait(POLL_SECONDS if self.bar else min(self.every, 1.0)):
            if self._reader is not None:
                self._read_channel()
            self._show()

    def _read_channel(self):
        data = self._unread + self._reader.read()
        complete = data.rfind(b"\n") + 1
        self._unread = data[complete:]
        for line in data[:complete].splitlines():
            try:
                phase, unit, total, n = line.decode().split("\t")
                self.add(phase, unit, int(total) if total else None, int(n))
            except ValueError:  # not a worker's line: the display goes on without it
                continue

    def _show(self):
        current = self.current()
        if current is None:
            return
        name, unit, total, done, seconds = current
        if self._tqdm is not None:
            bar = self._tqdm
            if self._shown != name:  # a new phase: the bar starts over
                self._shown = name
                bar.bar_format = None
                bar.unit, bar.unit_divisor = unit, 1024 if unit == "B" else 1000
                bar.set_description_str(f"{self.stage}: {name}", refresh=False)
                bar.reset(total)
            bar.update(done - bar.n)
            return
        now = time.monotonic()
        if now - self.logged >= self.every:
            self.logged = now
            LOGGER.info(progress_line(f"{self.stage}: {name}", done, total, unit, seconds))


class WorkerProgress:
    """What a worker does of a stage's ``phase``: ``update(n)`` as it does it.

    Made where the pipeline is built (a DoFn's constructor), so that every copy of
    the DoFn shares it; on its first update in a worker it finds where its counts go
    (see the module docstring).

    Parameters
    ----------
    stage : str, the stage (``"count"``), named in a remote worker's log lines
    phase : str, the step (``"buckets merged"``)
    unit : str, what is counted (``"B"``, ``"bucket"``)
    total : int, optional: the work of the phase in all workers
    """

    def __init__(self, stage, phase, unit, total=None):
        self.stage, self.phase, self.unit, self.total = stage, phase, unit, total
        self.token = uuid.uuid4().hex  # the DoFn's copies in one process share a log line
        self._add = None

    def __getstate__(self):
        return {**self.__dict__, "_add": None}

    def update(self, n=1):
        if self._add is None:
            self._add = self._destination()
        self._add(n)

    def _destination(self):
        if _active is not None:
            return functools.partial(_active.add, self.phase, self.unit, self.total)
        path = os.environ.get(CHANNEL_ENV)
        descriptor = _channel_descriptor(path) if path else None
        if descriptor is not None:
            prefix = f"{self.phase}\t{self.unit}\t{self.total or ''}\t"
            return lambda n: os.write(descriptor, f"{prefix}{n}\n".encode())
        with _shared_lock:
            if self.token not in _shared:
                _shared[self.token] = Progress(f"{self.stage}: {self.phase}", total=self.total,
                                               unit=self.unit, bar=False, every=LOG_SECONDS)
            return _shared[self.token].update


_shared = {}  # WorkerProgress token -> the Progress of its log lines in this process
_shared_lock = threading.Lock()
_channels = {}  # path -> descriptor open for appending, in this process


def _remove_orphaned_channels(directory):
    """Remove the channel files in ``directory`` of processes that are gone: a killed
    process cannot remove its own."""
    for path in glob.glob(os.path.join(directory, f"{CHANNEL_PREFIX}*-*.tsv")):
        owner = os.path.basename(path)[len(CHANNEL_PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            with contextlib.suppress(OSError):
                os.remove(path)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _channel_descriptor(path):
    """A descriptor appending to the channel file ``path``, or None when it cannot be
    opened (a worker on another machine)."""
    with _shared_lock:
        if path not in _channels:
            try:
                # O_APPEND: the short lines of several processes never interleave.
                _channels[path] = os.open(path, os.O_WRONLY | os.O_APPEND)
            except OSError:
                _channels[path] = None
        return _channels[path]
