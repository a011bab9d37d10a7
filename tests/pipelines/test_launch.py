"""launch/: the Beam option builders, the shell scripts and the Airflow DAG.

Fast tests check that Beam knows every option each launcher builds and that
the scripts pass ``bash -n`` and wire the stages as intended (run with a
recording stand-in for Python, gsutil and the runners).  One end-to-end test
runs ``snm train`` on the PortableRunner with a local SDK worker pool (the
offline stand-in for Flink on Kubernetes) and compares every output file with
the default in-process runner.  The scripts' real end-to-end runs
(``local.sh``, two ``cron_retrain.sh`` runs) take ~10 s each and run with
``SNM_TEST_SCRIPTS=1``.
"""

import collections
import filecmp
import glob
import importlib.util
import json
import os
import shlex
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import (
    DirectOptions,
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)
from support import REPO
from support.runs import SLOW_SCRIPTS, assert_same_run, train_argv
from support.servers import beam_worker_pool

from pipelines import runners
from snm import launchers
from snm.commands import count as count_cmd
from snm.commands import train as train_cmd
from snm.commands import vocab as vocab_cmd
from snm_core.stages import manifests
from snm_core.text import synthetic

LAUNCH = os.path.join(REPO, "launch")
SCRIPTS = ("local.sh", "dask.sh", "dataflow.sh", "flink.sh", "cron_retrain.sh",
           "test_airflow.sh")


def beam_view(options):
    """PipelineOptions of ``options``, after checking that Beam knows every flag."""
    parsed = PipelineOptions(options)
    unknown = (set(parsed.get_all_options(retain_unknown_options=True))
               - set(parsed.get_all_options()))
    assert not unknown, f"options Beam does not know: {sorted(unknown)}"
    return parsed


# --- the option builders ----------------------------------------------------------------

def test_local_options():
    options = beam_view(launchers.local_options())
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    assert options.view_as(DirectOptions).direct_num_workers == 2
    options = beam_view(launchers.local_options(workers=5, mode="multi_threading"))
    assert options.view_as(DirectOptions).direct_num_workers == 5
    assert options.view_as(DirectOptions).direct_running_mode == "multi_threading"


def test_dask_options():
    pytest.importorskip("apache_beam.runners.dask.dask_runner")  # registers DaskOptions
    options = beam_view(runners.normalize(launchers.dask_options(address="10.0.0.5:8786")))
    assert options.view_as(StandardOptions).runner == runners.DASK_RUNNER
    assert options.get_all_options()["address"] == "10.0.0.5:8786"
    assert launchers.dask_options(address="tcp://h:1")[-1] == "--dask_address=tcp://h:1"
    with pytest.raises(ValueError, match="address must be HOST:PORT"):
        launchers.dask_options(address="no-port")


def test_dataflow_options():
    built = launchers.dataflow_options(
        project="my-project", region="europe-west1", temp_location="gs://my-bucket/tmp",
        setup_file=os.path.join(REPO, "setup.py"), job_name="snm-count", max_workers=20,
        machine_type="n2-highmem-4")
    options = beam_view(built)
    cloud = options.view_as(GoogleCloudOptions)
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
    assert (cloud.project, cloud.region, cloud.temp_location, cloud.job_name) == (
        "my-project", "europe-west1", "gs://my-bucket/tmp", "snm-count")
    setup = options.view_as(SetupOptions)
    assert setup.setup_file == os.path.join(REPO, "setup.py")
    assert not setup.save_main_session
    assert not any("save_main_session" in o for o in built)
    workers = options.view_as(WorkerOptions)
    assert (workers.max_num_workers, workers.machine_type) == (20, "n2-highmem-4")
    minimal = launchers.dataflow_options(project="example.com:my-project", region="us-central1",
                                         temp_location="gs://b-1/t", setup_file="setup.py")
    assert beam_view(minimal).view_as(WorkerOptions).max_num_workers is None
    assert len(minimal) == 5


def test_flink_options():
    options = beam_view(launchers.flink_options(flink_master="flink-jobmanager:8081",
                                                parallelism=8, flink_version="1.19"))
    flink = options.view_as(FlinkRunnerOptions)
    assert options.view_as(StandardOptions).runner == "FlinkRunner"
    assert (flink.flink_master, flink.parallelism, flink.flink_version) == (
        "flink-jobmanager:8081", 8, "1.19")
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == (
        "EXTERNAL", launchers.DEFAULT_WORKER_POOL)
    docker = beam_view(launchers.flink_options(flink_master="[local]", environment_type="DOCKER",
                                               environment_config="registry/snm-sdk:1"))
    assert docker.view_as(PortableOptions).environment_config == "registry/snm-sdk:1"
    loopback = launchers.flink_options(flink_master="http://jm:8081", environment_type="LOOPBACK")
    assert beam_view(loopback).view_as(PortableOptions).environment_config is None
    assert not any(o.startswith("--environment_config") for o in loopback)


def test_portable_options():
    built = launchers.portable_options(job_endpoint="localhost:8099", worker_pool="pool:50000")
    assert built == ["--runner=PortableRunner", "--job_endpoint=localhost:8099",
                     "--environment_type=EXTERNAL", "--environment_config=pool:50000"]
    portable = beam_view(built).view_as(PortableOptions)
    assert (portable.job_endpoint, portable.environment_type, portable.environment_config) == (
        "localhost:8099", "EXTERNAL", "pool:50000")
    embedded = beam_view(launchers.portable_options(job_endpoint="embed",
                                                    worker_pool="localhost:1234"))
    assert embedded.view_as(PortableOptions).job_endpoint == "embed"


DATAFLOW = dict(project="my-project", region="europe-west1", temp_location="gs://bucket/tmp",
                setup_file="/src/setup.py")


@pytest.mark.parametrize("function, kwargs, message", [
    (launchers.local_options, {"workers": 0}, "workers must be a positive integer"),
    (launchers.local_options, {"workers": True}, "workers must be a positive integer"),
    (launchers.local_options, {"mode": "threads"}, "mode must be one of"),
    (launchers.dataflow_options, {**DATAFLOW, "temp_location": "/tmp/beam"},
     "temp_location must be a Cloud Storage path gs://"),
    (launchers.dataflow_options, {**DATAFLOW, "temp_location": "gs://"}, "temp_location"),
    (launchers.dataflow_options, {**DATAFLOW, "project": "My Project"}, "project must be"),
    (launchers.dataflow_options, {**DATAFLOW, "region": "Europe"}, "region must be"),
    (launchers.dataflow_options, {**DATAFLOW, "setup_file": "/src/pyproject.toml"},
     "setup_file must be the package's setup.py"),
    (launchers.dataflow_options, {**DATAFLOW, "job_name": "SNM_count"}, "job_name must be"),
    (launchers.dataflow_options, {**DATAFLOW, "max_workers": 0}, "max_workers must be"),
    (launchers.dataflow_options, {**DATAFLOW, "machine_type": "big machine"},
     "machine_type must"),
    (launchers.flink_options, {"flink_master": "localhost"}, "flink_master must be HOST:PORT"),
    (launchers.flink_options, {"flink_master": "jm:8081", "parallelism": -1},
     "parallelism must be a positive integer"),
    (launchers.flink_options, {"flink_master": "jm:8081", "flink_version": "latest"},
     "flink_version must be"),
    (launchers.flink_options, {"flink_master": "jm:8081", "environment_type": "K8S"},
     "environment_type must be one of"),
    (launchers.flink_options, {"flink_master": "jm:8081", "environment_config": "pool"},
     r"environment_config \(the SDK worker pool address\) must be HOST:PORT"),
    (launchers.flink_options, {"flink_master": "jm:8081", "environment_type": "LOOPBACK",
                               "environment_config": "localhost:50000"}, "must be omitted"),
    (launchers.flink_options, {"flink_master": "jm:8081", "environment_type": "PROCESS"},
     "environment_config is required with PROCESS"),
    (launchers.portable_options, {"job_endpoint": "nowhere", "worker_pool": "localhost:50000"},
     r"job_endpoint \(or 'embed'\) must be HOST:PORT"),
    (launchers.portable_options, {"job_endpoint": "embed", "worker_pool": "localhost:99999"},
     "must be HOST:PORT"),
])
def test_bad_input_is_a_clear_value_error(function, kwargs, message):
    with pytest.raises(ValueError, match=message):
        function(**kwargs)


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        launchers.local_options(2)  # pylint: disable=too-many-function-args
    with pytest.raises(TypeError):
        launchers.portable_options("embed", "localhost:50000")


def run_launcher(*args):
    return subprocess.run([sys.executable, "-m", "snm.launchers", *args], capture_output=True,
                          text=True, cwd=REPO, check=False)


@pytest.mark.parametrize("args, expected", [
    (["local"], launchers.local_options()),
    (["local", "--workers", "3", "--mode", "in_memory"],
     launchers.local_options(workers=3, mode="in_memory")),
    (["dataflow", "--project", "my-project", "--region", "europe-west1", "--temp_location",
      "gs://bkt/tmp", "--setup_file", "setup.py", "--job_name", "snm-x-count",
      "--max_workers", "4", "--machine_type", "n2-standard-8"],
     launchers.dataflow_options(project="my-project", region="europe-west1",
                                temp_location="gs://bkt/tmp",
                                setup_file=os.path.join(REPO, "setup.py"), job_name="snm-x-count",
                                max_workers=4, machine_type="n2-standard-8")),
    (["flink", "--flink_master", "jm:8081", "--parallelism", "4"],
     launchers.flink_options(flink_master="jm:8081", parallelism=4)),
    (["flink", "--flink_master", "jm:8081", "--environment_type", "DOCKER",
      "--environment_config", "img:1"],
     launchers.flink_options(flink_master="jm:8081", environment_type="DOCKER",
                             environment_config="img:1")),
    (["portable", "--job_endpoint", "embed", "--worker_pool", "localhost:50000"],
     launchers.portable_options(job_endpoint="embed", worker_pool="localhost:50000")),
])
def test_main_prints_one_option_per_line(args, expected):
    proc = run_launcher(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == expected


@pytest.mark.parametrize("args, message", [
    (["dataflow", "--project", "my-project", "--region", "europe-west1", "--temp_location",
      "/tmp", "--setup_file", "setup.py"], "temp_location must be a Cloud Storage path"),
    (["dataflow", "--project", "my-project", "--region", "europe-west1", "--temp_location",
      "gs://bkt/tmp", "--setup_file", "no/such/setup.py"], "no such file"),
    (["flink", "--flink_master", "nowhere"], "flink_master must be"),
    (["portable", "--job_endpoint", "embed"], "required: --worker_pool"),
    (["yarn"], "invalid choice"),
])
def test_main_bad_input_exits_2_with_the_reason(args, message):
    proc = run_launcher(*args)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stdout == ""


# --- the shell scripts ------------------------------------------------------------------

@pytest.mark.parametrize("script", SCRIPTS)
def test_script_syntax(script):
    path = os.path.join(LAUNCH, script)
    proc = subprocess.run(["bash", "-n", path], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert "-m snm.launchers" in text


@pytest.mark.parametrize("script", ("dataflow.sh", "cron_retrain.sh", "airflow_dag.py"))
def test_scripts_no_longer_spell_out_the_stages(script):
    """The chain is `snm train`'s: no script runs vocab, count, join, fit, apply or eval
    itself (the retraining's additive count is `snm train --add_to`)."""
    with open(os.path.join(LAUNCH, script), encoding="utf-8") as f:
        text = f.read()
    assert "-m snm train" in text or '"-m", "snm", "train"' in text
    for stage in ("vocab", "count", "join", "fit", "apply", "eval"):
        assert f"-m snm {stage} " not in text and f'"snm", "{stage}"' not in text, stage
    assert "train_on_counts" not in text
    assert not os.path.exists(os.path.join(LAUNCH, "train_on_counts.py"))


FAKE_PYTHON = """#!@PYTHON@
# Stands in for PYTHON in the scripts: runs snm.launchers and scripts on stdin for
# real, records every other command (one JSON list a line) and pretends it
# succeeded, leaving under a local --out the files the real command writes last.
#   FAKE_FAIL=WORD       the command `snm WORD` (train) fails
#   FAKE_INCOMPLETE=1    snm train succeeds but writes no eval.json
#   FAKE_PPL=X           test perplexity in eval.json [10.0]
import json, os, runpy, sys
args = sys.argv[1:]
if args[:2] == ["-m", "snm.launchers"]:
    sys.argv = ["snm.launchers"] + args[2:]
    runpy.run_module("snm.launchers", run_name="__main__")
    sys.exit(0)
if args[:1] == ["-"]:  # cron_retrain.sh's quality gate
    sys.argv = args
    exec(compile(sys.stdin.read(), "<stdin>", "exec"))
    sys.exit(0)
if args[:1] == ["-c"]:  # the scripts' import checks
    sys.exit(0)
word = args[2] if args[:2] == ["-m", "snm"] else os.path.basename(args[0])
if word == "validate":  # what snm validate finds missing of a run that `train` below wrote
    missing = [n for n in ("count/manifest.json", "model/manifest.json", "eval.json")
               if not os.path.isfile(os.path.join(args[3], n))]
    print(f"{args[3]}: {len(missing)} problem(s): {', '.join(missing)} missing")
    sys.exit(2 if missing else 0)
with open(@LOG@, "a") as f:
    f.write(json.dumps(args) + "\\n")
if os.environ.get("FAKE_FAIL") == word:
    sys.exit(1)
out = args[args.index("--out") + 1] if "--out" in args else ""


def write(name, text):
    path = os.path.join(out, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


if out and "://" not in out and word == "train":
    write("count/vocab.txt", "a\\n")
    write("count/manifest.json", json.dumps({"kind": "count", "add_to": "--add_to" in args}))
    write("model/manifest.json", json.dumps({"kind": "model"}))
    if not os.environ.get("FAKE_INCOMPLETE"):
        ppl = float(os.environ.get("FAKE_PPL", "10"))
        write("eval.json", json.dumps({"adjusted": {"perplexity": ppl},
                                       "unadjusted": {"perplexity": 2 * ppl}}))
"""
FAKE_GSUTIL = """#!/usr/bin/env bash
printf '%s\\n' "$*" | sed 's/^/gsutil /' >> {log}
"""


@pytest.fixture
def fake_tools(tmp_path):
    """``(env, read_log)``: PYTHON and gsutil replaced by recorders."""
    log = str(tmp_path / "commands.log")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(FAKE_PYTHON.replace("@PYTHON@", sys.executable).replace("@LOG@", repr(log)))
    gsutil = bin_dir / "gsutil"
    gsutil.write_text(FAKE_GSUTIL.format(log=log))
    for path in (python, gsutil):
        path.chmod(0o755)
    env = {**os.environ, "PYTHON": str(python), "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": REPO}

    def read_log():
        if not os.path.exists(log):
            return []
        with open(log, encoding="utf-8") as f:
            lines = f.read().splitlines()
        os.remove(log)  # each call returns the commands since the last one
        return [line if line.startswith("gsutil ") else json.loads(line) for line in lines]
    return env, read_log


def option(argv, name):
    """Value of ``--name=value`` or ``--name value`` in ``argv`` (None if absent)."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}":
            return argv[i + 1]
    return None


def option_values(argv, name):
    """Every value of ``--name value`` in ``argv``."""
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == f"--{name}"]


def test_dataflow_script_runs_snm_train_on_dataflow(fake_tools, tmp_path):
    env, read_log = fake_tools
    env.update(PROJECT="my-project", REGION="europe-west1", TEMP_LOCATION="gs://bkt/tmp",
               TRAIN="web=gs://bkt/corpus/web-*.gz news=gs://bkt/corpus/news-*.gz",
               HELDOUT="gs://bkt/dev.txt", TEST="test.txt", JOB_NAME="snm-test",
               MAX_WORKERS="10", EXTRA_ARGS="--epochs 2 --tagged")
    proc = subprocess.run(["bash", os.path.join(LAUNCH, "dataflow.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (train,) = read_log()  # one command, no gsutil copies
    assert train[:3] == ["-m", "snm", "train"]
    assert option_values(train, "train") == ["web=gs://bkt/corpus/web-*.gz",
                                       "news=gs://bkt/corpus/news-*.gz"]
    assert option(train, "out") == "gs://bkt/snm/run"
    assert option(train, "heldout") == "gs://bkt/dev.txt"
    assert option(train, "test") == f"{tmp_path}/test.txt"
    assert (option(train, "min_count"), option(train, "num_buckets")) == ("2", "64")
    assert option(train, "epochs") == "2" and "--tagged" in train
    beam_args = [a for a in train if a.startswith("--") and "=" in a]
    dataflow = beam_view(beam_args)
    assert dataflow.view_as(StandardOptions).runner == "DataflowRunner"
    cloud = dataflow.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location, cloud.job_name) == (
        "my-project", "europe-west1", "gs://bkt/tmp", "snm-test")
    assert dataflow.view_as(WorkerOptions).max_num_workers == 10
    assert dataflow.view_as(SetupOptions).setup_file == os.path.join(REPO, "setup.py")


@pytest.mark.parametrize("settings, message", [
    ({"OUT": "/tmp/run"}, "OUT must be a gs:// directory"),
    ({"TRAIN": "corpus/*.gz", "HELDOUT": "gs://bkt/dev.txt", "TEST": "t.txt"},
     "corpus/*.gz: TRAIN and HELDOUT must be gs:// paths"),
    ({"TRAIN": "web=gs://bkt/*.gz", "HELDOUT": "dev.txt", "TEST": "t.txt"},
     "dev.txt: TRAIN and HELDOUT must be gs:// paths"),
])
def test_dataflow_script_refuses_local_paths_the_workers_read(fake_tools, settings, message):
    env, read_log = fake_tools
    env.update(PROJECT="my-project", TEMP_LOCATION="gs://bkt/tmp", **settings)
    proc = subprocess.run(["bash", os.path.join(LAUNCH, "dataflow.sh")], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and message in proc.stderr
    assert read_log() == []


def test_flink_script_runs_snm_train_on_flink(fake_tools, tmp_path):
    env, read_log = fake_tools
    env.update(FLINK_MASTER="flink-jobmanager:8081", PARALLELISM="4", FLINK_VERSION="1.19",
               TRAIN="corpus/*.txt", HELDOUT="dev.txt", TEST="/data/test.txt", OUT="run",
               EXTRA_ARGS="--epochs 1", EXTRA_BEAM_OPTS="--max_parallelism=64")
    proc = subprocess.run(["bash", os.path.join(LAUNCH, "flink.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    (train,) = read_log()
    assert train[:3] == ["-m", "snm", "train"]
    assert option(train, "train") == f"{tmp_path}/corpus/*.txt"  # absolute: workers' cwd differs
    assert option(train, "heldout") == f"{tmp_path}/dev.txt"
    assert option(train, "test") == "/data/test.txt"
    assert option(train, "out") == f"{tmp_path}/run"
    assert option(train, "epochs") == "1"
    beam_args = [a for a in train if a.startswith("--") and "=" in a]
    flink = beam_view(beam_args)
    assert flink.view_as(StandardOptions).runner == "FlinkRunner"
    assert flink.view_as(FlinkRunnerOptions).flink_master == "flink-jobmanager:8081"
    assert flink.view_as(FlinkRunnerOptions).parallelism == 4
    assert flink.view_as(FlinkRunnerOptions).max_parallelism == 64
    assert flink.view_as(PortableOptions).environment_config == "localhost:50000"


def test_scripts_stop_on_bad_launcher_input(fake_tools, tmp_path):
    env, read_log = fake_tools
    env.update(FLINK_MASTER="no-port", TRAIN="a.txt", HELDOUT="b.txt", TEST="c.txt")
    proc = subprocess.run(["bash", os.path.join(LAUNCH, "flink.sh")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "flink_master must be" in proc.stderr
    assert read_log() == []  # snm train never started


# --- cron_retrain.sh with the recording stand-in ------------------------------------------

@pytest.fixture
def retrain(fake_tools, tmp_path):
    """``(run, root, incoming, read_log)``: ``run(**env)`` runs cron_retrain.sh once."""
    env, read_log = fake_tools
    root = tmp_path / "root"
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    env.update(ROOT=str(root), INCOMING=f"{incoming}/*.txt", HELDOUT="dev.txt",
               TEST="/data/test.txt", LAUNCHER="local --workers 3",
               FIT_ARGS="--metafeatures unlexicalized --epochs 1")

    def run(expect=0, **settings):
        proc = subprocess.run(["bash", os.path.join(LAUNCH, "cron_retrain.sh")],
                              env={**env, **settings}, cwd=tmp_path, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == expect, proc.stderr
        return proc.stderr
    return run, root, incoming, read_log


def add_shard(incoming, name):
    path = incoming / name
    path.write_text("a b c\n")
    return str(path)


def counted(root):
    with open(root / "counted.txt", encoding="utf-8") as f:
        return sorted(f.read().splitlines())


def assert_local_beam_options(argv, workers):
    assert argv[-3:] == launchers.local_options(workers=workers)


def test_cron_retrain_first_run_is_snm_train(retrain, tmp_path):
    run, root, incoming, read_log = retrain
    shards = [add_shard(incoming, f"shard-{i}.txt") for i in range(2)]
    run()
    (train,) = read_log()
    current = os.path.realpath(root / "current")
    assert os.readlink(root / "current").startswith("runs/")
    assert train[:3] == ["-m", "snm", "train"]
    assert option_values(train, "train") == [f"{current}/shards/*"]
    assert sorted(os.path.realpath(p) for p in glob.glob(f"{current}/shards/*")) == shards
    assert option(train, "out") == current
    assert option(train, "heldout") == f"{tmp_path}/dev.txt"
    assert option(train, "test") == "/data/test.txt"
    assert (option(train, "min_count"), option(train, "num_buckets")) == ("2", "16")
    assert (option(train, "metafeatures"), option(train, "epochs")) == ("unlexicalized", "1")
    assert option(train, "config") == "5gram" and "--tagged" not in train
    assert_local_beam_options(train, 3)
    assert counted(root) == shards
    assert not os.path.lexists(root / "previous")


def assert_added_training(train, run, old):
    """``train`` is one ``snm train --add_to OLD/count`` of ``run``'s new shards."""
    assert train[:3] == ["-m", "snm", "train"]
    assert option(train, "add_to") == f"{old}/count"
    assert option(train, "out") == run
    assert option_values(train, "train") in ([f"{run}/shards/*"], [f"web={run}/shards/*"])
    # The vocabulary and buckets are OLD's: --add_to excludes --vocab and --min_count.
    for name in ("vocab", "min_count", "num_buckets", "force"):
        assert option(train, name) is None and f"--{name}" not in train, name


def test_cron_retrain_adds_the_new_shards_with_snm_train_add_to(retrain, tmp_path):
    run, root, incoming, read_log = retrain
    shards = [add_shard(incoming, "shard-0.txt")]
    run()
    read_log()
    first = os.path.realpath(root / "current")
    shards.append(add_shard(incoming, "shard-1.txt"))
    assert "1 new shard(s), adding to" in run()
    (train,) = read_log()  # one command: no separate count
    second = os.path.realpath(root / "current")
    assert second != first and os.path.realpath(root / "previous") == first
    assert_added_training(train, second, first)
    assert [os.path.realpath(p) for p in glob.glob(f"{second}/shards/*")] == shards[1:]
    assert option(train, "heldout") == f"{tmp_path}/dev.txt"
    assert option(train, "test") == "/data/test.txt"
    assert option(train, "config") == "5gram" and "--tagged" not in train
    assert (option(train, "metafeatures"), option(train, "epochs")) == ("unlexicalized", "1")
    assert_local_beam_options(train, 3)
    assert counted(root) == shards
    # Nothing new: nothing runs, nothing changes.
    assert "no new shards" in run()
    assert read_log() == [] and os.path.realpath(root / "current") == second
    # FULL=1 counts every shard afresh with snm train.
    run(FULL="1")
    (train,) = read_log()
    third = os.path.realpath(root / "current")
    assert train[:3] == ["-m", "snm", "train"] and option(train, "out") == third
    assert sorted(os.path.realpath(p) for p in glob.glob(f"{third}/shards/*")) == shards
    assert sorted(os.listdir(root / "runs")) == sorted(
        os.path.basename(p) for p in (second, third))  # older runs pruned


@pytest.mark.parametrize("failure", [{"FAKE_FAIL": "train"},
                                     {"FAKE_INCOMPLETE": "1"},
                                     {"FAKE_PPL": "10.5", "MAX_PPL_RATIO": "1.02"}])
def test_cron_retrain_switches_current_only_after_a_complete_better_model(retrain, failure):
    run, root, incoming, read_log = retrain
    shards = [add_shard(incoming, "shard-0.txt")]
    run()
    first = os.path.realpath(root / "current")
    add_shard(incoming, "shard-1.txt")
    stderr = run(expect=1, **failure)
    assert os.path.realpath(root / "current") == first
    assert not os.path.lexists(root / "previous")
    assert counted(root) == shards
    if "FAKE_INCOMPLETE" in failure:
        assert "eval.json missing" in stderr and "is not whole after snm train; current model " \
            "unchanged" in stderr
    if "MAX_PPL_RATIO" in failure:
        assert "test perplexity: current 10.000, new 10.500" in stderr
    read_log()
    run(FAKE_PPL="9.5", MAX_PPL_RATIO="1.02")  # the next run retries the shard
    (train,) = read_log()
    assert_added_training(train, os.path.realpath(root / "current"), first)
    assert os.path.realpath(root / "previous") == first
    assert counted(root) == sorted(shards + [str(incoming / "shard-1.txt")])


def test_cron_retrain_tagged_shards(retrain):
    run, root, incoming, read_log = retrain
    add_shard(incoming, "shard-0.txt")
    run(TAG="web", VOCAB="vocab.txt")
    (train,) = read_log()
    current = os.path.realpath(root / "current")
    assert option_values(train, "train") == [f"web={current}/shards/*"] and "--tagged" in train
    assert option(train, "vocab").endswith("/vocab.txt") and option(train, "min_count") is None
    add_shard(incoming, "shard-1.txt")
    run(TAG="web", VOCAB="vocab.txt")  # VOCAB is for a first run only
    (train,) = read_log()
    second = os.path.realpath(root / "current")
    assert_added_training(train, second, current)
    assert option_values(train, "train") == [f"web={second}/shards/*"] and "--tagged" in train


@pytest.fixture(scope="module")
def worker_pool(tmp_path_factory):
    """A Beam SDK worker pool of this Python, started in another working directory."""
    tmp_path = tmp_path_factory.mktemp("worker-pool")
    cwd = tmp_path / "pool-cwd"
    cwd.mkdir()
    with beam_worker_pool(sys.executable, cwd, tmp_path / "worker_pool.log") as address:
        yield {"address": address, "cwd": cwd, "log": tmp_path / "worker_pool.log"}


def test_portable_runner_with_a_worker_pool_matches_the_default_runner(
        corpus, reference_run, worker_pool, tmp_path):
    out = tmp_path / "portable"
    options = launchers.portable_options(job_endpoint="embed",
                                         worker_pool=worker_pool["address"])
    assert train_cmd.main(train_argv(corpus, out) + options) == 0
    assert_same_run(reference_run, out)
    # The stages really ran in the pool's workers, not in this process.
    assert b"Starting worker with command" in worker_pool["log"].read_bytes()


def test_portable_runner_with_relative_paths(corpus, worker_pool, tmp_path, monkeypatch):
    """Relative ``--train`` and ``--out``, given in a working directory the pool's workers
    do not share: the workers read the text and write the output where the launcher
    meant, and nothing lands beside their own working directory."""
    monkeypatch.chdir(corpus["root"])
    out = os.path.relpath(tmp_path / "vocab", corpus["root"])
    assert vocab_cmd.main(["--train", os.path.basename(corpus["train"]), "--out", out]
                          + launchers.portable_options(job_endpoint="embed",
                                                       worker_pool=worker_pool["address"])) == 0
    with open(corpus["train"], encoding="utf-8") as f:
        words = collections.Counter(f.read().split())
    manifest = manifests.Vocab.read(str(tmp_path / "vocab"))
    assert manifest.totals["tokens"] == sum(words.values())
    vocab = (tmp_path / "vocab" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert set(vocab[3:]) == {w for w, n in words.items() if n >= 2}  # --min_count 2
    assert not list(worker_pool["cwd"].parent.rglob("vocab.txt"))  # not beside the workers
    assert b"Starting worker with command" in worker_pool["log"].read_bytes()


# --- the scripts end to end (SNM_TEST_SCRIPTS=1) --------------------------------------------

@SLOW_SCRIPTS
def test_local_script_end_to_end(corpus, reference_run, tmp_path):
    out = tmp_path / "local"
    env = {**os.environ, "PYTHON": sys.executable, "TRAIN": corpus["train"],
           "HELDOUT": corpus["dev"], "TEST": corpus["test"], "OUT": str(out),
           "EXTRA_ARGS": "--num_buckets 4 --metafeatures unlexicalized --epochs 2"}
    proc = subprocess.run(["bash", os.path.join(LAUNCH, "local.sh")], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--direct_running_mode=multi_processing --direct_num_workers=2" in proc.stderr
    assert_same_run(reference_run, out)


@SLOW_SCRIPTS
def test_cron_retrain_adds_new_shards_and_switches_current(corpus, tmp_path):
    root = tmp_path / "retrain"
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    sentences = synthetic.generate(600, seed=9)
    shards = []
    for i in range(3):
        shards.append(str(incoming / f"shard-{i}.txt"))
        with open(shards[-1] + ("" if i < 2 else ".later"), "w", encoding="utf-8") as f:
            f.write("".join(s + "\n" for s in sentences[i * 200:(i + 1) * 200]))
    env = {**os.environ, "PYTHON": sys.executable, "ROOT": str(root),
           "INCOMING": f"{incoming}/*.txt", "HELDOUT": corpus["dev"], "TEST": corpus["test"],
           "NUM_BUCKETS": "4", "LAUNCHER": "local --mode in_memory --workers 1",
           "FIT_ARGS": "--metafeatures unlexicalized --epochs 1"}

    def retrain():
        proc = subprocess.run(["bash", os.path.join(LAUNCH, "cron_retrain.sh")], env=env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    retrain()
    first = os.path.realpath(root / "current")
    assert not os.path.lexists(root / "previous")
    os.rename(shards[2] + ".later", shards[2])
    output = retrain()
    assert "1 new shard(s), adding to" in output
    second = os.path.realpath(root / "current")
    # One snm train added the new shard to the first run's counts, with their vocabulary.
    assert f"--add_to {first}/counts" in output and " -m snm count " not in output
    assert "vocab   given" in output and not os.path.exists(os.path.join(second, "vocab"))
    with open(os.path.join(second, "stages.json"), encoding="utf-8") as f:
        assert set(json.load(f)) == {"count", "join", "fit", "apply", "eval"}
    assert second != first and os.path.realpath(root / "previous") == first
    assert os.readlink(root / "current").startswith("runs/")
    with open(root / "counted.txt", encoding="utf-8") as f:
        assert sorted(f.read().splitlines()) == shards
    # The added counts equal counting all three shards at once with the same vocabulary.
    count_cmd.main(["--config", "5gram", "--vocab", os.path.join(first, "count", "vocab.txt"),
                     "--num_buckets", "4", "--out", str(tmp_path / "all")]
                    + sum((["--train", s] for s in shards), []))
    names = [n for n in os.listdir(tmp_path / "all") if n.endswith((".parquet", ".txt"))]
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "all", os.path.join(second, "count"),
                                           names, shallow=False)
    assert not mismatch and not errors
    for run in (first, second):
        with open(os.path.join(run, "eval.json"), encoding="utf-8") as f:
            assert json.load(f)["adjusted"]["perplexity"] > 1
        assert os.path.isfile(os.path.join(run, "model", "manifest.json"))
    assert "no new shards" in retrain()
    assert os.path.realpath(root / "current") == second
    assert sorted(os.listdir(root / "runs")) == sorted(
        os.path.basename(p) for p in (first, second))


# --- the Airflow DAG ----------------------------------------------------------------------

def load_dag(tmp_path, monkeypatch, **settings):
    """The module of launch/airflow_dag.py, with SNM_* settings from ``settings``."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    monkeypatch.setenv("SNM_ROOT", str(tmp_path / "root"))
    for name, value in settings.items():
        monkeypatch.setenv(f"SNM_{name.upper()}", value)
    spec = importlib.util.spec_from_file_location("snm_airflow_dag",
                                                  os.path.join(LAUNCH, "airflow_dag.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_airflow_dag_module_imports_without_airflow(tmp_path, monkeypatch):
    """Without Airflow (as here unless it is installed) ``dag`` is None; the rest works."""
    module = load_dag(tmp_path, monkeypatch)
    assert (module.dag is None) == (importlib.util.find_spec("airflow") is None)
    assert module.RUN in module.train_all_command()


class FakeTaskInstance:  # pylint: disable=too-few-public-methods
    def __init__(self):
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def test_airflow_dag_tasks_run_snm_train(fake_tools, tmp_path, monkeypatch):
    """plan, the branch's commands (run with the recording stand-in) and switch, three times."""
    env, read_log = fake_tools
    root = tmp_path / "root"
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    module = load_dag(tmp_path, monkeypatch, python=env["PYTHON"],
                      incoming=f"{incoming}/*.txt", heldout="/data/dev.txt",
                      test="/data/test.txt", launcher="local --workers 3",
                      fit_args="--epochs 1", num_buckets="8")

    def task(command):
        proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        (argv,) = read_log()
        assert_local_beam_options(argv, 3)
        assert option(argv, "epochs") in ("1", None)
        return argv

    def plan():
        ti = FakeTaskInstance()
        branch = module.plan_run(str(root), module.INCOMING, module.FULL, ti=ti)
        return branch, ti.xcom.get("run"), ti.xcom.get("old")

    shards = [add_shard(incoming, "shard-0.txt"), add_shard(incoming, "shard-1.txt")]
    branch, run, old = plan()
    assert (branch, old) == ("train_all", "")
    with pytest.raises(RuntimeError, match="incomplete"):  # before the model exists
        module.switch_current(str(root), run)
    train = task(module.train_all_command(run=run))
    assert train[:3] == ["-m", "snm", "train"]
    assert (option(train, "out"), option_values(train, "train")) == (run, [f"{run}/shards/*"])
    assert (option(train, "heldout"), option(train, "test")) == ("/data/dev.txt",
                                                                 "/data/test.txt")
    assert (option(train, "min_count"), option(train, "num_buckets")) == ("2", "8")
    module.switch_current(str(root), run)
    assert os.path.realpath(root / "current") == run and counted(root) == shards

    shards.append(add_shard(incoming, "shard-2.txt"))
    branch, second, old = plan()
    assert (branch, old) == ("train_added", f"{run}/count")
    train = task(module.train_added_command(run=second, old=old))
    assert_added_training(train, second, run)
    assert (option(train, "heldout"), option(train, "test")) == ("/data/dev.txt",
                                                                 "/data/test.txt")
    module.switch_current(str(root), second)
    assert os.path.realpath(root / "current") == second
    assert os.path.realpath(root / "previous") == run
    assert counted(root) == shards
    assert plan() == ("no_new_shards", None, None)


def test_airflow_dag_tagged_commands(tmp_path, monkeypatch):
    module = load_dag(tmp_path, monkeypatch, tag="web", vocab="/data/vocab.txt")
    train_all = shlex.split(module.train_all_command(run="/r/x").splitlines()[-1])
    assert option_values(train_all, "train") == ["web=/r/x/shards/*"] and "--tagged" in train_all
    assert option(train_all, "vocab") == "/data/vocab.txt"
    added = shlex.split(module.train_added_command(run="/r/x", old="/r/w/count")
                        .splitlines()[-1])
    assert added[0] == module.PYTHON
    assert_added_training(added[1:], "/r/x", "/r/w")
    assert option_values(added, "train") == ["web=/r/x/shards/*"] and "--tagged" in added


def test_airflow_dag(tmp_path, monkeypatch):
    pytest.importorskip("airflow")
    module = load_dag(tmp_path, monkeypatch)
    dag = module.dag
    assert dag.dag_id == "snm_retrain"
    assert set(dag.task_ids) == {"plan", "no_new_shards", "train_all", "train_added", "switch"}
    upstream = {t.task_id: set(t.upstream_task_ids) for t in dag.tasks}
    assert upstream["train_all"] == upstream["train_added"] == upstream["no_new_shards"] == {
        "plan"}
    assert upstream["switch"] == {"train_all", "train_added"}
    assert dag.get_task("switch").trigger_rule == "none_failed_min_one_success"
    assert dag.get_task("train_all").bash_command == module.train_all_command()
    assert dag.get_task("train_added").bash_command == module.train_added_command()
    assert "python -m snm train" in dag.doc_md or "snm train" in dag.doc_md
