#!/usr/bin/env bash
# Installs ckpt's dependencies from Debian's archive and PyPI:
#
#   scripts/install-deps.sh             every build and test dependency: the
#                                       Debian packages, and the project's
#                                       virtual environment .venv (ignored by
#                                       git) from the pinned requirements.txt
#                                       (PyTorch 2.13 for the CPU, NumPy,
#                                       pytest, Lightning, moto's S3 server)
#   scripts/install-deps.sh --runtime   only what `pip install .` needs to
#                                       build the library, the ckpt tool and
#                                       the Python package: the compiler,
#                                       CMake, Ninja, the libraries they link,
#                                       Chart.js (embedded in ckpt report's
#                                       pages), Python's venv and patchelf
#                                       (no test framework, server, browser,
#                                       clang or Open MPI)
#
# Idempotent: when everything is already there it prints nothing and exits 0.
set -euo pipefail

runtime=0
case "${1:-}" in
  "") ;;
  --runtime) runtime=1 ;;
  *) echo "usage: scripts/install-deps.sh [--runtime]" >&2; exit 2 ;;
esac

# What the library, the tool and the wheel need to build.
packages=(
  build-essential cmake ninja-build pkg-config
  libxxhash-dev nlohmann-json3-dev libcli11-dev libfmt-dev libzstd-dev
  libsqlite3-dev libpq-dev
  libcurl4-openssl-dev libssl-dev
  python3 python3-venv patchelf
  libjs-chart.js
)
if [ "$runtime" -eq 0 ]; then
  # The tests, the sanitizer and fuzz builds, and the MPI communicator
  # (libckpt_mpi.so, built wherever CMake finds MPI).
  packages+=(
    clang clang-format libclang-rt-14-dev
    libgtest-dev libgmock-dev
    postgresql
    libopenmpi-dev openmpi-bin
    valgrind  # mpi_timed_late_3_memcheck: each rank under memcheck
    chromium  # the report test opens ckpt report's pages headless
    # A real object store for s3_rgw_test and s3_interop_rgw_test: a
    # one-node Ceph cluster with radosgw (src/testing/rgw.h), and the AWS
    # command line the interop test drives.
    ceph-mon ceph-osd radosgw ceph-common awscli
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}; run as root (or with sudo)" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$runtime" -eq 1 ] && exit 0

# The project's virtual environment: the Python of every Python test, the
# docs' Python blocks and the S3 tests' server (moto), made with Debian's
# python3 and filled from requirements.txt, every package pinned. Made
# again only when requirements.txt changed (its hash is kept beside it);
# a failed install leaves no half-made environment behind.
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="$repo/.venv"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$repo/requirements.txt" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "install-deps: making $venv from requirements.txt"
  rm -rf "$venv"
  if ! { /usr/bin/python3 -m venv "$venv" &&
         "$venv/bin/python" -m pip install --quiet \
           --disable-pip-version-check -r "$repo/requirements.txt"; }; then
    rm -rf "$venv"
    echo "install-deps: could not install requirements.txt into $venv" >&2
    exit 1
  fi
  echo "$want" >"$stamp"
fi
