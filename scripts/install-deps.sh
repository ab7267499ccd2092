#!/usr/bin/env bash
# Installs ckpt's dependencies from Debian's archive:
#
#   scripts/install-deps.sh             every build and test dependency, and
#                                       the S3 tests' server (s3rver) from the
#                                       npm registry into .deps/npm
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
  libxxhash-dev nlohmann-json3-dev libcli11-dev libfmt-dev
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
    python3-numpy python3-pytest python3-torch python3-h5py
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

# The S3 tests' server: s3rver from the npm registry, pinned, into a folder of
# the repository (.deps/npm, ignored by git). The test binaries start it from
# there; nothing is fetched at test time. Node and npm come from Debian where
# the machine has none.
s3rver_version=3.7.1
npm_prefix="$(cd "$(dirname "$0")/.." && pwd)/.deps/npm"
s3rver_pkg="$npm_prefix/node_modules/s3rver/package.json"
if ! grep -q "\"version\": \"$s3rver_version\"" "$s3rver_pkg" 2>/dev/null; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "install-deps: node and npm are missing; run as root (or with sudo)" >&2
      exit 1
    fi
    echo "install-deps: installing nodejs npm"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  echo "install-deps: installing s3rver@$s3rver_version into $npm_prefix"
  mkdir -p "$npm_prefix"
  npm install --prefix "$npm_prefix" --save-exact --no-audit --no-fund --loglevel=error \
    "s3rver@$s3rver_version" >/dev/null
fi
