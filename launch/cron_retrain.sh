#!/usr/bin/env bash
# Scheduled retraining: add the training shards that arrived since the last
# run to the existing counts, re-fit, and switch ROOT/current to the new model.
#
# The stages are those of `snm train` (vocab, count, join, fit, apply, eval;
# see `snm train --help`): this script picks the new shards, runs `snm train`
# in a fresh run directory, and switches ROOT/current when it succeeded.
#
# Counts are additive (C(f,w) and C(f,*) of old plus new text are sums), so
# a retraining reads only the new shards:
#   first run, or FULL=1   snm train --train 'RUN/shards/*' --out RUN [--vocab|--min_count]
#                            --num_buckets N
#   later runs             snm train --add_to OLD/count --train 'RUN/shards/*' --out RUN
# where OLD is ROOT/current.  With --add_to, `snm train` counts only the new
# shards into RUN/count, adding OLD/count, and goes on from their sum (join,
# fit, apply, eval): the same model as counting every shard at once.  The
# configuration must stay that of the first run, and the shards of the same
# kind (all tagged or none); the vocabulary and buckets are OLD/count's (so
# VOCAB, MIN_COUNT and NUM_BUCKETS apply to a first run only, and a later run
# passes neither --vocab nor --min_count).  To change them, start afresh: FULL=1.
#
# Layout under ROOT:
#   runs/YYYYMMDDTHHMMSSZ/  one retraining: shards/ (symlinks to the shards it
#                           added) and `snm train`'s run directory: count/
#                           join/ fit/ model/ eval.json stages.json
#                           (vocab/ in a first run)
#   current  -> runs/...    the model in use; switched atomically (rename of a
#                           symlink) only after `snm train` succeeded and
#                           `snm validate` found every stage of the run whole
#   previous -> runs/...    the model before it, kept for a quick roll-back:
#                           ln -s runs/OLD ROOT/current.new && mv -T ROOT/current.new ROOT/current
#   counted.txt             every shard already counted, one absolute path a line
# A failed run changes neither current nor counted.txt: its shards are
# retried by the next run.  Runs other than current and previous are deleted.
#
# crontab (every night at 03:15; flock in the script prevents overlaps):
#   15 3 * * * ROOT=/srv/snm INCOMING='/data/corpus/*.txt.gz' HELDOUT=/data/dev.txt TEST=/data/test.txt PYTHON=/opt/snm/.venv/bin/python /opt/snm/launch/cron_retrain.sh >> /srv/snm/retrain.log 2>&1
#
# Variables (defaults in brackets):
#   PYTHON       the Python that has snm installed [REPO/.venv/bin/python, else python3]
#   ROOT         state directory (layout above) [REPO/demo-output/retrain]
#   INCOMING     glob of the training shards; those not in counted.txt are new
#                [ROOT/incoming/*.txt]
#   HELDOUT      held-out text [required]
#   TEST         test text [required]
#   CONFIG       preset or configuration file (a later run must keep it) [5gram]
#   VOCAB        vocabulary file, first run only []
#   MIN_COUNT    without VOCAB: vocabulary of the first run's shards, words seen
#                at least this often [2]
#   NUM_BUCKETS  count buckets, first run only [16]
#   TAG          corpus tag of the new shards: `snm train --tagged` with
#                --train TAG=... (keep the kind of the first run: all tagged or
#                none) []
#   LAUNCHER     arguments of `python -m snm.launchers` for the Beam stages
#                ['local --workers 2'], e.g. 'flink --flink_master jm:8081'
#   FIT_ARGS     more `snm train` arguments, word-split: its fit options, e.g.
#                '--epochs 3' (not --vocab, --min_count, --num_buckets or
#                --add_to: the script chooses them) []
#   MAX_PPL_RATIO  refuse to switch when the new test perplexity exceeds the
#                current one times this, e.g. 1.02 [empty: always switch]
#   FULL         1: count every shard afresh instead of adding to current [0]
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$REPO/.venv/bin/python" ]]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
ROOT="${ROOT:-$REPO/demo-output/retrain}"
INCOMING="${INCOMING:-$ROOT/incoming/*.txt}"
HELDOUT="${HELDOUT:?set HELDOUT to the held-out text}"
TEST="${TEST:?set TEST to the test text}"
CONFIG="${CONFIG:-5gram}"
VOCAB="${VOCAB:-}"
MIN_COUNT="${MIN_COUNT:-2}"
NUM_BUCKETS="${NUM_BUCKETS:-16}"
TAG="${TAG:-}"
LAUNCHER="${LAUNCHER:-local --workers 2}"
FIT_ARGS="${FIT_ARGS:-}"
MAX_PPL_RATIO="${MAX_PPL_RATIO:-}"
FULL="${FULL:-0}"

log() { echo "[$(date -u +%FT%TZ)] cron_retrain: $*" >&2; }
absolute() { case "$1" in /*|*://*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
ROOT="$(absolute "$ROOT")"
HELDOUT="$(absolute "$HELDOUT")"
TEST="$(absolute "$TEST")"
mkdir -p "$ROOT/runs"
touch "$ROOT/counted.txt"

# One run at a time: a run that lasts longer than the cron period makes the
# next one exit here.
exec 9> "$ROOT/.lock"
if ! flock -n 9; then
  log "another retraining holds $ROOT/.lock; nothing done"
  exit 0
fi

# The new shards: files matching INCOMING that are not in counted.txt.
OLD=""
OLD_COUNT=""
if [[ "$FULL" != 1 ]]; then
  for name in count counts; do  # counts/: runs of releases before the stage directories' one name
    if [[ -e "$ROOT/current/$name/manifest.json" ]]; then
      OLD="$(readlink -f "$ROOT/current")"; OLD_COUNT="$OLD/$name"; break
    fi
  done
fi
shopt -s nullglob
new=()
for path in $INCOMING; do  # unquoted on purpose: the shell expands the glob
  [[ -f "$path" ]] || continue
  path="$(absolute "$path")"
  if [[ -n "$OLD" ]] && grep -qxF -- "$path" "$ROOT/counted.txt"; then continue; fi
  new+=("$path")
done
shopt -u nullglob
if (( ${#new[@]} == 0 )); then
  log "no new shards matching $INCOMING; current model unchanged"
  exit 0
fi

RUN="$ROOT/runs/$(date -u +%Y%m%dT%H%M%SZ)"
[[ -e "$RUN" ]] && RUN="$RUN-$$"
mkdir -p "$RUN/shards"
# The run's shards as symlinks in one directory: one --train glob, whatever
# their number, and a record of what this run added.
for i in "${!new[@]}"; do
  ln -s "${new[$i]}" "$RUN/shards/$(printf '%06d' "$i")-$(basename "${new[$i]}")"
done
spec="$RUN/shards/*"
[[ -n "$TAG" ]] && spec="$TAG=$spec"
log "run $RUN: ${#new[@]} new shard(s)${OLD_COUNT:+, adding to $OLD_COUNT}"

read -r -a launcher_args <<< "$LAUNCHER"
options="$("$PYTHON" -m snm.launchers "${launcher_args[@]}")"
mapfile -t BEAM_OPTS <<< "$options"
read -r -a fit_extra <<< "$FIT_ARGS"
train_args=(--config "$CONFIG" --train "$spec" --heldout "$HELDOUT" --test "$TEST" --out "$RUN")
[[ -n "$TAG" ]] && train_args+=(--tagged)
train_args+=(${fit_extra[@]+"${fit_extra[@]}"})
set -x
if [[ -n "$OLD" ]]; then
  # The new shards counted and added to the current counts, then join, fit,
  # apply, eval on the sum; vocabulary, tags and buckets are OLD's.
  "$PYTHON" -m snm train "${train_args[@]}" --add_to "$OLD_COUNT" "${BEAM_OPTS[@]}"
else
  if [[ -n "$VOCAB" ]]; then vocab_args=(--vocab "$(absolute "$VOCAB")"); else vocab_args=(--min_count "$MIN_COUNT"); fi
  "$PYTHON" -m snm train "${train_args[@]}" "${vocab_args[@]}" --num_buckets "$NUM_BUCKETS" \
    "${BEAM_OPTS[@]}"
fi
set +x
# Every stage of the run whole (the stage table of `snm train`, read by `snm validate`).
if ! "$PYTHON" -m snm validate "$RUN" >&2; then
  log "$RUN is not whole after snm train; current model unchanged ($RUN kept)"
  exit 1
fi

# Quality gate (optional): keep the current model if the new one is worse.
if [[ -n "$MAX_PPL_RATIO" && -e "$ROOT/current/eval.json" ]]; then
  if ! "$PYTHON" - "$ROOT/current/eval.json" "$RUN/eval.json" "$MAX_PPL_RATIO" <<'EOF'
import json, sys
def perplexity(path):  # snm train's eval.json; {"perplexity": ...} of older runs
    report = json.load(open(path))
    return report.get("adjusted", report)["perplexity"]
old, new = (perplexity(p) for p in sys.argv[1:3])
print(f"test perplexity: current {old:.3f}, new {new:.3f}", file=sys.stderr)
sys.exit(0 if new <= old * float(sys.argv[3]) else 1)
EOF
  then
    log "new model is worse than current by more than MAX_PPL_RATIO=$MAX_PPL_RATIO; not switched ($RUN kept)"
    exit 1
  fi
fi

# Switch: previous -> old current, current -> this run.  Each symlink is
# replaced by rename(2) (mv -T), so a reader sees the old or the new target,
# never a missing link.
if [[ -L "$ROOT/current" ]]; then
  ln -sfn "$(readlink "$ROOT/current")" "$ROOT/previous.new"
  mv -T "$ROOT/previous.new" "$ROOT/previous"
fi
ln -sfn "runs/$(basename "$RUN")" "$ROOT/current.new"
mv -T "$ROOT/current.new" "$ROOT/current"
if [[ -n "$OLD" ]]; then
  printf '%s\n' "${new[@]}" >> "$ROOT/counted.txt"
else  # a full count: exactly these shards are counted
  printf '%s\n' "${new[@]}" > "$ROOT/counted.txt.new"
  mv "$ROOT/counted.txt.new" "$ROOT/counted.txt"
fi
log "current -> $RUN: $(tr -d '\n' < "$RUN/eval.json")"

# Keep current and previous; delete older runs.
keep_current="$(readlink -f "$ROOT/current")"
keep_previous="$(readlink -f "$ROOT/previous" 2>/dev/null || true)"
for run in "$ROOT"/runs/*/; do
  run="${run%/}"
  if [[ "$run" != "$keep_current" && "$run" != "$keep_previous" ]]; then
    log "deleting old run $run"
    rm -rf -- "$run"
  fi
done
