"""The test's side of :mod:`snm_core.io.checkpoints`: waiting for a process to pause."""

import os
import time


def wait_for(directory, name, timeout=120):
    """The pid of the process paused at checkpoint ``name`` (waits for it to arrive)."""
    ready = os.path.join(directory, f"{name}.pid")
    deadline = time.monotonic() + timeout
    while not os.path.exists(ready):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no process reached checkpoint {name!r} in {timeout} s")
        time.sleep(0.02)
    with open(ready) as f:
        return int(f.read())
