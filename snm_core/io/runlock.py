"""One run at a time per output directory: ``with run_lock(out, "snm train"): ...``.

The lock is a file, ``OUT/.snm.lock``, created with ``O_CREAT | O_EXCL`` (the
filesystem decides who wins) and holding who took it: host, pid, command and
start time.  A second run gets an :class:`SnmInputError` naming the holder and
touches nothing.  A lock whose holder is gone (same host, no such process) is
taken over; a lock held on another host is never guessed stale.

In S3 (and S3-compatible stores) the lock is the object ``OUT/.snm.lock``,
created with a conditional write (``If-None-Match: *``: the store decides who
wins), through boto3 (``pip install 'snm-lm[s3]'``; ``pyarrow.fs`` has no
conditional write).  Other object stores (``gs://``, ``hdfs://``), or S3
without boto3, are not locked: a warning says so (the lock is skipped, not
faked).
"""

import contextlib
import json
import logging
import os
import socket
import time

from snm_core.io import storage
from snm_core.io.errors import SnmInputError

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


class _LocalLockFile:
    """The lock as a local file: ``O_CREAT | O_EXCL``."""

    def __init__(self, directory):
        if os.path.exists(directory) and not os.path.isdir(directory):
            raise SnmInputError(f"--out {directory}: a file, not a directory; give a new or "
                                "existing directory")
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, LOCK_NAME)

    def create(self, data):
        """True if this call created the lock with ``data``; False if it exists."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True

    def read(self):
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError:
            return None

    def remove(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class _S3LockObject:
    """The lock as an S3 object, created with ``If-None-Match: *`` (boto3)."""

    def __init__(self, url):
        import boto3  # only here: the one conditional write snm needs
        import botocore.exceptions
        self.path = storage.join(url, LOCK_NAME)
        self.bucket, _, self.key = self.path[len("s3://"):].partition("/")
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        self.client = boto3.client("s3", endpoint_url=endpoint)
        self.errors = botocore.exceptions.ClientError

    def create(self, data):
        try:
            self.client.put_object(Bucket=self.bucket, Key=self.key, Body=data,
                                   IfNoneMatch="*")
        except self.errors as e:
            if e.response.get("Error", {}).get("Code") in ("PreconditionFailed",
                                                           "ConditionalRequestConflict"):
                return False
            raise SnmInputError(f"{self.path}: cannot create the run lock "
                                f"({e.response.get('Error', {}).get('Code')})") from None
        return True

    def read(self):
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.key)["Body"].read()
        except self.errors:
            return None

    def remove(self):
        with contextlib.suppress(self.errors):
            self.client.delete_object(Bucket=self.bucket, Key=self.key)


def _lock_for(directory):
    """The lock of ``directory``, or None where it cannot be taken (with a warning)."""
    if not storage.is_remote(directory):
        return _LocalLockFile(directory)
    if directory.startswith("s3://"):
        try:
            return _S3LockObject(directory)
        except ImportError:
            reason = "boto3 is not installed (pip install 'snm-lm[s3]')"
    else:
        reason = "this object store offers snm no conditional write"
    logging.warning("%s is not locked against a second run: %s", directory, reason)
    return None


def _decode(data):
    try:
        return json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        return None  # being written


@contextlib.contextmanager
def run_lock(directory, command):
    """Hold ``directory``'s lock for the block (see the module docstring).

    Raises
    ------
    SnmInputError
        If another live process holds it.
    """
    lock = _lock_for(directory)
    if lock is None:
        yield
        return
    me = {"host": socket.gethostname(), "pid": os.getpid(), "command": command,
          "started": time.time()}
    mine = json.dumps(me).encode("utf-8")
    for _ in range(3):
        if lock.create(mine):
            break
        data = lock.read()
        holder = _decode(data)
        if holder is None:
            time.sleep(0.05)
            continue
        if holder.get("host") == me["host"] and not _alive(int(holder.get("pid", -1))):
            # The holder died: remove its lock only if it is still that one.
            if lock.read() == data:
                lock.remove()
            continue
        raise SnmInputError(f"{directory} is in use by {_describe(holder)}; wait for it "
                            f"to finish, or remove {lock.path} if that run is gone") from None
    else:
        raise SnmInputError(f"{lock.path}: could not take the run lock; try again")
    try:
        yield
    finally:
        if lock.read() == mine:
            lock.remove()
