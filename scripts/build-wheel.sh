#!/usr/bin/env bash
# Assembles the Python wheel from a build folder:
#
#   scripts/build-wheel.sh [BUILD_DIR] [OUT_DIR]     (build/release, dist)
#
# writes OUT_DIR/ckpt-<version>-py3-none-linux_<arch>.whl: the pure-Python
# package (python/ckpt/*.py) with BUILD_DIR/src/capi/libckpt.so.1 (and
# libckpt_mpi.so.1) and the non-glibc libraries it and the ckpt tool need
# under ckpt/_lib/, each with the run path $ORIGIN, and the tool
# (BUILD_DIR/tools/ckpt/ckpt) as ckpt/_bin/ckpt, which the wheel's `ckpt`
# command runs (scripts/ckpt_wheel.py says how).
# `make wheel` builds the release preset and runs this.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
python=/usr/bin/python3
[ -x "$python" ] || python=python3
exec "$python" "$repo/scripts/ckpt_wheel.py" \
  "${1:-$repo/build/release}" "${2:-$repo/dist}"
