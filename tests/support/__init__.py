"""What several test modules share (no test module imports from another):

* ``paper``: the count by the paper's definitions, in plain Python over words (the
  oracle of the count and feature tests), and count directories read by feature identity;
* ``counts``: count directories read back; text files written;
* ``problems``: counts, small M and adjustment problems built in-process; the fit's tiny
  problem;
* ``models``: small models built by the real stages; a brute-force perplexity;
* ``runs``: ``snm train`` arguments of a small run; two runs compared byte for byte;
* ``checkpoints``: waiting for a process paused at a checkpoint (the fault tests);
* ``servers``: a free port for a real server; ``s3server``: an S3 server that logs every request.

Fixtures several folders use are in ``tests/conftest.py`` (``tests/pipelines/conftest.py``
for the runner and fault tests).
"""

import os

#: The tests folder and the repository.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)


def messages(stderr):
    """The lines of a command's standard error that are not progress: a slow machine may
    log a progress line (``snm.progress``, every few seconds off a terminal) before an
    error, and the error must still be one line."""
    return [line for line in stderr.splitlines() if not line.startswith("INFO:snm.progress:")]
