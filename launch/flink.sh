#!/usr/bin/env bash
# Train and evaluate an SNM model with the Beam stages on a Flink cluster:
# `snm train` end to end with Beam's FlinkRunner against FLINK_MASTER.
#
#   FLINK_MASTER=flink-jobmanager:8081 OUT=/shared/snm/run \
#     TRAIN='/shared/corpus/*.gz' HELDOUT=/shared/dev.txt TEST=/shared/test.txt \
#     launch/flink.sh
#
# How the pieces meet (see launch/README.md, "Flink"):
# * The FlinkRunner starts Beam's Flink job server on this machine (a Java
#   jar that Beam downloads from Maven Central on first use, so this machine
#   needs Java and network access, or set FLINK_JOB_SERVER_JAR to a local
#   copy) and submits the job to FLINK_MASTER, the JobManager's REST address.
# * The Python code runs in Beam SDK workers next to each TaskManager.  With
#   ENVIRONMENT_TYPE=EXTERNAL (default) each TaskManager reaches a worker pool
#   at ENVIRONMENT_CONFIG, localhost:50000 by default: on Kubernetes, a sidecar
#   container of the TaskManager pod running an SDK image with snm installed
#   and the argument --worker_pool.  DOCKER starts ENVIRONMENT_CONFIG (an
#   image with snm installed) per worker instead.
# * `snm train` keeps its run directory with local file operations and the
#   workers write the count, join and apply outputs into it, so OUT, TRAIN,
#   HELDOUT and TEST must be paths that this machine and every worker see
#   under the same name (a shared volume: NFS, a Kubernetes ReadWriteMany
#   volume mounted at the same path).  For object stores (gs://, s3://) split
#   the stages as launch/dataflow.sh does.
#
# Variables (defaults in brackets):
#   PYTHON              the Python that has snm installed [REPO/.venv/bin/python, else python3]
#   FLINK_MASTER        HOST:PORT of the Flink REST endpoint [localhost:8081]
#   FLINK_VERSION       the cluster's Flink version, e.g. 1.19 [Beam's newest: 2.2 in Beam 2.77]
#   FLINK_JOB_SERVER_JAR  local Beam Flink job-server jar, to avoid the download []
#   PARALLELISM         Flink parallelism [the cluster's default]
#   ENVIRONMENT_TYPE    EXTERNAL, DOCKER, PROCESS or LOOPBACK [EXTERNAL]
#   ENVIRONMENT_CONFIG  EXTERNAL: worker pool HOST:PORT [localhost:50000];
#                       DOCKER: SDK image with snm installed; PROCESS: JSON command
#   CONFIG              preset or configuration file [5gram]
#   TRAIN               whitespace-separated [TAG=]GLOB specs on the shared volume
#                       [empty: the synthetic example, written into OUT/corpus]
#   HELDOUT, TEST       held-out and test text [OUT/corpus/dev.txt, OUT/corpus/test.txt]
#   OUT                 run directory on the shared volume [REPO/demo-output/flink]
#   VOCAB               a vocabulary file instead of building one []
#   MIN_COUNT           without VOCAB: keep words seen at least this often [2]
#   NUM_BUCKETS         count buckets = shuffle parallelism [16]
#   SYNTH_SENTENCES     training sentences of the synthetic example [20000]
#   EXTRA_ARGS          more `snm train` arguments, word-split, e.g. '--epochs 3' []
#   EXTRA_BEAM_OPTS     more Beam options, word-split, e.g. '--max_parallelism=64' []
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
FLINK_MASTER="${FLINK_MASTER:-localhost:8081}"
FLINK_VERSION="${FLINK_VERSION:-}"
FLINK_JOB_SERVER_JAR="${FLINK_JOB_SERVER_JAR:-}"
PARALLELISM="${PARALLELISM:-}"
ENVIRONMENT_TYPE="${ENVIRONMENT_TYPE:-EXTERNAL}"
ENVIRONMENT_CONFIG="${ENVIRONMENT_CONFIG:-}"
CONFIG="${CONFIG:-5gram}"
TRAIN="${TRAIN:-}"
HELDOUT="${HELDOUT:-}"
TEST="${TEST:-}"
OUT="${OUT:-$REPO/demo-output/flink}"
VOCAB="${VOCAB:-}"
MIN_COUNT="${MIN_COUNT:-2}"
NUM_BUCKETS="${NUM_BUCKETS:-16}"
SYNTH_SENTENCES="${SYNTH_SENTENCES:-20000}"
EXTRA_ARGS="${EXTRA_ARGS:-}"
EXTRA_BEAM_OPTS="${EXTRA_BEAM_OPTS:-}"

LAUNCHER_NAME=flink.sh
source "$REPO/launch/run_inputs.sh"

# The Beam options, one per line, from snm/launchers.py.
launcher_args=(flink --flink_master "$FLINK_MASTER" --environment_type "$ENVIRONMENT_TYPE")
[[ -n "$ENVIRONMENT_CONFIG" ]] && launcher_args+=(--environment_config "$ENVIRONMENT_CONFIG")
[[ -n "$PARALLELISM" ]] && launcher_args+=(--parallelism "$PARALLELISM")
[[ -n "$FLINK_VERSION" ]] && launcher_args+=(--flink_version "$FLINK_VERSION")
options="$("$PYTHON" -m snm.launchers "${launcher_args[@]}")"
mapfile -t BEAM_OPTS <<< "$options"
[[ -n "$FLINK_JOB_SERVER_JAR" ]] && BEAM_OPTS+=("--flink_job_server_jar=$FLINK_JOB_SERVER_JAR")
read -r -a extra_beam <<< "$EXTRA_BEAM_OPTS"
read -r -a extra <<< "$EXTRA_ARGS"

set -x
"$PYTHON" -m snm train --config "$CONFIG" "${TRAIN_ARGS[@]}" \
  --heldout "$HELDOUT" --test "$TEST" --out "$OUT" --num_buckets "$NUM_BUCKETS" \
  "${VOCAB_ARGS[@]}" ${extra[@]+"${extra[@]}"} "${BEAM_OPTS[@]}" \
  ${extra_beam[@]+"${extra_beam[@]}"}
