#!/usr/bin/env bash
# Configures and builds homodyne-cpp in ./build (Release). Extra arguments go to cmake configure.
# HOMODYNE_BUILD_TARGETS (space-separated target names) builds only those targets, e.g.
#   HOMODYNE_BUILD_TARGETS="homodyne homodyne-simulate" scripts/build.sh   (what the demo runs)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
for target in ${HOMODYNE_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
cmake --build build -j"$jobs" "${targets[@]}"
