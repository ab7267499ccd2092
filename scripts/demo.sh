#!/usr/bin/env bash
# The demo (`make demo`): the demo trainer runs once uninterrupted, then
# again while being killed with SIGKILL at two random moments — resuming
# from its newest checkpoint each time — and the final model and optimizer
# state of the two runs are compared byte for byte.
#
#   scripts/demo.sh [BUILD_DIR]      (default build/release)
set -euo pipefail

build=${1:-build/release}
train=$build/examples/train/train
ckpt=$build/tools/ckpt/ckpt
dir=$(mktemp -d /tmp/ckpt-demo-XXXXXX)
args=(--epochs 6 --save-every-steps 5)

echo "ckpt demo: checkpoints in $dir"
echo
echo "== run 1: uninterrupted"
start=$(date +%s%N)
"$train" --root "$dir/reference" --out "$dir/reference.bin" "${args[@]}"
ms=$(( ($(date +%s%N) - start) / 1000000 ))

echo
echo "== run 2: the same job, killed (SIGKILL) twice at random moments"
for attempt in 1 2; do
  # Somewhere between a fifth and two fifths of a whole run in.
  delay_ms=$(( ms / 5 + RANDOM % (ms / 5 + 1) ))
  "$train" --root "$dir/run" --out "$dir/run.bin" "${args[@]}" &
  pid=$!
  sleep "$(awk -v m="$delay_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
  if kill -KILL "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || true
    echo "-- killed with SIGKILL after ${delay_ms} ms; starting it again"
  else
    wait "$pid" || true
    echo "-- it finished before the kill (${delay_ms} ms); starting it again"
  fi
done
"$train" --root "$dir/run" --out "$dir/run.bin" "${args[@]}"

echo
echo "== checkpoints of the killed and resumed run"
"$ckpt" ls "$dir/run"

echo
if cmp -s "$dir/reference.bin" "$dir/run.bin"; then
  echo "final weights of both runs: bit-identical"
else
  echo "final weights of both runs: DIFFERENT"
  exit 1
fi
