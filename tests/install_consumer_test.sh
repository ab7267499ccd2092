#!/bin/bash
# A program outside the tree builds against ckpt three ways and runs:
#   1. find_package(ckpt) on an installed prefix (`cmake --install` of the
#      build into a fresh folder), with only CMAKE_PREFIX_PATH naming it,
#      and, where ckpt has MPI, its communicator saving on 2 ranks;
#   2. g++ with `pkg-config --cflags --libs ckpt` on that prefix;
#   3. add_subdirectory of the sources without GoogleTest: configured, and
#      under Ninja the program's one file compiled (linking it would compile
#      every layer again).
# The program is tests/consumer, the one thing taken from the source tree.
#
#   install_consumer_test.sh BUILD SOURCE CMAKE CXX PKG_CONFIG GENERATOR [MPIEXEC]
set -euo pipefail
build=$1 source=$2 cmake=$3 cxx=$4 pkg_config=$5 generator=$6 mpiexec=${7:-}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >/dev/null
cp -r "$source/tests/consumer" "$work/consumer"
cd "$work"

# The package must not lean on the trees it was built from.
if grep -rl -e "$source" -e "$build" "$prefix/lib" --include='*.cmake' \
     --include='*.pc'; then
  echo "install_consumer_test: the installed package names the build or source tree" >&2
  exit 1
fi

echo "== find_package(ckpt)"
"$cmake" -S consumer -B by-package -G "$generator" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
"$cmake" --build by-package >/dev/null
by-package/app run
by-package/app run  # resumes: nothing left to save
if [[ -n $mpiexec ]]; then
  # The flags of the other mpirun tests (tests/CMakeLists.txt): as root,
  # over shared memory, no ssh.
  "$mpiexec" --allow-run-as-root --oversubscribe --mca btl self,vader \
    --mca plm_rsh_agent false -np 2 by-package/app_mpi run-mpi
  echo "app_mpi: step 1 saved on 2 ranks"
fi

echo "== pkg-config ckpt"
pc_dir=$(dirname "$(find "$prefix" -name ckpt.pc)")
flags=$(PKG_CONFIG_PATH=$pc_dir "$pkg_config" --cflags --libs ckpt)
echo "pkg-config --cflags --libs ckpt: $flags"
libdir=$(PKG_CONFIG_PATH=$pc_dir "$pkg_config" --variable=libdir ckpt)
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++20 consumer/main.cc $flags -Wl,-rpath,"$libdir" -o app-pc
./app-pc run-pc
./app-pc run-pc

echo "== add_subdirectory(ckpt), no GoogleTest"
"$cmake" -S consumer -B vendored -G "$generator" --no-warn-unused-cli \
  -DCKPT_SOURCE_DIR="$source" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON \
  -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
if [[ $generator == Ninja ]]; then
  "$cmake" --build vendored --target CMakeFiles/app.dir/main.cc.o >/dev/null
fi
echo "install_consumer_test: all three built and ran"
