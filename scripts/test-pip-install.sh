#!/usr/bin/env bash
# `pip install` of a fresh clone, the way a user's first hour goes (step 4 of
# scripts/test-wheel.sh, so part of `make test`):
#
#   scripts/test-pip-install.sh [PYTHON]      (default /usr/bin/python3)
#
# Clones the repository's committed HEAD into a temporary folder (no build
# folder, nothing but what git tracks; uncommitted changes are not in it,
# and the script says so) and runs the README's install block there as
# written (a fresh virtual environment of PYTHON, `pip install .`): pip
# must neither download nor need anything beyond what
# scripts/install-deps.sh --runtime installs, and the build backend
# (scripts/ckpt_wheel.py) configures and builds the library and the ckpt
# tool with CMake from nothing. Then, in that environment:
# `ckpt --version` (the project's version), `ckpt --help`, `python -m ckpt
# --version` (the same), and a save and a load from Python.
#
# Prints the time pip took (the whole build; not checked against a limit:
# it depends on the machine and on a compiler cache) and exits 1 when any
# check fails.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-/usr/bin/python3}"
version="$(sed -n 's/^project(ckpt VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
say() { echo "test-pip-install: $*"; }
fail() { say "FAILED: $*"; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/ckpt-test-pip.XXXXXX")"
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH CKPT_LIBRARY PYTHONHOME CKPT_BUILD_DIR
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1

if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  say "warning: the working tree has uncommitted changes; this tests HEAD"
fi
git clone --quiet --no-hardlinks "$repo" "$work/src" ||
  fail "git clone $repo"
say "cloned $(git -C "$work/src" rev-parse --short HEAD) into $work/src"

# The README's install block, as written, in the clone: its `python3` is
# PYTHON, its `~` a folder of this run, pip neither downloads nor needs
# anything beyond what scripts/install-deps.sh --runtime installs
# (PIP_NO_INDEX), and its `pip install torch...` line is left out, said in
# the log: PyTorch's wheel is a gigabyte to unpack, its dependencies would
# come from an index, and the project's own .venv installs the same pin
# (requirements.txt) in every `make test`.
readme_block="$(awk '/^## Install/ {on = 1} on && /^```sh/ {inside = 1; next}
                     inside && /^```/ {exit} inside {print}' "$repo/README.md")"
case "$readme_block" in
  *"pip install ."*) ;;
  *) fail "README.md's Install section has no sh block with pip install ." ;;
esac
mkdir -p "$work/home" "$work/bin"
ln -s "$python" "$work/bin/python3"
script="$(printf '%s\n' "$readme_block" |
          sed 's/^pip install torch.*/: left out here: &/')"
say "running README.md's install block:"
printf '%s\n' "$script" | sed 's/^/  | /'
start=$SECONDS
if ! (cd "$work/src" && HOME="$work/home" PATH="$work/bin:$PATH" \
      PIP_NO_INDEX=1 bash -euo pipefail -c "$script") >"$work/pip.log" 2>&1; then
  cat "$work/pip.log"
  fail "README.md's install block ($((SECONDS - start)) s)"
fi
venv="$work/home/ckpt-venv"
[ -x "$venv/bin/ckpt" ] ||
  fail "README.md's install block made no $venv with a ckpt command"
say "README.md's install block (venv, configure, build, wheel, install):" \
  "$((SECONDS - start)) s"
tail -n 3 "$work/pip.log" | sed 's/^/  | /'

cd "$work" || exit 1  # outside both trees: only the installed package imports
failed=()
check() {  # check NAME EXPECTED COMMAND...: COMMAND's stdout is EXPECTED
  local name="$1" expected="$2" out
  shift 2
  if ! out="$("$@" 2>"$work/err")"; then
    say "$name exited non-zero: $(cat "$work/err")"
    failed+=("$name")
  elif [ -n "$expected" ] && [ "$out" != "$expected" ]; then
    say "$name printed '$out', not '$expected'"
    failed+=("$name")
  fi
}
# The console script pip made, found on the environment's PATH.
PATH="$venv/bin:$PATH" check "ckpt --version" "ckpt $version" ckpt --version
case "$(PATH="$venv/bin:$PATH" command -v ckpt)" in
  "$venv/bin/ckpt") ;;
  *) say "ckpt is not the environment's $venv/bin/ckpt"; failed+=("PATH") ;;
esac
check "ckpt --help" "" "$venv/bin/ckpt" --help
if ! "$venv/bin/ckpt" --help | grep -q "ckpt ls"; then
  say "ckpt --help lists no commands"
  failed+=("ckpt --help")
fi
check "python -m ckpt --version" "ckpt $version" \
  "$venv/bin/python" -m ckpt --version
check "save and load from Python" "ok" "$venv/bin/python" -c '
import array, ckpt, sys
mgr = ckpt.open(sys.argv[1], keep_last=2)
mgr.save(3, {"w": array.array("f", [1.5, 2.5]), "epoch": 7})
state = mgr.load()
assert mgr.latest() == 3, mgr.latest()
w = memoryview(state["w"]).tobytes()
assert w == array.array("f", [1.5, 2.5]).tobytes(), state
assert state["epoch"] == 7, state
print("ok")' "file://$work/run"
# The tool reads what Python wrote.
if ! "$venv/bin/ckpt" ls "$work/run" | grep -q '^3 '; then
  say "ckpt ls does not list the step Python saved"
  failed+=("ckpt ls")
fi

if [ ${#failed[@]} -gt 0 ]; then
  fail "${failed[*]}"
fi
say "all passed ($SECONDS s in all)"
