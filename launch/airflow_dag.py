"""Airflow DAG ``snm_retrain``: scheduled SNM retraining, the same run as launch/cron_retrain.sh.

Copy or symlink this file into Airflow's dags folder.  It needs Airflow 3
(or 2) with its standard provider (``pip install 'apache-airflow>=3'``), not
snm: the training runs as ``python -m snm train`` with the Python named by
``SNM_PYTHON``, which has snm installed.  Without Airflow the module still
imports (``dag`` is None), so its commands and functions can be tested.

Tasks::

    plan ─┬─> train_all ───┬─> switch
          ├─> train_added ─┘
          └─> no_new_shards

* ``plan`` lists the training shards matching ``INCOMING`` that are not in
  ``ROOT/counted.txt``, links them into ``ROOT/runs/RUN/shards/`` and picks
  the branch: ``train_all`` the first time (or with ``FULL``), the additive
  ``train_added`` after that, ``no_new_shards`` when nothing is new (every
  other task is then skipped).
* ``train_all``: ``python -m snm train --train 'RUN/shards/*' --out RUN``,
  every stage (vocab, count, join, fit, apply, eval) as ``snm train`` runs
  them, with the Beam options that ``python -m snm.launchers LAUNCHER``
  prints (computed when the task runs).
* ``train_added``: ``python -m snm train --add_to OLD --train
  'RUN/shards/*' --out RUN``, OLD being the current model's count directory:
  counts are additive, so ``snm train`` counts only the new shards, adds OLD's
  counts into ``RUN/count`` and goes on from the sum (join, fit, apply, eval).  The
  same arguments and Beam options as ``train_all``, but no ``--vocab``,
  ``--min_count`` or ``--num_buckets``: the vocabulary and buckets are
  OLD's.
* ``switch`` (only after a successful ``train_*``): checks with ``python -m
  snm validate RUN`` that every stage of the run is whole, then ``ROOT/previous`` -> the
  old model, ``ROOT/current`` -> the new one (each symlink replaced
  atomically by a rename), the shards added to ``counted.txt``, runs other
  than current and previous deleted.  A failed run switches nothing; its
  shards are new again next time.

``ROOT`` must be a path that every task (and, with a cluster runner, every
Beam worker) sees.  Settings are the constants below, read from the
environment of the Airflow processes with defaults; every place they are used
is a templated field, so a constant can also be an Airflow Variable template
such as ``"{{ var.value.snm_root }}"``.
"""

import datetime
import glob
import json
import os
import shlex
import shutil
import subprocess

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.providers.standard.operators.python import BranchPythonOperator, PythonOperator
    from airflow.sdk import DAG
except ImportError:
    try:  # Airflow 2
        from airflow import DAG
        from airflow.operators.bash import BashOperator
        from airflow.operators.empty import EmptyOperator
        from airflow.operators.python import BranchPythonOperator, PythonOperator
    except ImportError:  # no Airflow: the commands and functions below still import
        DAG = None

#: The snm source tree (for the default SNM_PYTHON): this file's ../ by default.
REPO = os.environ.get("SNM_REPO",
                      os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
#: The Python that has snm installed.
PYTHON = os.environ.get("SNM_PYTHON", os.path.join(REPO, ".venv", "bin", "python"))
#: State directory: runs/, current, previous, counted.txt (see cron_retrain.sh).
ROOT = os.environ.get("SNM_ROOT", "/srv/snm")
#: Glob of the training shards; those not in ROOT/counted.txt are new.
INCOMING = os.environ.get("SNM_INCOMING", os.path.join(ROOT, "incoming", "*.txt"))
HELDOUT = os.environ.get("SNM_HELDOUT", os.path.join(ROOT, "dev.txt"))
TEST = os.environ.get("SNM_TEST", os.path.join(ROOT, "test.txt"))
#: Configuration (a later run must keep it); vocabulary file, else the
#: threshold, and buckets of a first run.
CONFIG = os.environ.get("SNM_CONFIG", "5gram")
VOCAB = os.environ.get("SNM_VOCAB", "")
MIN_COUNT = os.environ.get("SNM_MIN_COUNT", "2")
NUM_BUCKETS = os.environ.get("SNM_NUM_BUCKETS", "16")
#: Corpus tag of the shards: ``snm train --tagged`` with ``--train TAG=...``.
TAG = os.environ.get("SNM_TAG", "")
#: "1": count every shard afresh instead of adding to the current counts.
FULL = os.environ.get("SNM_FULL", "0")
#: More ``snm train`` arguments (fit options), word-split, e.g. "--epochs 3".
FIT_ARGS = os.environ.get("SNM_FIT_ARGS", "")
#: Arguments of ``python -m snm.launchers``: the runner of the Beam stages,
#: e.g. "flink --flink_master jm:8081" or
#: "portable --job_endpoint host:8099 --worker_pool localhost:50000".
LAUNCHER = os.environ.get("SNM_LAUNCHER", "local --workers 2")
SCHEDULE = os.environ.get("SNM_SCHEDULE", "15 3 * * *")

RUN = '{{ ti.xcom_pull(task_ids="plan", key="run") }}'
OLD = '{{ ti.xcom_pull(task_ids="plan", key="old") }}'


# --- the commands ---------------------------------------------------------------------------

def _q(value):
    return shlex.quote(str(value))


def _prelude():
    """Bash that sets ``beam`` (the launcher's Beam options) and ``extra`` (FIT_ARGS)."""
    return "\n".join([
        "set -euo pipefail",
        f"read -r -a launcher <<< {_q(LAUNCHER)}",
        f'options="$({_q(PYTHON)} -m snm.launchers "${{launcher[@]}}")"',
        'mapfile -t beam <<< "$options"',
        f"read -r -a extra <<< {_q(FIT_ARGS)}",
        "set -x",
    ]) + "\n"


def _train_args(run):
    spec = f"{run}/shards/*"
    args = ["--config", CONFIG, "--train", f"{TAG}={spec}" if TAG else spec,
            "--heldout", HELDOUT, "--test", TEST, "--out", run]
    return args + (["--tagged"] if TAG else [])


def _command(words, tail):
    return " ".join(_q(w) for w in words) + " " + tail


EXTRA_AND_BEAM = '${extra[@]+"${extra[@]}"} "${beam[@]}"'


def train_all_command(run=RUN):
    """``train_all``: ``snm train`` with every stage, new vocabulary and counts."""
    vocab = ["--vocab", VOCAB] if VOCAB else ["--min_count", MIN_COUNT]
    return _prelude() + _command(
        [PYTHON, "-m", "snm", "train"] + _train_args(run) + vocab
        + ["--num_buckets", NUM_BUCKETS], EXTRA_AND_BEAM)


def train_added_command(run=RUN, old=OLD):
    """``train_added``: ``snm train`` on the new shards' counts added to the count
    directory ``old``."""
    return _prelude() + _command(
        [PYTHON, "-m", "snm", "train"] + _train_args(run) + ["--add_to", old], EXTRA_AND_BEAM)


# --- plan and switch ------------------------------------------------------------------------

def plan_run(root, incoming, full, **context):
    """Find the new shards, make the run directory; return the branch to follow."""
    os.makedirs(os.path.join(root, "runs"), exist_ok=True)
    counted_path = os.path.join(root, "counted.txt")
    counted = set()
    if os.path.isfile(counted_path):
        with open(counted_path, encoding="utf-8") as f:
            counted = set(f.read().splitlines())
    current = os.path.join(root, "current")
    old = ""  # the current model's count directory (counts/: runs of older releases)
    for name in ("count", "counts"):
        if str(full) != "1" and os.path.isfile(os.path.join(current, name, "manifest.json")):
            old = os.path.join(os.path.realpath(current), name)
            break
    shards = sorted(os.path.abspath(p) for p in glob.glob(incoming) if os.path.isfile(p))
    if old:
        shards = [p for p in shards if p not in counted]
    if not shards:
        print(f"no new shards matching {incoming}; current model unchanged")
        return "no_new_shards"
    run = os.path.join(root, "runs", datetime.datetime.now(datetime.timezone.utc)
                       .strftime("%Y%m%dT%H%M%SZ"))
    if os.path.exists(run):
        run += f"-{os.getpid()}"
    os.makedirs(os.path.join(run, "shards"))
    for i, path in enumerate(shards):
        os.symlink(path, os.path.join(run, "shards", f"{i:06d}-{os.path.basename(path)}"))
    with open(os.path.join(run, "plan.json"), "w", encoding="utf-8") as f:
        json.dump({"old": old, "shards": shards}, f, indent=2)
    context["ti"].xcom_push(key="run", value=run)
    context["ti"].xcom_push(key="old", value=old)
    print(f"run {run}: {len(shards)} new shard(s)" + (f", adding to {old}" if old else ""))
    return "train_added" if old else "train_all"


def _replace_symlink(target, link):
    tmp = link + ".new"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)  # rename(2): readers see the old or the new target


def switch_current(root, run):
    """previous -> old current, current -> ``run``; record the shards; prune old runs."""
    checked = subprocess.run([PYTHON, "-m", "snm", "validate", run], capture_output=True,
                             text=True, check=False)
    if checked.returncode:
        raise RuntimeError(f"{run} is incomplete ({checked.stdout.strip()} "
                           f"{checked.stderr.strip()}); current model unchanged")
    with open(os.path.join(run, "plan.json"), encoding="utf-8") as f:
        plan = json.load(f)
    current = os.path.join(root, "current")
    if os.path.islink(current):
        _replace_symlink(os.readlink(current), os.path.join(root, "previous"))
    _replace_symlink(os.path.relpath(run, root), current)
    counted_path = os.path.join(root, "counted.txt")
    counted = []
    if plan["old"] and os.path.isfile(counted_path):
        with open(counted_path, encoding="utf-8") as f:
            counted = f.read().splitlines()
    with open(counted_path + ".new", "w", encoding="utf-8") as f:
        f.write("".join(p + "\n" for p in counted + plan["shards"]))
    os.replace(counted_path + ".new", counted_path)
    with open(os.path.join(run, "eval.json"), encoding="utf-8") as f:
        report = json.load(f)
    print(f"current -> {run}: test perplexity "
          f"{report.get('adjusted', report)['perplexity']:.3f}")
    keep = {os.path.realpath(current), os.path.realpath(os.path.join(root, "previous"))}
    for path in glob.glob(os.path.join(root, "runs", "*")):
        if os.path.realpath(path) not in keep:
            print(f"deleting old run {path}")
            shutil.rmtree(path)


# --- the DAG --------------------------------------------------------------------------------

def build_dag():
    """The ``snm_retrain`` DAG (needs Airflow)."""
    with DAG(
        dag_id="snm_retrain",
        description="Add new shards to the SNM counts, snm train, switch ROOT/current",
        schedule=SCHEDULE,
        start_date=datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc),
        catchup=False,
        max_active_runs=1,
        tags=["snm"],
        doc_md=__doc__,
    ) as retrain:
        plan = BranchPythonOperator(task_id="plan", python_callable=plan_run,
                                    op_kwargs={"root": ROOT, "incoming": INCOMING, "full": FULL})
        no_new_shards = EmptyOperator(task_id="no_new_shards")
        train_all = BashOperator(task_id="train_all", bash_command=train_all_command())
        train_added = BashOperator(task_id="train_added", bash_command=train_added_command())
        switch = PythonOperator(task_id="switch", python_callable=switch_current,
                                op_kwargs={"root": ROOT, "run": RUN},
                                trigger_rule="none_failed_min_one_success")
        plan >> [train_all, train_added, no_new_shards]
        [train_all, train_added] >> switch
    return retrain


dag = None if DAG is None else build_dag()
