#!/usr/bin/env bash
# Train and evaluate an SNM model with the Beam stages on a Dask cluster: `snm train`
# end to end with Beam's DaskRunner.  Joins the scheduler at DASK_ADDRESS, or, without
# one, starts a scheduler and WORKERS worker processes on this machine for the run
# and stops them at the end.
#
#   launch/dask.sh                                          # local cluster, synthetic example
#   DASK_ADDRESS=10.0.0.5:8786 OUT=/shared/run TRAIN='/shared/corpus/*.gz' \
#     HELDOUT=/shared/dev.txt TEST=/shared/test.txt launch/dask.sh
#
# How the pieces meet (README.md, "Running on a cluster"):
# * vocab, count, join and apply run as Dask tasks on the workers; fit and eval run in
#   this process.  Every worker needs snm installed (pip install 'snm-lm[dask]') and must
#   see OUT, TRAIN, HELDOUT and TEST under the same names: object storage (s3://, gs://)
#   or a shared mount.  Each stage checks that every worker reads back a file written
#   to its output directory, and refuses to start otherwise.
# * Each collection gets one Dask partition per worker thread (--dask_npartitions
#   in EXTRA_ARGS overrides it).
#
# Variables (defaults in brackets; the input ones as for local.sh):
#   PYTHON        the Python that has snm installed [REPO/.venv/bin/python, else python3]
#   DASK_ADDRESS  HOST:PORT of a running scheduler [empty: start a local cluster]
#   WORKERS       local cluster only: worker processes [2]
#   THREADS       local cluster only: threads a worker [1]
#   CONFIG TRAIN HELDOUT TEST OUT VOCAB MIN_COUNT SYNTH_SENTENCES EXTRA_ARGS: see local.sh
#               [OUT: REPO/demo-output/dask]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
DASK_ADDRESS="${DASK_ADDRESS:-}"
WORKERS="${WORKERS:-2}"
THREADS="${THREADS:-1}"
CONFIG="${CONFIG:-5gram}"
TRAIN="${TRAIN:-}"
OUT="${OUT:-$REPO/demo-output/dask}"
HELDOUT="${HELDOUT:-}"
TEST="${TEST:-}"
VOCAB="${VOCAB:-}"
MIN_COUNT="${MIN_COUNT:-2}"
SYNTH_SENTENCES="${SYNTH_SENTENCES:-20000}"
EXTRA_ARGS="${EXTRA_ARGS:-}"

LAUNCHER_NAME=dask.sh
source "$REPO/launch/run_inputs.sh"

if [[ -z "$DASK_ADDRESS" ]]; then
  DASK="$(dirname "$PYTHON")/dask"
  [[ -x "$DASK" ]] || DASK=dask
  CLUSTER_DIR="$(mktemp -d)"
  pids=()
  stop_cluster() {
    for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$CLUSTER_DIR"
  }
  trap stop_cluster EXIT
  echo "== a local Dask cluster: $WORKERS worker(s) x $THREADS thread(s); log $CLUSTER_DIR/cluster.log ==" >&2
  setsid "$DASK" scheduler --host 127.0.0.1 --port 0 --no-dashboard \
    --scheduler-file "$CLUSTER_DIR/scheduler.json" >>"$CLUSTER_DIR/cluster.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do [[ -s "$CLUSTER_DIR/scheduler.json" ]] && break; sleep 0.1; done
  setsid "$DASK" worker --scheduler-file "$CLUSTER_DIR/scheduler.json" --nworkers "$WORKERS" \
    --nthreads "$THREADS" --no-dashboard --local-directory "$CLUSTER_DIR/workers" \
    >>"$CLUSTER_DIR/cluster.log" 2>&1 &
  pids+=($!)
  DASK_ADDRESS="$("$PYTHON" - "$CLUSTER_DIR/scheduler.json" "$WORKERS" <<'PY'
import sys
import distributed
with distributed.Client(scheduler_file=sys.argv[1], timeout=60) as client:
    client.wait_for_workers(int(sys.argv[2]), timeout=60)
    print(client.scheduler.address)
PY
)"
fi

options="$("$PYTHON" -m snm.launchers dask --address "$DASK_ADDRESS")"
mapfile -t BEAM_OPTS <<< "$options"
read -r -a extra <<< "$EXTRA_ARGS"

set -x
"$PYTHON" -m snm train --config "$CONFIG" "${TRAIN_ARGS[@]}" \
  --heldout "$HELDOUT" --test "$TEST" --out "$OUT" \
  "${VOCAB_ARGS[@]}" ${extra[@]+"${extra[@]}"} "${BEAM_OPTS[@]}"
