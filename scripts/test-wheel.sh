#!/usr/bin/env bash
# The wheel, installed the way a user installs it (`make test`'s phase
# test-wheel, after `make wheel`):
#
#   scripts/test-wheel.sh [BUILD_DIR] [WHEEL_DIR]     (build/release, dist)
#
# 1. A fresh virtual environment of /usr/bin/python3 that also sees the
#    packages of the project's .venv (PyTorch 2.13, NumPy, h5py, pytest,
#    Lightning: scripts/install-deps.sh, requirements.txt) through a .pth
#    file, the wheel installed into it with pip --no-index (so ckpt itself
#    comes from the wheel, never from .venv), and python/tests (less the
#    suites of many-rank jobs, which ctest ran: see below) run from a folder
#    outside the source tree, with no PYTHONPATH: the installed package is
#    the one imported. BUILD_DIR gives the tests'
#    interop_helper.
# 2. For every other CPython 3.9+ under pyenv's versions folder ($(pyenv
#    root), ~/.pyenv, /root/.pyenv), without NumPy: a virtual environment,
#    the wheel, and python/tests/test_no_numpy.py (plain unittest). None
#    found: the step says so and is skipped.
# 3. examples/python/train.py, bench/peers/peers.py (a small state),
#    bench/peers/peers_gpu.py (the same on a CUDA device) and
#    bench/load_device.py (the all-or-nothing load into one; without a
#    device in PyTorch both print why they skipped) from the environment
#    of 1.
# 4. `pip install` of a fresh clone of the repository's HEAD into a new
#    virtual environment, building from nothing, then the `ckpt` command and
#    a save and load (scripts/test-pip-install.sh; it prints the build's
#    time).
#
# Runs every step, prints the time of each and the Python versions that
# ran, and exits 1 if any step failed.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$repo/build/release}" && pwd)" || exit 1
dist="$(cd "${2:-$repo/dist}" && pwd)" || exit 1
version="$(sed -n 's/^project(ckpt VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")"
wheel="$dist/ckpt-$version-py3-none-linux_$(uname -m).whl"
if [ ! -f "$wheel" ]; then
  echo "test-wheel: $wheel does not exist: run make wheel" >&2
  exit 1
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/ckpt-test-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1  # outside the source tree: nothing there is importable
unset PYTHONPATH CKPT_LIBRARY PYTHONHOME
export PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1
failed=()
say() { echo "test-wheel: $*"; }
join() {  # its arguments separated by ", ", or "none"
  local out="" x
  for x in "$@"; do out+="${out:+, }$x"; done
  echo "${out:-none}"
}

# A fresh environment of interpreter $1 (venv options in $3...) at $2 with
# the wheel installed.
install_into() {
  local python="$1" dir="$2"
  shift 2
  "$python" -m venv "$@" "$dir" &&
    "$dir/bin/python" -m pip install --no-index --quiet "$wheel"
}

# --- 1. Debian's python, the whole suite ------------------------------------
start=$SECONDS
say "installing $(basename "$wheel") into a fresh venv of /usr/bin/python3"
deps_site="$("$repo/.venv/bin/python" -c \
  'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)"
if [ -z "$deps_site" ]; then
  say "no $repo/.venv: run scripts/install-deps.sh"
  failed+=("the project's .venv")
elif install_into /usr/bin/python3 "$work/venv"; then
  py="$work/venv/bin/python"
  echo "$deps_site" >"$("$py" -c \
    'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ckpt-test-deps.pth"
  where="$("$py" -c 'import ckpt; print(ckpt.__version__, ckpt.__file__)')"
  say "imports ckpt $where"
  case "${where#* }" in
    "$work/venv/"*) ;;
    *) say "ckpt was imported from ${where#* }, not from the venv"
       failed+=("import") ;;
  esac
  # Saving and loading leave Open MPI alone: only mpi_communicator() loads it.
  if ! "$py" -c 'import array, ckpt, sys, tempfile
with tempfile.TemporaryDirectory(dir=".") as d:
    m = ckpt.open(d)
    m.save(1, {"a": array.array("f", [1.0])})
    m.load()
    mpi = "libmpi" in open("/proc/self/maps").read()
sys.exit(mpi)'; then
    say "import ckpt, save or load loaded Open MPI"
    failed+=("Open MPI loaded without mpi_communicator()")
  fi
  # ckpt.keras is in the wheel: it imports from the venv, Keras from the
  # .venv's packages (its suites ran in ctest on the build's package).
  if ! KERAS_BACKEND=jax "$py" -c 'import ckpt.keras, sys
sys.exit(not ckpt.keras.__file__.startswith(sys.prefix + "/"))'; then
    say "the installed wheel's ckpt.keras does not import from the venv"
    failed+=("ckpt.keras")
  fi
  # ckpt.jax and its private modules likewise (under a second: JAX's import);
  # jax_test ran it in ctest on the build's package.
  if ! "$py" -c 'import ckpt.jax, ckpt._jax_tree, ckpt._jax_restore, sys
sys.exit(not all(m.__file__.startswith(sys.prefix + "/") for m in
                 (ckpt.jax, ckpt._jax_tree, ckpt._jax_restore)))'; then
    say "the installed wheel's ckpt.jax does not import from the venv"
    failed+=("ckpt.jax")
  fi
  # The wheel's `ckpt` command: on the environment's PATH, and the same
  # program as python -m ckpt.
  if [ "$("$work/venv/bin/ckpt" --version)" != "ckpt $version" ] ||
     [ "$("$py" -m ckpt --version)" != "ckpt $version" ]; then
    say "ckpt --version or python -m ckpt --version does not print ckpt $version"
    failed+=("the ckpt command")
  fi
  # Quiet: no warning of Python's (a module run after the package imported
  # it) before the command's own output.
  noise="$("$py" -m ckpt --version 2>&1 >/dev/null)"
  if [ -n "$noise" ]; then
    say "python -m ckpt --version wrote to stderr: $noise"
    failed+=("python -m ckpt is not quiet")
  fi
  [ -x "$build/python/interop_helper" ] ||
    say "warning: $build/python/interop_helper is not built (make build)"
  env=(CKPT_INTEROP_HELPER="$build/python/interop_helper"
       CKPT_CLI="$build/tools/ckpt/ckpt"
       CKPT_FAKE_CUDA="$build/src/testing/libckpt_fake_cuda.so"
       CKPT_TRAIN_EXAMPLE="$repo/examples/python/train.py"
       CKPT_TORCHRUN_EXAMPLE="$repo/examples/python/torchrun_train.py")
  if mpiexec="$(command -v mpiexec)"; then
    env+=(CKPT_MPIEXEC="$mpiexec")
  fi
  # The suites of many-rank jobs (torchrun, mpiexec, Lightning fits) test
  # the jobs, not the installation, and ran in ctest (python_test and
  # python_multirank_test) on the same package files and library: here
  # test_torchrun.py and
  # test_torch_api.py stand for them (jobs importing the installed
  # package), which keeps this phase from paying for them twice.
  jobs_only=(test_cluster.py test_dcp_files.py test_dcp_storage.py
             test_fsdp2.py test_lightning.py test_sampler.py test_tiers.py
             test_torchrun_train.py)
  ignore=()
  for t in "${jobs_only[@]}"; do ignore+=(--ignore "$repo/python/tests/$t"); done
  say "python/tests on the installed wheel, less the job suites that ran in ctest: $(join "${jobs_only[@]}")"
  env "${env[@]}" "$py" -m pytest -q -p no:cacheprovider "${ignore[@]}" \
    "$repo/python/tests" || failed+=("python/tests")
else
  failed+=("install into /usr/bin/python3's venv")
fi
say "python/tests on the installed wheel: $((SECONDS - start)) s"

# --- 2. every other CPython 3.9+, without NumPy ----------------------------
start=$SECONDS
roots=()
if command -v pyenv >/dev/null; then
  roots+=("$(pyenv root)/versions")
fi
roots+=("${HOME:-/nonexistent}/.pyenv/versions" /root/.pyenv/versions)
seen=" "
ran=()
skipped=()
for root in "${roots[@]}"; do
  [ -d "$root" ] || continue
  real="$(cd "$root" 2>/dev/null && pwd -P)" || continue
  case "$seen" in *" $real "*) continue ;; esac
  seen+="$real "
  while read -r dir <&3; do
    name="$(basename "$dir")"
    python="$dir/bin/python"
    [ -x "$dir/bin/python3" ] && python="$dir/bin/python3"
    if [ ! -x "$python" ]; then
      skipped+=("$name (no interpreter)")
      continue
    fi
    # Written for any Python, 2.7 included.
    read -r impl v major minor < <("$python" -c 'import platform, sys
sys.stdout.write("%s %d.%d.%d %d %d\n" % ((platform.python_implementation(),)
    + tuple(sys.version_info[:3]) + tuple(sys.version_info[:2])))' 2>/dev/null)
    if [ -z "${v:-}" ]; then
      skipped+=("$name (does not run)")
    elif [ "$impl" != CPython ]; then
      skipped+=("$v ($impl)")
    elif [ "$major" -lt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -lt 9 ]; }; then
      skipped+=("$v (< 3.9)")
    else
      t=$SECONDS
      log="$work/python-$v.log"
      if install_into "$python" "$work/venv-$v" >"$log" 2>&1 &&
         CKPT_EXPECT_NO_NUMPY=1 "$work/venv-$v/bin/python" -m unittest \
           discover -s "$repo/python/tests" -p test_no_numpy.py >>"$log" 2>&1; then
        say "Python $v: $(grep -E '^Ran ' "$log") OK ($((SECONDS - t)) s)"
        ran+=("$v")
      else
        say "Python $v: FAILED"
        cat "$log"
        failed+=("Python $v")
      fi
    fi
    unset impl v major minor
  done 3< <(find "$real" -mindepth 1 -maxdepth 1 -type d -o -type l | sort -V)
done
if [ ${#ran[@]} -eq 0 ] && [ ${#skipped[@]} -eq 0 ]; then
  say "no pyenv versions folder (looked in ${roots[*]}): the NumPy-free step is skipped"
else
  say "ran the NumPy-free tests on: $(join "${ran[@]}"); skipped: $(join "${skipped[@]}")"
fi
say "other Pythons: $((SECONDS - start)) s"

# --- 3. the example trainer and the peers benchmark --------------------------
start=$SECONDS
if [ -x "$work/venv/bin/python" ]; then
  "$work/venv/bin/python" "$repo/examples/python/train.py" \
    --root "$work/train" --epochs 2 || failed+=("examples/python/train.py")
  "$work/venv/bin/python" "$repo/bench/peers/peers.py" \
    --size 16MiB --runs 1 --dir "$work/peers" ||
    failed+=("bench/peers/peers.py")
  "$work/venv/bin/python" "$repo/bench/peers/peers_gpu.py" \
    --size-mib 64 --tensors 8 --runs 1 --dir "$work/peers-gpu" ||
    failed+=("bench/peers/peers_gpu.py")
  mkdir -p "$work/load-device"
  "$work/venv/bin/python" "$repo/bench/load_device.py" \
    --gib 0.0625 --rounds 1 --dir "$work/load-device" ||
    failed+=("bench/load_device.py")
fi
say "train.py, peers.py, peers_gpu.py and load_device.py: $((SECONDS - start)) s"

# --- 4. pip install of a fresh clone -----------------------------------------
start=$SECONDS
"$repo/scripts/test-pip-install.sh" /usr/bin/python3 ||
  failed+=("pip install of a fresh clone")
say "pip install of a fresh clone: $((SECONDS - start)) s"

if [ ${#failed[@]} -gt 0 ]; then
  say "FAILED: $(join "${failed[@]}") ($SECONDS s in all)"
  exit 1
fi
say "all passed ($SECONDS s in all)"
