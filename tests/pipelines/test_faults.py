"""Faults during ``snm train``: a run killed anywhere, a full disk.

A run is killed at named checkpoints (:mod:`snm_core.io.checkpoints`) that the test waits
for, never after a sleep; the file size limit (RLIMIT_FSIZE) stands in for a full disk.
"""

import os
import re
import resource
import signal
import subprocess
import sys

import pytest
from support import messages
from support.checkpoints import wait_for
from support.runs import assert_same_run, train_argv

from snm_core.io import checkpoints

#: checkpoint -> the ``snm train`` stage it is in.
CHECKPOINTS = {"count.merged": "count", "join.bucket": "join", "fit.batch": "fit",
               "apply.bucket": "apply", "eval.scored": "eval"}


def snm(*argv, env=None, limit_file_bytes=None):
    def limit():
        if limit_file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_file_bytes, limit_file_bytes))
    return subprocess.run([sys.executable, "-m", "snm", *argv], env=env, capture_output=True,
                          text=True, check=False, preexec_fn=limit)


@pytest.mark.parametrize("point", CHECKPOINTS)
def test_a_run_killed_anywhere_resumes_to_the_same_bytes(point, corpus, reference_run,
                                                         tmp_path):
    """SIGKILL ``snm train`` inside a stage; the re-run runs that stage again (never
    "skipped") and its every output is byte-identical to an uninterrupted run's."""
    out = tmp_path / "run"
    pause = tmp_path / "pause"
    pause.mkdir()
    env = {**os.environ, checkpoints.PAUSE_AT: point, checkpoints.PAUSE_DIR: str(pause)}
    proc = subprocess.Popen([sys.executable, "-m", "snm", "train"] + train_argv(corpus, out),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    wait_for(str(pause), point)
    os.killpg(proc.pid, signal.SIGKILL)  # the run and any worker it started
    assert proc.wait() == -signal.SIGKILL
    stage = CHECKPOINTS[point]
    rerun = snm("train", *train_argv(corpus, out))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    # the stage's line ends with its seconds, not "up to date"
    assert re.search(rf"^{stage} .* s$", rerun.stdout, re.MULTILINE), rerun.stdout
    assert_same_run(reference_run, out)


@pytest.mark.parametrize("point", ["count.merged", "fit.batch"])
def test_ctrl_c_is_one_line_and_the_rerun_resumes(point, corpus, reference_run, tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C sends) inside a stage:
    one line naming the stage, exit 130, no traceback; the re-run gives the same bytes."""
    out = tmp_path / "run"
    pause = tmp_path / "pause"
    pause.mkdir()
    env = {**os.environ, checkpoints.PAUSE_AT: point, checkpoints.PAUSE_DIR: str(pause)}
    proc = subprocess.Popen([sys.executable, "-m", "snm", "train"] + train_argv(corpus, out),
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    wait_for(str(pause), point)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    stage = CHECKPOINTS[point]
    assert proc.returncode == 130
    assert stderr == (f"snm train: interrupted during {stage}; run the same command again to "
                      "go on (what was finished is kept)\n")
    assert not (out / stage / "manifest.json").exists()
    rerun = snm("train", *train_argv(corpus, out))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_same_run(reference_run, out)


def test_ctrl_c_stops_a_multiprocessing_count_and_its_workers_quietly(corpus, tmp_path):
    """The workers of the multi-processing runner are in the terminal's process group too:
    they must not print their own tracebacks."""
    out, pause = tmp_path / "count", tmp_path / "pause"
    pause.mkdir()
    env = {**os.environ, checkpoints.PAUSE_AT: "count.flushed",
           checkpoints.PAUSE_DIR: str(pause)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "snm", "count", "--config", "5gram", "--train", corpus["train"],
         "--min_count", "1", "--out", str(out), "--flush_links", "2000", "--direct_num_workers=2",
         "--direct_running_mode=multi_processing"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    wait_for(str(pause), "count.flushed")  # a worker process waits there
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    (pause / "count.flushed.go").touch()  # the paused worker goes on, finds its runner gone
    assert proc.returncode == 130
    ours = [line for line in stderr.splitlines() if line.startswith("snm ")]
    assert ours == ["snm count: interrupted; run the same command again to go on (what was "
                    "finished is kept)"]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert not (out / "manifest.json").exists()


def test_a_full_disk_in_count_is_one_line_and_leaves_no_manifest(corpus, tmp_path):
    out = tmp_path / "counts"
    proc = snm("count", "--config", "5gram", "--train", corpus["train"], "--min_count", "1",
               "--num_buckets", "4", "--shuffle", "beam", "--out", str(out),
               limit_file_bytes=20_000)
    assert proc.returncode == 1
    error = messages(proc.stderr)
    assert len(error) == 1, proc.stderr
    assert error[0].startswith(f"snm count: failed: count: writing {out}/")
    assert error[0].endswith("the file size limit was reached (ulimit -f)")
    assert not (out / "manifest.json").exists()
    assert not (out / "_scratch").exists()
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]  # nothing half-written


def test_a_full_disk_in_fit_leaves_the_earlier_stages_and_names_the_stage(corpus, tmp_path):
    """The fit's theta (16 MiB) does not fit under the limit: one line naming the stage and
    the file; the finished stages keep their manifests, the fit writes none, and the run
    completes once there is room, skipping what was done."""
    out = tmp_path / "run"
    proc = snm("train", *train_argv(corpus, out), limit_file_bytes=4_000_000)
    assert proc.returncode == 1
    error = messages(proc.stderr)
    assert len(error) == 1, proc.stderr
    assert error[0].startswith(f"snm train: failed: fit: writing {out}/fit/theta.npy: ")
    for stage in ("vocab", "count", "join"):
        assert (out / stage / "manifest.json").exists()
    assert not (out / "fit" / "manifest.json").exists()
    assert not (out / "model").exists()
    rerun = snm("train", *train_argv(corpus, out))
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert re.search(r"^count .* up to date$", rerun.stdout, re.MULTILINE), rerun.stdout


def test_worker_faults_reach_the_user_as_one_line_naming_the_stage():
    """How runners hand back a worker's exception (itself, chained, or as text in their
    own): snm's errors, a full disk and exhausted memory become one line with the stage."""
    import errno

    from pipelines.running import _snm_error
    from snm_core.io.errors import OUT_OF_MEMORY, SnmInputError, SnmStageError

    def wrapped(inner):
        try:
            raise inner
        except Exception as e:
            try:
                raise RuntimeError(f"{type(e).__name__}: {e} [while running 'Count/X']") from e
            except RuntimeError as outer:
                return outer

    full = OSError(errno.ENOSPC, "No space left on device", "/out/links-00001-of-00004.parquet")
    cases = [
        (wrapped(SnmInputError("/c/x.gz: cannot decompress")), SnmInputError,
         "/c/x.gz: cannot decompress"),
        (wrapped(full), SnmStageError,
         "count: writing /out/links-00001-of-00004.parquet: no space left on the device"),
        (wrapped(MemoryError()), SnmStageError, f"count: {OUT_OF_MEMORY}"),
        # text only (a worker process's exception, rendered by the runner)
        (RuntimeError("Traceback ...\nsnm_core.io.errors.SnmStageError: count: 1 of 2 text "
                      "shards never reported (a) [while running 'WriteManifest/Call']"),
         SnmStageError, "count: 1 of 2 text shards never reported (a)"),
        (RuntimeError("OSError: [Errno 28] No space left on device: '/out/_scratch/p.arrays' "
                      "[while running 'Count/ExtractLinkPartials']"), SnmStageError,
         "count: writing /out/_scratch/p.arrays: no space left on the device"),
        (RuntimeError("numpy._core._exceptions._ArrayMemoryError: Unable to allocate 4 MiB\n"
                      "MemoryError"), SnmStageError, f"count: {OUT_OF_MEMORY}"),
    ]
    for error, kind, message in cases:
        converted = _snm_error(error, "count")
        assert type(converted) is kind and str(converted) == message, (error, converted)
    bug = RuntimeError("ZeroDivisionError: division by zero [while running 'Count/X']")
    assert _snm_error(bug, "count") is bug  # a bug keeps its traceback
