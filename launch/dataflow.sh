#!/usr/bin/env bash
# Train and evaluate an SNM model with the Beam stages on Google Cloud Dataflow.
#
#   PROJECT=my-project REGION=europe-west1 TEMP_LOCATION=gs://my-bucket/tmp \
#     TRAIN='gs://my-bucket/corpus/*.txt.gz' HELDOUT=gs://my-bucket/dev.txt TEST=test.txt \
#     launch/dataflow.sh
#
# Why not just `snm train --runner=DataflowRunner`: `snm train` keeps its run
# directory with os.path calls and its fit and eval stages read local files,
# so its --out must be a local path, which Dataflow workers cannot write.
# The Beam stages themselves read and write every path through Beam's
# FileSystems (pipelines/common.py: FileSystems.open/create/rename/match), so
# they work on gs:// paths, including the scratch files of the count shuffle
# (OUT/counts/_scratch).  So this script runs:
#
#   on Dataflow, gs:// in and out   snm count  (and the vocabulary pipeline it starts)
#                                   snm join   -> OUT/heldout (small M: small)
#   here, local files               snm fit    on a copy of OUT/heldout -> theta
#   on Dataflow                     snm apply  with theta copied to OUT/adjust
#   here                            snm eval   on a copy of OUT/model
#
# Small M and theta are small (they hold only what the held-out set touches);
# the model copied down for eval is the size of the full matrix: for very
# large models evaluate on a machine with enough disk and RAM.
#
# Requirements where this runs: snm installed with Beam's GCP extras
# (pip install -e . 'apache-beam[gcp]'), gsutil, and credentials for PROJECT
# (gcloud auth application-default login).  Workers get the snm package
# through --setup_file (SETUP_FILE).  Each Beam stage is its own Dataflow job,
# named JOB_PREFIX-STAGE.
#
# Variables (defaults in brackets):
#   PYTHON         the Python that has snm installed [REPO/.venv/bin/python, else python3]
#   PROJECT        Google Cloud project id [required]
#   REGION         Dataflow region [us-central1]
#   TEMP_LOCATION  gs://BUCKET/PATH for Dataflow's temporary files [required]
#   OUT            gs:// directory for counts/ heldout/ adjust/ model/
#                  [gs://BUCKET-OF-TEMP_LOCATION/snm/run]
#   LOCAL_WORK     local directory for the copies of heldout/, adjust/, model/ and
#                  eval.json [REPO/demo-output/dataflow]
#   CONFIG         preset or configuration file [5gram]
#   TRAIN          whitespace-separated [TAG=]gs://GLOB specs [empty: the synthetic
#                  example, written locally and uploaded to OUT/corpus/]
#   HELDOUT        held-out text, gs:// [OUT/corpus/dev.txt]
#   TEST           test text, local or gs:// (copied down) [LOCAL_WORK/corpus/test.txt]
#   VOCAB          a vocabulary file (gs:// or local) instead of building one []
#   MIN_COUNT      without VOCAB: keep words seen at least this often [2]
#   NUM_BUCKETS    count buckets = output files = shuffle parallelism [64]
#   JOB_PREFIX     Dataflow job names are JOB_PREFIX-count etc. [snm-YYYYMMDD-HHMMSS]
#   MAX_WORKERS    autoscaling limit (--max_num_workers) []
#   MACHINE_TYPE   worker machine type, e.g. n2-highmem-4 []
#   SETUP_FILE     the package's setup.py, staged to the workers [REPO/setup.py]
#   FIT_ARGS       more `snm fit` arguments, word-split, e.g. '--epochs 3' []
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
JOB_PREFIX="${JOB_PREFIX:-snm-$(date -u +%Y%m%d-%H%M%S)}"
MAX_WORKERS="${MAX_WORKERS:-}"
MACHINE_TYPE="${MACHINE_TYPE:-}"
SETUP_FILE="${SETUP_FILE:-$REPO/setup.py}"
FIT_ARGS="${FIT_ARGS:-}"
SYNTH_SENTENCES="${SYNTH_SENTENCES:-20000}"

if [[ "$OUT" != gs://* ]]; then
  echo "dataflow.sh: OUT must be a gs:// directory (Dataflow workers write there)" >&2
  exit 2
fi
command -v gsutil >/dev/null || { echo "dataflow.sh: gsutil not found (Google Cloud SDK)" >&2; exit 2; }
"$PYTHON" -c 'import google.cloud.storage, apache_beam.runners.dataflow' 2>/dev/null || {
  echo "dataflow.sh: $PYTHON lacks Beam's GCP extras: pip install 'apache-beam[gcp]'" >&2; exit 2; }

# Beam options of one stage (one Dataflow job), one per line from snm/launchers.py.
dataflow_opts() {
  local args=(dataflow --project "$PROJECT" --region "$REGION" --temp_location "$TEMP_LOCATION"
              --setup_file "$SETUP_FILE" --job_name "$JOB_PREFIX-$1")
  [[ -n "$MAX_WORKERS" ]] && args+=(--max_workers "$MAX_WORKERS")
  [[ -n "$MACHINE_TYPE" ]] && args+=(--machine_type "$MACHINE_TYPE")
  local options
  options="$("$PYTHON" -m snm.launchers "${args[@]}")"
  mapfile -t BEAM_OPTS <<< "$options"
}
# Replace directory $2 with a copy of directory $1 (gs:// to local or local to gs://).
copy_dir() {
  local src="$1" dst="$2"
  if [[ "$dst" == gs://* ]]; then
    gsutil -m -q rm -r -f "$dst" 2>/dev/null || true
  else
    rm -rf "$dst" && mkdir -p "$dst"
  fi
  gsutil -m -q cp -r "$src/*" "$dst/"
}

mkdir -p "$LOCAL_WORK"
if [[ -z "$TRAIN" ]]; then
  echo "== no TRAIN given: the synthetic example, uploaded to $OUT/corpus/ ==" >&2
  "$PYTHON" -m snm synth --out "$LOCAL_WORK/corpus" --train_sentences "$SYNTH_SENTENCES" >/dev/null
  gsutil -m -q cp "$LOCAL_WORK"/corpus/*.txt "$OUT/corpus/"
  TRAIN="$OUT/corpus/train.txt"
  HELDOUT="${HELDOUT:-$OUT/corpus/dev.txt}"
  TEST="${TEST:-$LOCAL_WORK/corpus/test.txt}"
fi
if [[ -z "$HELDOUT" || -z "$TEST" ]]; then
  echo "dataflow.sh: set HELDOUT and TEST along with TRAIN" >&2
  exit 2
fi
TRAIN_ARGS=()
read -r -a specs <<< "$TRAIN"
for spec in "${specs[@]}"; do TRAIN_ARGS+=(--train "$spec"); done
if [[ -n "$VOCAB" ]]; then VOCAB_ARGS=(--vocab "$VOCAB"); else VOCAB_ARGS=(--min_count "$MIN_COUNT"); fi
read -r -a fit_extra <<< "$FIT_ARGS"
set -x

# 1-2. vocabulary (unless VOCAB) and counts: Dataflow, gs:// -> gs://
dataflow_opts count
"$PYTHON" -m snm count --config "$CONFIG" "${TRAIN_ARGS[@]}" "${VOCAB_ARGS[@]}" \
  --num_buckets "$NUM_BUCKETS" --out "$OUT/counts" "${BEAM_OPTS[@]}"
# The count removes its shuffle scratch files with FileSystems.exists/delete on
# the directory, which finds nothing on GCS (no object has the directory's
# name): remove them here.
gsutil -m -q rm -r -f "$OUT/counts/_scratch" 2>/dev/null || true

# 3. held-out events and small M: Dataflow
dataflow_opts join
"$PYTHON" -m snm join --counts "$OUT/counts" --heldout "$HELDOUT" --out "$OUT/heldout" \
  "${BEAM_OPTS[@]}"

# 4. fit: here, on a local copy of small M; theta goes back to OUT/adjust for apply
copy_dir "$OUT/heldout" "$LOCAL_WORK/heldout"
"$PYTHON" -m snm fit --small_m "$LOCAL_WORK/heldout" --out "$LOCAL_WORK/adjust" \
  ${fit_extra[@]+"${fit_extra[@]}"}
copy_dir "$LOCAL_WORK/adjust" "$OUT/adjust"

# 5. apply: Dataflow, counts + theta (gs://) -> model (gs://).  A compact/ left
# by an earlier run would not match the new model (apply's own removal of it
# does not work on GCS, see above), so it goes first.
gsutil -m -q rm -r -f "$OUT/model/compact" 2>/dev/null || true
dataflow_opts apply
"$PYTHON" -m snm apply --counts "$OUT/counts" --theta "$OUT/adjust" --out "$OUT/model" \
  "${BEAM_OPTS[@]}"

# 6. eval: here, on a local copy of the model.  Loading it builds the scoring
# arrays (model/compact/), which go back to OUT/model so that copy is complete.
copy_dir "$OUT/model" "$LOCAL_WORK/model"
rm -rf "$LOCAL_WORK/model/compact"
if [[ "$TEST" == gs://* ]]; then
  gsutil -q cp "$TEST" "$LOCAL_WORK/test.txt"
  TEST="$LOCAL_WORK/test.txt"
fi
"$PYTHON" -m snm eval --model "$LOCAL_WORK/model" "$TEST" --json > "$LOCAL_WORK/eval.json"
gsutil -m -q cp -r "$LOCAL_WORK/model/compact" "$OUT/model/"
gsutil -q cp "$LOCAL_WORK/eval.json" "$OUT/eval.json"
cat "$LOCAL_WORK/eval.json"
