#!/usr/bin/env bash
# Train and evaluate an SNM model on this machine: `snm train` end to end with
# Beam's FnApiRunner (the DirectRunner's engine) in multi-processing mode, so
# every Beam stage runs in separate worker processes, as on a cluster.
#
#   launch/local.sh                                   # the built-in synthetic example
#   TRAIN='corpus/*.txt.gz' HELDOUT=dev.txt TEST=test.txt OUT=run/ launch/local.sh
#   TRAIN='web=web/*.gz news=news/*.gz' EXTRA_ARGS='--tagged' ... launch/local.sh
#
# Every setting is an environment variable (defaults in brackets):
#   PYTHON      the Python that has snm installed [REPO/.venv/bin/python, else python3]
#   CONFIG      preset (5gram, skip10gram, skip5gram) or configuration file [5gram]
#   TRAIN       training text: whitespace-separated [TAG=]GLOB specs, one --train each
#               [empty: write the synthetic corpus into OUT/corpus and use it]
#   HELDOUT     held-out text that trains the adjustment model [OUT/corpus/dev.txt]
#   TEST        test text for the perplexity report [OUT/corpus/test.txt]
#   OUT         run directory: vocab/ counts/ heldout/ adjust/ model/ eval.json
#               [REPO/demo-output/local]
#   VOCAB       a vocabulary file (one word a line) instead of building one []
#   MIN_COUNT   without VOCAB: keep the words seen at least this often [2]
#   WORKERS     Beam worker processes [2]
#   MODE        multi_processing, multi_threading or in_memory [multi_processing]
#   SYNTH_SENTENCES  training sentences of the synthetic example [20000]
#   EXTRA_ARGS  more `snm train` arguments, word-split, e.g. '--epochs 3 --force' []
#
# A run is resumable: re-running skips the stages whose output is complete
# and current (see `snm train --help`).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
CONFIG="${CONFIG:-5gram}"
TRAIN="${TRAIN:-}"
OUT="${OUT:-$REPO/demo-output/local}"
HELDOUT="${HELDOUT:-}"
TEST="${TEST:-}"
VOCAB="${VOCAB:-}"
MIN_COUNT="${MIN_COUNT:-2}"
WORKERS="${WORKERS:-2}"
MODE="${MODE:-multi_processing}"
SYNTH_SENTENCES="${SYNTH_SENTENCES:-20000}"
EXTRA_ARGS="${EXTRA_ARGS:-}"

LAUNCHER_NAME=local.sh
source "$REPO/launch/run_inputs.sh"

# The Beam options, one per line, from snm/launchers.py.
options="$("$PYTHON" -m snm.launchers local --workers "$WORKERS" --mode "$MODE")"
mapfile -t BEAM_OPTS <<< "$options"
read -r -a extra <<< "$EXTRA_ARGS"

set -x
"$PYTHON" -m snm train --config "$CONFIG" "${TRAIN_ARGS[@]}" \
  --heldout "$HELDOUT" --test "$TEST" --out "$OUT" \
  "${VOCAB_ARGS[@]}" ${extra[@]+"${extra[@]}"} "${BEAM_OPTS[@]}"
