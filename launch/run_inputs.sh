# Sourced by local.sh, dask.sh and flink.sh (not run on its own): turns the input
# variables into `snm train` arguments.  Both launchers run `snm train` on a
# machine that sees the same paths as the Beam workers (this machine, or a
# volume shared with the Flink task managers), so the rules are the same.
#
# Reads:  PYTHON OUT TRAIN HELDOUT TEST VOCAB MIN_COUNT SYNTH_SENTENCES, and
#         LAUNCHER_NAME for messages.
# Sets:   OUT HELDOUT TEST as absolute paths, TRAIN_ARGS and VOCAB_ARGS arrays.
# Without TRAIN it writes the synthetic example into OUT/corpus and uses it.

# Absolute paths: the Beam workers need not share the launcher's working directory.
absolute() { case "$1" in /*|*://*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
OUT="$(absolute "$OUT")"

if [[ -z "$TRAIN" ]]; then
  echo "== no TRAIN given: the synthetic example in $OUT/corpus ==" >&2
  "$PYTHON" -m snm synth --out "$OUT/corpus" --train_sentences "$SYNTH_SENTENCES" >/dev/null
  TRAIN="$OUT/corpus/train.txt"
  HELDOUT="${HELDOUT:-$OUT/corpus/dev.txt}"
  TEST="${TEST:-$OUT/corpus/test.txt}"
fi
if [[ -z "$HELDOUT" || -z "$TEST" ]]; then
  echo "$LAUNCHER_NAME: set HELDOUT and TEST along with TRAIN" >&2
  exit 2
fi
HELDOUT="$(absolute "$HELDOUT")"
TEST="$(absolute "$TEST")"

# TRAIN -> --train [TAG=]ABSOLUTE_GLOB ...  (no shell globbing: Beam expands the globs)
TRAIN_ARGS=()
read -r -a specs <<< "$TRAIN"
for spec in "${specs[@]}"; do
  if [[ "$spec" =~ ^([A-Za-z0-9_.-]+)=(.+)$ ]]; then
    TRAIN_ARGS+=(--train "${BASH_REMATCH[1]}=$(absolute "${BASH_REMATCH[2]}")")
  else
    TRAIN_ARGS+=(--train "$(absolute "$spec")")
  fi
done

if [[ -n "$VOCAB" ]]; then
  VOCAB_ARGS=(--vocab "$(absolute "$VOCAB")")
else
  VOCAB_ARGS=(--min_count "$MIN_COUNT")
fi
