"""Real servers for tests: a free port to start one on, a Beam SDK worker pool."""

import contextlib
import os
import signal
import socket
import subprocess
import time


def free_port(host="localhost"):
    """A TCP port nothing listens on now, on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def beam_worker_pool(python, cwd, log_path):
    """A Beam SDK worker pool of ``python`` (a virtual environment's interpreter), started
    in ``cwd`` on a free port; yields its ``localhost:PORT``.

    The pool starts each SDK worker as ``python -c ...`` with the ``python`` found on
    PATH, so ``python``'s directory goes first on PATH.  Stopped, with the workers it
    started, on leaving."""
    port = free_port()
    env = {**os.environ, "PATH": f"{os.path.dirname(python)}:{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    with open(log_path, "wb") as log:
        pool = subprocess.Popen([python, "-m", "apache_beam.runners.worker.worker_pool_main",
                                 f"--service_port={port}"], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert pool.poll() is None, open(log_path).read()
                try:
                    socket.create_connection(("localhost", port), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the worker pool did not start listening"
                    time.sleep(0.1)
            yield f"localhost:{port}"
        finally:
            os.killpg(pool.pid, signal.SIGTERM)  # the pool and the SDK workers it started
            try:
                pool.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(pool.pid, signal.SIGKILL)
                pool.wait()
