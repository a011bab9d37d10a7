"""Airflow DAG: scheduled SNM retraining, the same steps as launch/cron_retrain.sh.

Copy or symlink this file into Airflow's dags folder.  It needs Airflow and
the Beam provider (``pip install apache-airflow apache-airflow-providers-apache-beam``)
but not snm: the Beam stages and ``snm fit`` / ``snm eval`` run as
subprocesses of the Python named by ``SNM_PYTHON``, which has snm installed.

Each run:

1. ``plan``: lists the training shards matching ``INCOMING`` that are not in
   ``ROOT/counted.txt``, links them into ``ROOT/runs/RUN/shards/`` and picks
   the branch: ``count_added`` (``snm count --add_to ROOT/current/counts``:
   counts are additive, only the new shards are read), ``count_all`` (the
   first run, or ``FULL``) or ``no_new_shards`` (everything else is skipped);
2. ``join``, ``fit``, ``apply``, ``evaluate`` on the new counts;
3. ``switch``: ``ROOT/previous`` -> the old model, ``ROOT/current`` -> the
   new one (each symlink replaced atomically by a rename), the shards added
   to ``counted.txt``, runs other than current and previous deleted.

The Beam stages run with ``BeamRunPythonPipelineOperator`` on the pipeline
modules (``pipelines/count.py`` etc.; each runs ``run()`` under
``if __name__ == "__main__"``).  ``fit`` and ``eval`` read and write local
files, so ``ROOT`` must be a path every task and every Beam worker sees:
fine for the local runner and for Flink with a shared volume; for Dataflow
(gs:// paths), copy small M and the model as launch/dataflow.sh does.

Settings are the constants below, read from the environment of the Airflow
processes with defaults.  Every place they are used, except ``SNM_PYTHON``
(``py_interpreter``), is a templated field, so a constant can also be an
Airflow Variable template such as ``"{{ var.value.snm_root }}"``.
"""

import datetime
import glob
import json
import os
import shutil

try:  # Airflow 3
    from airflow.providers.standard.operators.bash import BashOperator
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.providers.standard.operators.python import BranchPythonOperator, PythonOperator
    from airflow.sdk import DAG
except ImportError:  # Airflow 2
    from airflow import DAG
    from airflow.operators.bash import BashOperator
    from airflow.operators.empty import EmptyOperator
    from airflow.operators.python import BranchPythonOperator, PythonOperator
from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator

#: The snm source tree (for the pipeline modules' paths): this file's ../ by default.
REPO = os.environ.get("SNM_REPO",
                      os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
#: The Python that has snm installed (runs the pipelines, fit and eval).
PYTHON = os.environ.get("SNM_PYTHON", os.path.join(REPO, ".venv", "bin", "python"))
#: State directory: runs/, current, previous, counted.txt (see cron_retrain.sh).
ROOT = os.environ.get("SNM_ROOT", "/srv/snm")
#: Glob of the training shards; those not in ROOT/counted.txt are new.
INCOMING = os.environ.get("SNM_INCOMING", os.path.join(ROOT, "incoming", "*.txt"))
HELDOUT = os.environ.get("SNM_HELDOUT", os.path.join(ROOT, "dev.txt"))
TEST = os.environ.get("SNM_TEST", os.path.join(ROOT, "test.txt"))
#: Configuration, vocabulary threshold and buckets of a full count.
CONFIG = os.environ.get("SNM_CONFIG", "5gram")
MIN_COUNT = os.environ.get("SNM_MIN_COUNT", "2")
NUM_BUCKETS = os.environ.get("SNM_NUM_BUCKETS", "16")
#: "1": count every shard afresh instead of adding to the current counts.
FULL = os.environ.get("SNM_FULL", "0")
#: More ``snm fit`` arguments, e.g. "--epochs 3".
FIT_ARGS = os.environ.get("SNM_FIT_ARGS", "")
#: Beam runner of the count, join and apply stages.  FnApiRunner is the
#: DirectRunner's engine (the DirectRunner itself first tries to download Prism).
RUNNER = os.environ.get("SNM_RUNNER", "FnApiRunner")
#: Beam options of every Beam stage (``python -m snm.launchers`` prints them
#: for each runner), e.g. {"flink_master": "jm:8081", "environment_type": "EXTERNAL",
#: "environment_config": "localhost:50000"} with RUNNER = "FlinkRunner".
BEAM_OPTIONS = json.loads(os.environ.get(
    "SNM_BEAM_OPTIONS",
    '{"direct_running_mode": "multi_processing", "direct_num_workers": "2"}'))
SCHEDULE = os.environ.get("SNM_SCHEDULE", "15 3 * * *")

RUN = "{{ ti.xcom_pull(task_ids='plan', key='run') }}"
OLD = "{{ ti.xcom_pull(task_ids='plan', key='old') }}"


def plan_run(root, incoming, full, **context):
    """Find the new shards, make the run directory; return the branch to follow."""
    os.makedirs(os.path.join(root, "runs"), exist_ok=True)
    counted_path = os.path.join(root, "counted.txt")
    counted = set()
    if os.path.isfile(counted_path):
        with open(counted_path, encoding="utf-8") as f:
            counted = set(f.read().splitlines())
    current = os.path.join(root, "current")
    old = ""
    if str(full) != "1" and os.path.isfile(os.path.join(current, "counts", "manifest.json")):
        old = os.path.realpath(current)
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
    print(f"run {run}: {len(shards)} new shard(s)" + (f", adding to {old}/counts" if old else ""))
    return "count_added" if old else "count_all"


def _replace_symlink(target, link):
    tmp = link + ".new"
    if os.path.lexists(tmp):
        os.remove(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)  # rename(2): readers see the old or the new target


def switch_current(root, run):
    """previous -> old current, current -> ``run``; record the shards; prune old runs."""
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
    keep = {os.path.realpath(current), os.path.realpath(os.path.join(root, "previous"))}
    for path in glob.glob(os.path.join(root, "runs", "*")):
        if os.path.realpath(path) not in keep:
            print(f"deleting old run {path}")
            shutil.rmtree(path)


def _beam_operator_problem():
    """Why ``BeamRunPythonPipelineOperator`` cannot be built here, or None.

    apache-airflow-providers-apache-beam 6.x refuses to build any Beam
    operator, whatever the runner, when apache-airflow-providers-google is
    not installed (``BeamDataflowMixin.__init__`` raises
    ``AirflowOptionalProviderFeatureException``).
    """
    try:
        BeamRunPythonPipelineOperator(task_id="snm_probe", py_file=__file__)
    except Exception as e:  # pylint: disable=broad-except
        return f"{type(e).__name__}: {e}"
    return None


BEAM_OPERATOR_PROBLEM = _beam_operator_problem()


def beam_stage(task_id, module, options, **kwargs):
    """A Beam stage: ``pipelines/MODULE.py`` with RUNNER and BEAM_OPTIONS.

    Without the Google provider (see :func:`_beam_operator_problem`), the
    same command runs in a ``BashOperator``: the Beam operator does no more
    than that for runners other than Dataflow.
    """
    py_file = os.path.join(REPO, "pipelines", f"{module}.py")
    if BEAM_OPERATOR_PROBLEM is None:
        return BeamRunPythonPipelineOperator(
            task_id=task_id, py_file=py_file, py_interpreter=PYTHON, runner=RUNNER,
            default_pipeline_options=dict(BEAM_OPTIONS), pipeline_options=options, **kwargs)
    args = [f"--runner={RUNNER}"]
    for key, value in {**BEAM_OPTIONS, **options}.items():  # as the Beam operator does
        if value is True:
            args.append(f"--{key}")
        elif isinstance(value, list):
            args += [f"--{key}={v}" for v in value]
        elif value is not None and value is not False:
            args.append(f"--{key}={value}")
    return BashOperator(task_id=task_id,
                        bash_command=" ".join(f'"{a}"' for a in [PYTHON, py_file] + args),
                        doc=f"BeamRunPythonPipelineOperator unavailable ({BEAM_OPERATOR_PROBLEM})",
                        **kwargs)


with DAG(
    dag_id="snm_retrain",
    description="Add new shards to the SNM counts, re-fit, switch ROOT/current",
    schedule=SCHEDULE,
    start_date=datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc),
    catchup=False,
    max_active_runs=1,
    tags=["snm"],
    doc_md=__doc__,
) as dag:
    plan = BranchPythonOperator(task_id="plan", python_callable=plan_run,
                                op_kwargs={"root": ROOT, "incoming": INCOMING, "full": FULL})
    no_new_shards = EmptyOperator(task_id="no_new_shards")
    count_all = beam_stage("count_all", "count", {
        "config": CONFIG, "train": f"{RUN}/shards/*", "min_count": MIN_COUNT,
        "num_buckets": NUM_BUCKETS, "out": f"{RUN}/counts"})
    count_added = beam_stage("count_added", "count", {
        "config": CONFIG, "add_to": f"{OLD}/counts", "train": f"{RUN}/shards/*",
        "out": f"{RUN}/counts"})
    join = beam_stage("join", "join", {
        "counts": f"{RUN}/counts", "heldout": HELDOUT, "out": f"{RUN}/heldout"},
        trigger_rule="none_failed_min_one_success")
    fit = BashOperator(
        task_id="fit",
        bash_command=f'"{PYTHON}" -m snm fit --small_m "{RUN}/heldout" --out "{RUN}/adjust" '
                     f'{FIT_ARGS}')
    apply = beam_stage("apply", "apply", {
        "counts": f"{RUN}/counts", "theta": f"{RUN}/adjust", "out": f"{RUN}/model"})
    evaluate = BashOperator(
        task_id="evaluate",
        bash_command=f'"{PYTHON}" -m snm eval --model "{RUN}/model" "{TEST}" --json '
                     f'> "{RUN}/eval.json.tmp" && mv "{RUN}/eval.json.tmp" "{RUN}/eval.json" '
                     f'&& cat "{RUN}/eval.json"')
    switch = PythonOperator(task_id="switch", python_callable=switch_current,
                            op_kwargs={"root": ROOT, "run": RUN})

    plan >> [count_all, count_added, no_new_shards]
    [count_all, count_added] >> join >> fit >> apply >> evaluate >> switch
