"""Named points inside the stages where fault tests stop a process, deterministically.

A test sets ``SNM_PAUSE_AT=NAME`` and ``SNM_PAUSE_DIR=DIR`` in the environment
of the processes it starts.  The first process (of all those sharing ``DIR``)
to reach :func:`checkpoint` ``(NAME)`` writes ``DIR/NAME.pid`` (its pid) and
sleeps until ``DIR/NAME.go`` exists, so the test can wait for that file
(``tests/support/checkpoints.py``) and then kill the process at exactly that
point (a signal sent after a sleep would land anywhere).  Every later arrival,
a re-run after the kill included, passes straight through.  Without ``SNM_PAUSE_AT`` a checkpoint
costs one dictionary lookup.
"""

import os
import time

PAUSE_AT = "SNM_PAUSE_AT"
PAUSE_DIR = "SNM_PAUSE_DIR"


def checkpoint(name):
    """Pause here if a test asked to (see the module's docstring)."""
    if os.environ.get(PAUSE_AT) != name:
        return
    directory = os.environ[PAUSE_DIR]
    try:  # one process pauses: the first to create the claim
        fd = os.open(os.path.join(directory, f"{name}.claimed"),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    ready = os.path.join(directory, f"{name}.pid")
    with open(ready + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(ready + ".tmp", ready)
    go = os.path.join(directory, f"{name}.go")
    while not os.path.exists(go):
        time.sleep(0.02)
