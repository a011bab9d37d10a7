"""The Beam stages on Beam's DaskRunner, against a real cluster: a ``dask scheduler``
and two ``dask worker`` processes on localhost (apache-beam[dask], a test extra)."""

import os
import signal
import subprocess
import sys

import pytest

distributed = pytest.importorskip("distributed")

from support import REPO, TESTS  # noqa: E402
from support.checkpoints import wait_for  # noqa: E402
from support.runs import SLOW_SCRIPTS, assert_same_run, normalized, train_argv  # noqa: E402

from pipelines import count_links  # noqa: E402
from snm import cli  # noqa: E402
from snm.commands import count as count_cmd
from snm.commands import train as train_cmd  # noqa: E402
from snm.dask_cluster import LocalDaskCluster  # noqa: E402
from snm_core.io import checkpoints  # noqa: E402

#: The workers' import path: the code, and this test module (whose DoFn they unpickle)
#: with the support package it imports.
WORKER_PATH = os.pathsep.join([REPO, os.path.dirname(os.path.abspath(__file__)), TESTS])


def start_cluster(directory, env=None):
    """Two worker processes of one thread; the workers import this test module too."""
    return LocalDaskCluster(directory, workers=2, threads=1,
                            env={"PYTHONPATH": WORKER_PATH, **(env or {})})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    started = start_cluster(tmp_path_factory.mktemp("dask"))
    yield started
    started.stop()


def test_train_on_dask_writes_the_local_runners_bytes(corpus, reference_run, cluster, tmp_path):
    """vocab, count, join and apply on two Dask worker processes: the same files, byte for
    byte, as on the in-process runner (fit and eval run here either way)."""
    out = tmp_path / "dask"
    assert train_cmd.main(train_argv(corpus, out) + cluster.runner_options()) == 0
    assert_same_run(reference_run, out)


@pytest.mark.parametrize("shuffle", ["files", "beam"])
def test_count_added_to_on_dask_matches_the_local_runner(corpus, cluster, tmp_path, shuffle):
    """``--add_to`` reads the old buckets on the workers; both shuffles give the local bytes."""
    base = ["--config", "skip5gram", "--num_buckets", "4", "--shuffle", shuffle,
            "--batch_bytes", "4000"]
    for name, extra in (("local", []), ("dask", cluster.runner_options())):
        count_cmd.main(base + ["--train", corpus["dev"], "--min_count", "1",
                                 "--out", str(tmp_path / name / "old")] + extra)
        count_cmd.main(base + ["--train", corpus["train"], "--add_to",
                                 str(tmp_path / name / "old"),
                                 "--out", str(tmp_path / name / "new")] + extra)
    assert_same_tree(tmp_path / "local", tmp_path / "dask")


class EmitsFromFinishBundle(count_links.ExtractLinkPartials):
    """The count's extraction as it was: the last flush of a bundle emitted from
    ``finish_bundle``, which Beam's Dask runner drops."""

    def start_bundle(self):
        self.held = []

    def process(self, shard):
        self.held.extend(super().process(shard))

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue
        for element in self.held:
            yield WindowedValue(element, 0, [GlobalWindow()])


def test_a_runner_that_loses_outputs_fails_the_stage(corpus, cluster, tmp_path, monkeypatch,
                                                     capsys):
    """On the Dask runner, outputs emitted from finish_bundle vanish: the count that
    relied on them ends in one line naming the stage (exit 1), with no manifest."""
    monkeypatch.setattr(count_links, "ExtractLinkPartials", EmitsFromFinishBundle)
    out = tmp_path / "lossy"
    status = cli.main(["count", "--config", "5gram", "--train", corpus["train"], "--min_count",
                       "1", "--num_buckets", "4", "--out", str(out)] + cluster.runner_options())
    err = capsys.readouterr().err.strip()
    assert status == 1
    assert err.startswith("snm count: failed: count: ") and "never reported" in err, err
    assert len(err.splitlines()) == 1
    assert not (out / "manifest.json").exists()


def test_a_worker_killed_in_mid_count_leaves_the_right_count(corpus, tmp_path, reference_run):
    """SIGKILL a worker once it has sent part of its shard: Dask restarts it and re-runs the
    lost tasks, and the count has the local runner's bytes."""
    pause = tmp_path / "pause"
    pause.mkdir()
    killed = start_cluster(tmp_path, env={checkpoints.PAUSE_AT: "count.flushed",
                                          checkpoints.PAUSE_DIR: str(pause)})
    try:
        out = tmp_path / "counts"
        argv = ["--config", "5gram", "--train", corpus["train"], "--vocab",
                str(reference_run / "vocab" / "vocab.txt"), "--num_buckets", "4",
                "--batch_bytes", "2000", "--flush_links", "500", "--out", str(out)]
        proc = subprocess.Popen([sys.executable, "-m", "snm", "count"] + argv
                                + killed.runner_options(), cwd=REPO, env=killed.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.kill(wait_for(str(pause), "count.flushed"), signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        killed.stop()
    assert proc.returncode == 0, stderr.decode()[-2000:]
    local = tmp_path / "local"
    count_cmd.main(argv[:-1] + [str(local)])
    assert_same_tree(local, out)


def assert_same_tree(a, b):
    """The same files under ``a`` and ``b``, byte for byte; manifests and model cards up to
    the paths of ``a`` and ``b`` themselves."""
    def files(root):
        return sorted(os.path.relpath(os.path.join(d, n), root)
                      for d, _, names in os.walk(root) for n in names)
    assert files(a) == files(b)
    for name in files(a):
        if name.endswith("manifest.json"):
            assert normalized(a / name, a) == normalized(b / name, b), name
        elif name.endswith("model_card.md"):
            assert ((a / name).read_text().replace(str(a), "OUT")
                    == (b / name).read_text().replace(str(b), "OUT")), name
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


def run_dask_script(env, tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "run"),
           "SYNTH_SENTENCES": "2000",
           "EXTRA_ARGS": "--num_buckets 4 --metafeatures unlexicalized --epochs 2", **env}
    proc = subprocess.run(["bash", os.path.join(REPO, "launch", "dask.sh")], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--runner=dask" in proc.stderr
    assert (tmp_path / "run" / "eval.json").exists()
    return proc


def test_dask_script_joins_a_running_cluster(cluster, tmp_path):
    run_dask_script({"DASK_ADDRESS": cluster.address}, tmp_path)


@SLOW_SCRIPTS
def test_dask_script_starts_and_stops_its_own_cluster(tmp_path):
    proc = run_dask_script({}, tmp_path)
    assert "a local Dask cluster: 2 worker(s)" in proc.stderr


def private_mount_prefix(directory):
    """A command prefix that runs a process with an empty tmpfs over ``directory``
    (a mount namespace of its own), or None where this user cannot (not root)."""
    prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs none "{directory}" && exec "$@"', "sh"]
    probe = subprocess.run(prefix + ["true"], capture_output=True, check=False)
    return prefix if probe.returncode == 0 else None


def test_an_output_path_the_workers_cannot_see_is_refused(corpus, tmp_path, capsys):
    """Workers whose /tmp/... is not this machine's (their own mount of it, as on other
    machines): the stage refuses before it starts, naming the path and the workers."""
    shared = tmp_path / "seen-only-here"
    shared.mkdir()
    prefix = private_mount_prefix(shared)
    if prefix is None:
        pytest.skip("needs unshare and mount (root) to give the workers their own view")
    with LocalDaskCluster(tmp_path, workers=2, threads=1, worker_prefix=prefix,
                          env={"PYTHONPATH": WORKER_PATH}) as blind:
        out = shared / "counts"
        status = cli.main(["count", "--config", "5gram", "--train", corpus["train"],
                           "--min_count", "1", "--out", str(out)] + blind.runner_options())
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(f"snm count: error: {out / 'vocab'} is not visible from Dask "
                          "worker(s) tcp://"), err
    assert "give --out in object storage" in err and len(err.strip().splitlines()) == 1
    assert not (out / "vocab" / "manifest.json").exists()


def test_backoff_pruning_on_dask_writes_the_local_runners_bytes(reference_run, cluster,
                                                                 tmp_path):
    """The back-off form's steps, the cut's passes and the buckets' rewrite spread over two
    worker processes (partitions of 1 MiB of working memory): the local runner's files."""
    model = str(reference_run / "model")
    argv = ["--model", model, "--target_links", "4000", "--memory", "202M"]
    local, dask = tmp_path / "local" / "pruned", tmp_path / "dask" / "pruned"
    assert cli.main(["prune", *argv, "--out", str(local)]) == 0
    assert cli.main(["prune", *argv, "--out", str(dask), *cluster.runner_options()]) == 0
    assert_same_tree(local, dask)
