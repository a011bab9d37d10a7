"""One run at a time per output directory: ``with run_lock(out, "snm train"): ...``.

The lock is a file, ``OUT/.snm.lock``, created with ``O_CREAT | O_EXCL`` (the
filesystem decides who wins) and holding who took it: host, pid, command and
start time.  A second run gets an :class:`SnmInputError` naming the holder and
touches nothing.  A lock whose holder is gone (same host, no such process) is
taken over; a lock held on another host is never guessed stale.

Object stores offer no create-if-absent through ``pyarrow.fs``, so a remote
``--out`` is not locked (the lock is skipped, not faked).
"""

import contextlib
import json
import os
import socket
import time

from snm_core import storage
from snm_core.errors import SnmInputError

LOCK_NAME = ".snm.lock"


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _describe(holder):
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return (f"{holder.get('command', 'a run')} (host {holder.get('host')}, pid "
            f"{holder.get('pid')}, started {started})")


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None  # being written, or removed meanwhile


@contextlib.contextmanager
def run_lock(directory, command):
    """Hold ``directory``'s lock for the block (see the module docstring).

    Raises
    ------
    SnmInputError
        If another live process holds it.
    """
    if storage.is_remote(directory):
        yield
        return
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, LOCK_NAME)
    me = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
          "started": time.time()}
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = _read(path)
            if holder is None:
                time.sleep(0.05)
                continue
            if holder.get("host") == me["host"] and not _alive(int(holder.get("pid", -1))):
                # The holder died: remove its lock only if it is still that one.
                if _read(path) == holder:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                continue
            raise SnmInputError(f"{directory} is in use by {_describe(holder)}; wait for it "
                                f"to finish, or remove {path} if that run is gone") from None
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(me, f)
        break
    else:
        raise SnmInputError(f"{path}: could not take the run lock; try again")
    try:
        yield
    finally:
        if _read(path) == me:
            os.unlink(path)
