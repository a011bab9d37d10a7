#!/usr/bin/env bash
# Train and evaluate an SNM model with the Beam stages on Google Cloud Dataflow:
# `snm train` end to end, its run directory on Cloud Storage.
#
#   PROJECT=my-project REGION=europe-west1 TEMP_LOCATION=gs://my-bucket/tmp \
#     TRAIN='gs://my-bucket/corpus/*.txt.gz' HELDOUT=gs://my-bucket/dev.txt TEST=test.txt \
#     launch/dataflow.sh
#
# `snm train --out gs://...` runs its Beam stages (vocab, count, join, apply)
# as Dataflow jobs, one after the other, with the options of
# `python -m snm.launchers dataflow ...`; fit and eval run here, reading and
# writing the stage directories on gs:// (no copies).  OUT, TRAIN and HELDOUT
# must be gs:// paths (the workers read and write them); TEST and VOCAB may be
# local or gs://.  A re-run skips the stages whose output in OUT is complete
# and current (`snm train --help`).  Eval loads the model into this machine's
# memory: for very large models run it on a machine with room for it.
#
# Requirements where this runs: snm installed with Beam's GCP extras
# (pip install -e . 'apache-beam[gcp]') and credentials for PROJECT
# (gcloud auth application-default login); gsutil only for the synthetic
# example (no TRAIN), which it uploads.  Workers get the snm package through
# --setup_file (SETUP_FILE).  Every Beam stage is its own Dataflow job, all
# named JOB_NAME (Dataflow wants job names unique among running jobs only,
# and the stages run one after the other).
#
# Variables (defaults in brackets):
#   PYTHON         the Python that has snm installed [REPO/.venv/bin/python, else python3]
#   PROJECT        Google Cloud project id [required]
#   REGION         Dataflow region [us-central1]
#   TEMP_LOCATION  gs://BUCKET/PATH for Dataflow's temporary files [required]
#   OUT            gs:// run directory: vocab/ counts/ heldout/ adjust/ model/ eval.json
#                  [gs://BUCKET-OF-TEMP_LOCATION/snm/run]
#   LOCAL_WORK     where the synthetic example is written before its upload
#                  [REPO/demo-output/dataflow]
#   CONFIG         preset or configuration file [5gram]
#   TRAIN          whitespace-separated [TAG=]gs://GLOB specs [empty: the synthetic
#                  example, written locally and uploaded to OUT/corpus/]
#   HELDOUT        held-out text, gs:// [OUT/corpus/dev.txt]
#   TEST           test text, local or gs:// [OUT/corpus/test.txt]
#   VOCAB          a vocabulary file (gs:// or local) instead of building one []
#   MIN_COUNT      without VOCAB: keep words seen at least this often [2]
#   NUM_BUCKETS    count buckets = output files = shuffle parallelism [64]
#   JOB_NAME       name of the Dataflow jobs [snm-YYYYMMDD-HHMMSS]
#   MAX_WORKERS    autoscaling limit (--max_num_workers) []
#   MACHINE_TYPE   worker machine type, e.g. n2-highmem-4 []
#   SETUP_FILE     the package's setup.py, staged to the workers [REPO/setup.py]
#   EXTRA_ARGS     more `snm train` arguments, word-split, e.g. '--epochs 3 --tagged' []
#   SYNTH_SENTENCES  training sentences of the synthetic example [20000]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
PROJECT="${PROJECT:?set PROJECT to your Google Cloud project id}"
REGION="${REGION:-us-central1}"
TEMP_LOCATION="${TEMP_LOCATION:?set TEMP_LOCATION to gs://BUCKET/PATH}"
bucket="${TEMP_LOCATION#gs://}"
bucket="${bucket%%/*}"
OUT="${OUT:-gs://$bucket/snm/run}"
OUT="${OUT%/}"
LOCAL_WORK="${LOCAL_WORK:-$REPO/demo-output/dataflow}"
CONFIG="${CONFIG:-5gram}"
TRAIN="${TRAIN:-}"
HELDOUT="${HELDOUT:-}"
TEST="${TEST:-}"
VOCAB="${VOCAB:-}"
MIN_COUNT="${MIN_COUNT:-2}"
NUM_BUCKETS="${NUM_BUCKETS:-64}"
JOB_NAME="${JOB_NAME:-snm-$(date -u +%Y%m%d-%H%M%S)}"
MAX_WORKERS="${MAX_WORKERS:-}"
MACHINE_TYPE="${MACHINE_TYPE:-}"
SETUP_FILE="${SETUP_FILE:-$REPO/setup.py}"
EXTRA_ARGS="${EXTRA_ARGS:-}"
SYNTH_SENTENCES="${SYNTH_SENTENCES:-20000}"

if [[ "$OUT" != gs://* ]]; then
  echo "dataflow.sh: OUT must be a gs:// directory (Dataflow workers write there)" >&2
  exit 2
fi
"$PYTHON" -c 'import google.cloud.storage, apache_beam.runners.dataflow' 2>/dev/null || {
  echo "dataflow.sh: $PYTHON lacks Beam's GCP extras: pip install 'apache-beam[gcp]'" >&2; exit 2; }

# The Beam options, one per line, from snm/launchers.py.
launcher_args=(dataflow --project "$PROJECT" --region "$REGION" --temp_location "$TEMP_LOCATION"
               --setup_file "$SETUP_FILE" --job_name "$JOB_NAME")
[[ -n "$MAX_WORKERS" ]] && launcher_args+=(--max_workers "$MAX_WORKERS")
[[ -n "$MACHINE_TYPE" ]] && launcher_args+=(--machine_type "$MACHINE_TYPE")
options="$("$PYTHON" -m snm.launchers "${launcher_args[@]}")"
mapfile -t BEAM_OPTS <<< "$options"

if [[ -z "$TRAIN" ]]; then
  command -v gsutil >/dev/null || {
    echo "dataflow.sh: no TRAIN given and gsutil (Google Cloud SDK) not found to upload the" \
         "synthetic example" >&2; exit 2; }
  echo "== no TRAIN given: the synthetic example, uploaded to $OUT/corpus/ ==" >&2
  "$PYTHON" -m snm synth --out "$LOCAL_WORK/corpus" --train_sentences "$SYNTH_SENTENCES" >/dev/null
  gsutil -m -q cp "$LOCAL_WORK"/corpus/*.txt "$OUT/corpus/"
  TRAIN="$OUT/corpus/train.txt"
  HELDOUT="${HELDOUT:-$OUT/corpus/dev.txt}"
  TEST="${TEST:-$OUT/corpus/test.txt}"
fi
if [[ -z "$HELDOUT" || -z "$TEST" ]]; then
  echo "dataflow.sh: set HELDOUT and TEST along with TRAIN" >&2
  exit 2
fi
# Local paths absolute (TEST, VOCAB may be local: read here, not by the workers).
absolute() { case "$1" in /*|*://*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
TEST="$(absolute "$TEST")"
TRAIN_ARGS=()
read -r -a specs <<< "$TRAIN"
for spec in "${specs[@]}"; do TRAIN_ARGS+=(--train "$spec"); done
for path in "${specs[@]}" "$HELDOUT"; do  # what the Dataflow workers read
  [[ "$path" =~ ^[A-Za-z0-9_.-]+=(.+)$ ]] && path="${BASH_REMATCH[1]}"  # TAG=GLOB
  if [[ "$path" != gs://* ]]; then
    echo "dataflow.sh: $path: TRAIN and HELDOUT must be gs:// paths (Dataflow workers read them)" >&2
    exit 2
  fi
done
if [[ -n "$VOCAB" ]]; then VOCAB_ARGS=(--vocab "$(absolute "$VOCAB")"); else VOCAB_ARGS=(--min_count "$MIN_COUNT"); fi
read -r -a extra <<< "$EXTRA_ARGS"

set -x
"$PYTHON" -m snm train --config "$CONFIG" "${TRAIN_ARGS[@]}" \
  --heldout "$HELDOUT" --test "$TEST" --out "$OUT" --num_buckets "$NUM_BUCKETS" \
  "${VOCAB_ARGS[@]}" ${extra[@]+"${extra[@]}"} "${BEAM_OPTS[@]}"
