#!/usr/bin/env bash
# An installed homodyne works for a C++ program with find_package(homodyne): installs the build
# into a temporary prefix, configures and builds tests/install/consumer against it, and runs it
# (a fit of data made in memory; exit 0 when it recovers the truth).
# Usage: find_package_test.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
for file in lib/cmake/homodyne/homodyneConfig.cmake include/homodyne/fit.h lib/libhomodyne_pipeline.a; do
  [ -e "$work/prefix/$file" ] || { echo "FAIL: $file not installed"; exit 1; }
done
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; echo "FAIL: configuring the consumer"; exit 1; }
cmake --build "$work/consumer" > "$work/build.log" 2>&1 ||
  { tail -40 "$work/build.log"; echo "FAIL: building the consumer"; exit 1; }
"$work/consumer/consumer" || { echo "FAIL: the consumer's fit"; exit 1; }
echo "find_package(homodyne): ok"
