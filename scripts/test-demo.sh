#!/usr/bin/env bash
# `make demo` checked (the ctest demo_script):
#
#   scripts/test-demo.sh BUILD_DIR
#
# runs scripts/demo.sh on BUILD_DIR with a TMPDIR and an XDG_STATE_HOME of its
# own and no CKPT_CATALOG, and fails unless
#   1. the demo exits 0 and ends finding both runs bit-identical;
#   2. its output has the shape of scripts/demo.expected, the transcript the
#      README shows: the same sections in the same order, and the same kinds
#      of lines. A line's kind is the line with its numbers, hashes, times
#      and folder names masked and its spaces squeezed, so that a new warning,
#      a changed table heading or a lost line shows, while the kill moments
#      (which decide how many lines of each kind there are) do not. The few
#      kinds that depend on where a kill lands are listed below;
#   3. nothing is left behind: its TMPDIR is empty, the folder its first
#      line names is gone, no /dev/shm/ckpt-demo-* folder appeared, and the
#      default catalog (XDG_STATE_HOME/ckpt) was not created.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: scripts/test-demo.sh BUILD_DIR}" && pwd)" || exit 1
work="$(mktemp -d "${TMPDIR:-/tmp}/ckpt-test-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/tmp" "$work/state"

shm_before="$(ls -d /dev/shm/ckpt-demo-* 2>/dev/null | sort)"
status=0
env -u CKPT_CATALOG TMPDIR="$work/tmp" XDG_STATE_HOME="$work/state" \
  "$repo/scripts/demo.sh" "$build" >"$work/out" 2>&1 || status=$?
cat "$work/out"
echo
failed=()
[ "$status" -eq 0 ] || failed+=("the demo exited $status")
grep -qx "final weights of both runs: bit-identical" "$work/out" ||
  failed+=("no 'final weights of both runs: bit-identical'")

/usr/bin/python3 - "$repo/scripts/demo.expected" "$work/out" <<'EOF' ||
import re, sys

def kind(line):
    line = re.sub(r"(/[\w.-]+)*/ckpt-demo-\w+", "DIR", line)
    line = re.sub(r"\bhost [^\s,)]+", "host HOST", line)
    line = re.sub(r"\b[0-9a-f]{64}\b", "SHA256", line)
    line = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", line)
    line = re.sub(r"\d+(\.\d+)?", "N", line)
    return " ".join(line.split())

# Kinds of line whose presence depends on where a kill lands, each with the
# kind of the transcript it stands in for (None: it may be absent).
ALTERNATIVES = {
    # The kill came after the run had ended.
    "-- it finished before the kill; starting it again":
        "-- killed with SIGKILL N ms after epoch N ended; starting it again",
    "-- it finished before the kill":
        "-- killed with SIGKILL in epoch N",
    "ckpt runner: resumed from step N: the job had finished":
        "ckpt runner: resumed from step N: continuing epoch N",
    # The kill came between an epoch's end and the next save.
    "ckpt runner: resumed from step N: next epoch is N":
        "ckpt runner: resumed from step N: continuing epoch N",
}
# Kinds of line that a run may show or lack (and so may the transcript):
# the local tier's newest share is uncommitted only when the kill landed
# inside its save.
OPTIONAL = {"N N N KiB NOT COMMITTED (never restored)"}

expected = open(sys.argv[1]).read().splitlines()
actual = open(sys.argv[2]).read().splitlines()
if expected and expected[0].startswith("$ "):
    expected = expected[1:]  # the command itself
want = {kind(l) for l in expected}
got = {ALTERNATIVES.get(kind(l), kind(l)) for l in actual}
ok = True
for k in sorted(got - want - OPTIONAL):
    print(f"test-demo: a kind of line the transcript lacks: {k!r}")
    ok = False
for k in sorted(want - got - OPTIONAL):
    print(f"test-demo: a kind of line of the transcript missing: {k!r}")
    ok = False
sections = lambda lines: [l for l in lines if l.startswith("== ")]
if sections(expected) != sections(actual):
    print(f"test-demo: sections {sections(actual)}, "
          f"the transcript's {sections(expected)}")
    ok = False
sys.exit(0 if ok else 1)
EOF
  failed+=("the output's shape differs from scripts/demo.expected")

if [ -n "$(ls -A "$work/tmp")" ]; then
  failed+=("left in TMPDIR: $(ls -A "$work/tmp" | tr '\n' ' ')")
fi
dir="$(sed -n '1s/^ckpt demo: checkpoints in \([^ ]*\).*/\1/p' "$work/out")"
if [ -z "$dir" ]; then
  failed+=("the first line names no folder")
elif [ -e "$dir" ]; then
  failed+=("left behind: $dir")
fi
shm_new="$(comm -13 <(echo "$shm_before") \
  <(ls -d /dev/shm/ckpt-demo-* 2>/dev/null | sort))"
[ -z "$shm_new" ] || failed+=("left behind: $shm_new")
if [ -n "$(ls -A "$work/state")" ]; then
  failed+=("wrote the default catalog: $(find "$work/state" | tr '\n' ' ')")
fi

if [ ${#failed[@]} -gt 0 ]; then
  for f in "${failed[@]}"; do echo "test-demo: FAILED: $f"; done
  exit 1
fi
echo "test-demo: the demo's output has the transcript's shape and it left nothing behind"
