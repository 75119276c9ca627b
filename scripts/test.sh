#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test with ctest. Exit status is ctest's.
# Tests that need a GPU are labelled `gpu` and skip themselves on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-dependencies.sh
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure -j"$jobs" "$@"
