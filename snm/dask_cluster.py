"""A Dask cluster on this machine: one ``dask scheduler`` and ``dask worker`` processes.

For the tests and benchmarks that run the Beam stages on Beam's DaskRunner
against real worker processes (``launch/dask.sh`` starts the same from bash)::

    with LocalDaskCluster(directory, workers=2) as cluster:
        snm count ... --runner dask --dask_address cluster.address

Needs ``pip install 'snm-lm[dask]'`` (apache-beam[dask]).
"""

import os
import signal
import subprocess
import sys
import time


class LocalDaskCluster:
    """A scheduler and ``workers`` worker processes of ``threads`` threads each.

    Each worker runs under a nanny, which restarts it if it dies.  The
    processes start in their own session, log to ``directory/cluster.log``
    and are killed by :meth:`stop` (or on leaving the ``with`` block).

    Parameters
    ----------
    directory : path-like
        For the scheduler file, the log and the workers' spill space.
    workers, threads : int
    env : dict, optional
        Extra environment of every process (e.g. PYTHONPATH, fault-test settings).
    worker_prefix : list of str, optional
        A command the worker command is run under (the tests use ``unshare`` to
        give the workers a filesystem view of their own).
    """

    def __init__(self, directory, workers=2, threads=1, env=None, timeout=60,
                 worker_prefix=()):
        import distributed
        self.directory = str(directory)
        self.env = {**os.environ, **(env or {})}
        self.procs = []
        dask = os.path.join(os.path.dirname(sys.executable), "dask")
        scheduler_file = os.path.join(self.directory, "scheduler.json")
        if os.path.exists(scheduler_file):
            os.remove(scheduler_file)
        self.log = open(os.path.join(self.directory, "cluster.log"), "ab")
        try:
            self._start([dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                         "--no-dashboard", "--scheduler-file", scheduler_file])
            deadline = time.monotonic() + timeout
            while not os.path.exists(scheduler_file):
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError(f"the Dask scheduler did not start; see {self.log.name}")
                time.sleep(0.1)
            self._start(list(worker_prefix) + [dask, "worker", "--scheduler-file", scheduler_file,
                         "--nworkers", str(workers), "--nthreads", str(threads),
                         "--no-dashboard", "--local-directory",
                         os.path.join(self.directory, "workers")])
            with distributed.Client(scheduler_file=scheduler_file, timeout=timeout) as client:
                client.wait_for_workers(workers, timeout=timeout)
                self.address = client.scheduler.address
        except BaseException:
            self.stop()
            raise

    def _start(self, argv):
        self.procs.append(subprocess.Popen(argv, cwd=self.directory, env=self.env,
                                           stdout=self.log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def runner_options(self):
        """The snm options that run a Beam stage on this cluster."""
        return ["--runner", "dask", "--dask_address", self.address]

    def stop(self):
        for proc in reversed(self.procs):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs = []
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
