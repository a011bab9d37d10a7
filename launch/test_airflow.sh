#!/usr/bin/env bash
# End-to-end check of launch/airflow_dag.py under Airflow 3.  Not part of
# `make test`: it installs Airflow from PyPI and trains two models (minutes).
#
#   launch/test_airflow.sh                        # everything under /tmp/snm-airflow
#   WORK=/scratch/snm-af SNM_SOURCE=copy nice -n 19 launch/test_airflow.sh
#
# Steps:
# 1. a virtualenv WORK/venv with `pip install 'apache-airflow>=3'` and this
#    repository (`pip install -e REPO`); kept, and reused by later runs when it
#    already has both;
# 2. an Airflow home WORK/airflow (SQLite, `airflow db migrate`) whose dags
#    folder holds a symlink to launch/airflow_dag.py; the DAG's SNM_* settings
#    point it at WORK;
# 3. the synthetic corpus (`snm synth --out WORK/corpus --train_sentences
#    20000 --heldout_sentences 1000`), its training text cut into three
#    shards, two of them in WORK/incoming;
# 4. `airflow dags test snm_retrain`: plan -> train_all (`snm train`) ->
#    switch; checks the run's tasks (exactly plan, train_all, train_added,
#    no_new_shards, switch) and their states, that ROOT/current is a complete
#    model (counts, model, eval.json, every stage in stages.json) and
#    counted.txt;
# 5. the third shard added, `airflow dags test snm_retrain` again: plan ->
#    train_added (one `snm train --add_to FIRST/counts`) -> switch; checks
#    the new current model as in 4, previous -> the first, counted.txt, that
#    the task ran `snm train --add_to` with the first run's counts and kept
#    their vocabulary, and that its counts equal counting all three shards at
#    once;
# 6. `airflow dags test snm_retrain` once more with nothing new: the branch
#    no_new_shards, current unchanged.
# Prints "test_airflow.sh: PASSED" and exits 0 when every check held;
# otherwise exits 1 with the failed check (the Airflow output is in WORK/*.log).
#
# Variables (defaults in brackets):
#   WORK           everything: venv/ airflow/ corpus/ incoming/ root/ logs [/tmp/snm-airflow]
#   BASE_PYTHON    the Python that makes the virtualenv (Airflow 3 wants 3.10-3.13) [python3]
#   AIRFLOW_SPEC   the pip requirement for Airflow [apache-airflow>=3]
#   SNM_SOURCE     what `pip install -e` installs: REPO itself [REPO], or "copy": a
#                  copy of REPO's working tree in WORK/src, so that the editable
#                  build writes its files (snm_core/_kernels*.so, *.egg-info) there
#                  and not into REPO, where running processes may use them
#   LAUNCHER       the DAG's SNM_LAUNCHER (python -m snm.launchers ...) [local --workers 2]
#   FIT_ARGS       the DAG's SNM_FIT_ARGS (more snm train arguments) []
#   NUM_BUCKETS    the DAG's SNM_NUM_BUCKETS [16]
#   TRAIN_SENTENCES, HELDOUT_SENTENCES  size of the synthetic corpus [20000, 1000]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${WORK:-/tmp/snm-airflow}"
BASE_PYTHON="${BASE_PYTHON:-python3}"
AIRFLOW_SPEC="${AIRFLOW_SPEC:-apache-airflow>=3}"
SNM_SOURCE="${SNM_SOURCE:-$REPO}"
LAUNCHER="${LAUNCHER:-local --workers 2}"
FIT_ARGS="${FIT_ARGS:-}"
NUM_BUCKETS="${NUM_BUCKETS:-16}"
TRAIN_SENTENCES="${TRAIN_SENTENCES:-20000}"
HELDOUT_SENTENCES="${HELDOUT_SENTENCES:-1000}"

log() { echo "== test_airflow.sh: $* ==" >&2; }
fail() { echo "test_airflow.sh: FAILED: $*" >&2; exit 1; }
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
VENV="$WORK/venv"
PY="$VENV/bin/python"

# 1. The virtualenv: Airflow 3 and snm.
if [[ ! -x "$PY" ]]; then
  log "virtualenv $VENV"
  "$BASE_PYTHON" -m venv "$VENV"
  "$PY" -m pip install --quiet --upgrade pip
fi
if ! "$PY" -c 'import sys, airflow; sys.exit(int(airflow.__version__.split(".")[0]) < 3)' 2>/dev/null; then
  log "pip install '$AIRFLOW_SPEC' (log: $WORK/pip-airflow.log)"
  "$PY" -m pip install "$AIRFLOW_SPEC" > "$WORK/pip-airflow.log" 2>&1 \
    || fail "pip install '$AIRFLOW_SPEC' (see $WORK/pip-airflow.log)"
fi
if [[ "$SNM_SOURCE" == copy ]]; then
  # The working tree as it is (tracked and new files, not what .gitignore
  # lists), refreshed on every run.
  rm -rf "$WORK/src"
  mkdir -p "$WORK/src"
  git -C "$REPO" ls-files -z --cached --others --exclude-standard \
    | (cd "$REPO" && xargs -0 tar --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$WORK/src"
  SNM_SOURCE="$WORK/src"
fi
log "pip install -e $SNM_SOURCE (log: $WORK/pip-snm.log)"
"$PY" -m pip install -e "$SNM_SOURCE" > "$WORK/pip-snm.log" 2>&1 \
  || fail "pip install -e $SNM_SOURCE (see $WORK/pip-snm.log)"
"$PY" -c 'import airflow, snm, apache_beam; print("Airflow", airflow.__version__, "Beam", apache_beam.__version__)'

# 2. Airflow's home, the DAG and its settings.
export AIRFLOW_HOME="$WORK/airflow"
export AIRFLOW__CORE__DAGS_FOLDER="$AIRFLOW_HOME/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
rm -rf "$AIRFLOW_HOME" "$WORK/root" "$WORK/incoming" "$WORK/all-counts"
mkdir -p "$AIRFLOW__CORE__DAGS_FOLDER" "$WORK/incoming"
ln -s "$SNM_SOURCE/launch/airflow_dag.py" "$AIRFLOW__CORE__DAGS_FOLDER/snm_retrain.py"
ROOT="$WORK/root"
export SNM_REPO="$SNM_SOURCE" SNM_PYTHON="$PY" SNM_ROOT="$ROOT"
export SNM_INCOMING="$WORK/incoming/*.txt" SNM_HELDOUT="$WORK/corpus/dev.txt"
export SNM_TEST="$WORK/corpus/test.txt" SNM_LAUNCHER="$LAUNCHER" SNM_FIT_ARGS="$FIT_ARGS"
export SNM_NUM_BUCKETS="$NUM_BUCKETS"
export PATH="$VENV/bin:$PATH"  # `airflow`, and `python` for Beam's worker processes
log "airflow db migrate (log: $WORK/airflow-db.log)"
airflow db migrate > "$WORK/airflow-db.log" 2>&1 || fail "airflow db migrate (see $WORK/airflow-db.log)"

# 3. The corpus: three training shards.
log "synthetic corpus in $WORK/corpus"
"$PY" -m snm synth --out "$WORK/corpus" --train_sentences "$TRAIN_SENTENCES" \
  --heldout_sentences "$HELDOUT_SENTENCES" > /dev/null
rm -f "$WORK"/corpus/shard-*
split -n l/3 -d --additional-suffix=.txt "$WORK/corpus/train.txt" "$WORK/corpus/shard-"
cp "$WORK/corpus/shard-00.txt" "$WORK/corpus/shard-01.txt" "$WORK/incoming/"

# One `airflow dags test snm_retrain`; its output goes to WORK/dags-test-N.log.
dags_test() {
  local n="$1"
  log "airflow dags test snm_retrain ($n; log: $WORK/dags-test-$n.log)"
  airflow dags test snm_retrain > "$WORK/dags-test-$n.log" 2>&1 \
    || fail "airflow dags test exited with status $? (see $WORK/dags-test-$n.log)"
  # The last run's state and its task instances' states, from the metadata database.
  "$PY" - <<'EOF' > "$WORK/dags-test-$n.states"
import json, subprocess, sys
def airflow_json(*args):  # the JSON line of the output (Airflow logs warnings there too)
    out = subprocess.run(["airflow", *args, "-o", "json"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("[")))
runs = airflow_json("dags", "list-runs", "snm_retrain")
run = max(runs, key=lambda r: r.get("start_date") or r.get("logical_date") or "")
tasks = airflow_json("tasks", "states-for-dag-run", "snm_retrain", run["run_id"])
print(run["state"])
for task in sorted(tasks, key=lambda t: t["task_id"]):
    print(task["task_id"], task["state"])
EOF
  cat "$WORK/dags-test-$n.states" >&2
  [[ "$(head -n 1 "$WORK/dags-test-$n.states")" == success ]] \
    || fail "DAG run $n is not successful (see $WORK/dags-test-$n.log)"
}
task_state() { awk -v t="$2" '$1 == t { print $2 }' "$WORK/dags-test-$1.states"; }
expect_tasks() {  # N TASK STATE ...: exactly these tasks, in these states
  local n="$1"; shift
  local tasks
  tasks="$(tail -n +2 "$WORK/dags-test-$n.states" | awk '{ print $1 }' | sort | tr '\n' ' ')"
  [[ "$tasks" == "$(printf '%s\n' "$@" | awk 'NR % 2' | sort | tr '\n' ' ')" ]] \
    || fail "run $n: the DAG's tasks are $tasks"
  while (( $# )); do
    [[ "$(task_state "$n" "$1")" == "$2" ]] \
      || fail "run $n: task $1 is '$(task_state "$n" "$1")', expected $2"
    shift 2
  done
}
# ROOT/current is a complete `snm train` run directory; prints its path.
check_current() {
  [[ -L "$ROOT/current" ]] || fail "$ROOT/current is not a symlink"
  local run
  run="$(readlink -f "$ROOT/current")"
  for name in counts/manifest.json heldout/manifest.json adjust/manifest.json \
              model/manifest.json eval.json stages.json; do
    [[ -s "$run/$name" ]] || fail "current model $run lacks $name"
  done
  "$PY" - "$run" <<'EOF' >&2 || fail "current model $run is incomplete"
import json, math, sys
run = sys.argv[1]
stages = json.load(open(f"{run}/stages.json"))
missing = {"count", "join", "fit", "apply", "eval"} - set(stages)
assert not missing, f"stages.json lacks {missing}"
ppl = json.load(open(f"{run}/eval.json"))["adjusted"]["perplexity"]
assert math.isfinite(ppl) and ppl > 1, ppl
print(f"current -> {run}: test perplexity {ppl:.2f}")
EOF
  echo "$run"
}
counted_shards() { sort "$ROOT/counted.txt" | xargs -n 1 basename | tr '\n' ' '; }

# 4. First run: train_all.
dags_test 1
expect_tasks 1 plan success train_all success train_added skipped no_new_shards skipped \
  switch success
first="$(check_current)"
[[ ! -e "$ROOT/previous" ]] || fail "previous exists after the first run"
[[ "$(counted_shards)" == "shard-00.txt shard-01.txt " ]] || fail "counted.txt: $(counted_shards)"

# 5. A new shard: train_added (snm train --add_to).
cp "$WORK/corpus/shard-02.txt" "$WORK/incoming/"
dags_test 2
expect_tasks 2 plan success train_all skipped train_added success no_new_shards skipped \
  switch success
second="$(check_current)"
[[ "$second" != "$first" ]] || fail "current did not change"
[[ "$(readlink -f "$ROOT/previous")" == "$first" ]] || fail "previous is not the first model"
[[ "$(counted_shards)" == "shard-00.txt shard-01.txt shard-02.txt " ]] \
  || fail "counted.txt: $(counted_shards)"
grep -q '"count": {' "$second/stages.json" || fail "no count stage in $second/stages.json"
# The task's command as bash traced it (set -x): one snm train adding to the first counts.
grep -- '+ .* -m snm train ' "$WORK/dags-test-2.log" | grep -qF -- "--add_to $first/counts " \
  || fail "train_added did not run snm train --add_to $first/counts (see $WORK/dags-test-2.log)"
! grep -q -- '+ .* -m snm count ' "$WORK/dags-test-2.log" \
  || fail "run 2 ran a separate snm count (see $WORK/dags-test-2.log)"
[[ ! -e "$second/vocab" ]] || fail "$second/vocab exists: snm train built a new vocabulary"
cmp -s "$first/counts/vocab.txt" "$second/counts/vocab.txt" \
  || fail "$second/counts/vocab.txt is not the first run's vocabulary"
log "checking the added counts against counting all three shards at once"
read -r -a launcher_args <<< "$LAUNCHER"
options="$("$PY" -m snm.launchers "${launcher_args[@]}")"
mapfile -t beam_opts <<< "$options"
"$PY" -m snm count --config 5gram --vocab "$first/counts/vocab.txt" \
  --num_buckets "$NUM_BUCKETS" --out "$WORK/all-counts" --train "$WORK/incoming/*.txt" \
  "${beam_opts[@]}" > "$WORK/all-counts.log" 2>&1 \
  || fail "snm count of all shards (see $WORK/all-counts.log)"
for file in "$WORK"/all-counts/*.parquet "$WORK/all-counts/vocab.txt"; do
  cmp -s "$file" "$second/counts/$(basename "$file")" \
    || fail "$second/counts/$(basename "$file") differs from counting all shards at once"
done

# 6. Nothing new: no_new_shards.
dags_test 3
expect_tasks 3 plan success no_new_shards success train_all skipped train_added skipped \
  switch skipped
[[ "$(readlink -f "$ROOT/current")" == "$second" ]] || fail "current changed without new shards"

echo "test_airflow.sh: PASSED (Airflow $("$PY" -c 'import airflow; print(airflow.__version__)');" \
     "first model $first, then $second)"
