#!/usr/bin/env bash
# The demo (`make demo`): the demo trainer runs once uninterrupted, then
# again while being killed with SIGKILL at two random moments — resuming
# from its newest checkpoint each time — and the final model and optimizer
# state of the two runs are compared byte for byte. A third run keeps a
# local tier in memory (/dev/shm, a save every step) beside the durable
# root (every 10 steps): killed with SIGKILL, it resumes from memory; its
# catalog lists the steps of both tiers.
#
#   scripts/demo.sh [BUILD_DIR]      (default build/release)
#
# Everything it writes is in two folders of its own, ${TMPDIR:-/tmp}/ckpt-demo-*
# and /dev/shm/ckpt-demo-*, removed when it exits however it ends (the
# trainers it started are killed first). Its catalog is a file in the first:
# the user's default catalog is left alone. scripts/demo.expected is the
# transcript the README shows; scripts/test-demo.sh checks the output
# against it.
set -euo pipefail

build=${1:-build/release}
train=$build/examples/train/train
ckpt=$build/tools/ckpt/ckpt
dir=$(mktemp -d "${TMPDIR:-/tmp}/ckpt-demo-XXXXXX")
shm=$(mktemp -d /dev/shm/ckpt-demo-XXXXXX)
cleanup() {
  local job
  for job in $(jobs -p); do kill_job "$job" || true; done
  rm -rf "$dir" "$shm"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# Whatever would open the default catalog opens none.
export CKPT_CATALOG=none

# Kills background job $1 with SIGKILL and reaps it; false if it had ended
# already. bash's own notice of a job killed by a signal ("line N: PID
# Killed ...") comes whenever it reaps the job: within the braces, it goes
# to /dev/null.
kill_job() {
  local killed=1
  { kill -KILL "$1" || killed=0; wait "$1"; } 2>/dev/null || true
  [ "$killed" -eq 1 ]
}
args=(--epochs 6 --save-every-steps 5)

echo "ckpt demo: checkpoints in $dir (removed at the end)"
echo
echo "== run 1: uninterrupted"
start=$(date +%s%N)
"$train" --root "$dir/reference" --out "$dir/reference.bin" "${args[@]}"
ms=$(( ($(date +%s%N) - start) / 1000000 ))

echo
echo "== run 2: the same job, killed (SIGKILL) twice at random moments"
# Each kill comes at a random moment of a random epoch: after the trainer
# prints the loss of epoch `after`, within one epoch's time.
epoch_ms=$(( ms / 6 ))
after=$(( RANDOM % 2 ))
for attempt in 1 2; do
  log=$dir/run-$attempt.log
  : >"$log"
  "$train" --root "$dir/run" --out "$dir/run.bin" "${args[@]}" >"$log" 2>&1 &
  pid=$!
  tail -s 0.05 -f --pid="$pid" "$log" &
  shown=$!
  until grep -q "^epoch $after: loss" "$log" || ! kill -0 "$pid" 2>/dev/null; do
    sleep 0.01
  done
  delay_ms=$(( RANDOM % (epoch_ms + 1) ))
  sleep "$(awk -v m="$delay_ms" 'BEGIN { printf "%.3f", m / 1000 }')"
  if kill_job "$pid"; then
    wait "$shown" 2>/dev/null || true
    echo "-- killed with SIGKILL ${delay_ms} ms after epoch $after ended; starting it again"
  else
    wait "$shown" 2>/dev/null || true
    echo "-- it finished before the kill; starting it again"
  fi
  after=$(( after + 2 ))
done
"$train" --root "$dir/run" --out "$dir/run.bin" "${args[@]}"

echo
echo "== checkpoints of the killed and resumed run"
"$ckpt" ls "$dir/run"

echo
echo "== run 3: tiers — a save to memory every step, to the root every 10"
tiers=(--local-tier "$shm/local" --local-every 1 --durable-every 10 --replicas 0
       --catalog "$dir/catalog.sqlite")
log=$dir/run-tiers.log
: >"$log"  # before the trainer's own redirection, for the grep below
"$train" --root "$dir/tiered" --out "$dir/tiered.bin" "${args[@]}" "${tiers[@]}" \
  >"$log" 2>&1 &
pid=$!
until grep -q "^epoch 2: loss" "$log" || ! kill -0 "$pid" 2>/dev/null; do
  sleep 0.01
done
sleep "$(awk -v m="$(( RANDOM % (epoch_ms + 1) ))" 'BEGIN { printf "%.3f", m / 1000 }')"
if kill_job "$pid"; then
  echo "-- killed with SIGKILL in epoch 3"
else
  echo "-- it finished before the kill"
fi
echo "-- the local tier (one node) and the durable root hold:"
"$ckpt" ls "$shm/local"
"$ckpt" ls "$dir/tiered" | sed -n '1p; $p'
"$train" --root "$dir/tiered" --out "$dir/tiered.bin" "${args[@]}" "${tiers[@]}" \
  2>&1 | tee "$dir/run-tiers-2.log" | grep -E "restored|final state"
if ! grep -q "from the local tier" "$dir/run-tiers-2.log"; then
  echo "the tiered run did not resume from the local tier"
  exit 1
fi
if ! cmp -s "$dir/reference.bin" "$dir/tiered.bin"; then
  echo "final weights of the tiered run: DIFFERENT"
  exit 1
fi
echo "final weights of the tiered run: bit-identical"
echo "-- the catalog lists both tiers' newest steps (latest offers the durable one):"
"$ckpt" catalog list --catalog "$dir/catalog.sqlite" --limit 3
"$ckpt" catalog latest train-demo --catalog "$dir/catalog.sqlite"

echo
if cmp -s "$dir/reference.bin" "$dir/run.bin"; then
  echo "final weights of both runs: bit-identical"
else
  echo "final weights of both runs: DIFFERENT"
  exit 1
fi
