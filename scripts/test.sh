#!/usr/bin/env bash
# Installs dependencies, builds, and runs the tests with ctest. Exit status is ctest's.
# Usage: scripts/test.sh [TIER] [ctest arguments]
#   without TIER, every test; with TIER (a label: fast, cli, faults, docs, fuzz, install, python,
#   mpi, slurm, gpu), that tier's tests only (ctest -L '^TIER$'). The tiers and what each
#   takes: docs/conventions.md, Tests.
# Tests that need a GPU are labelled `gpu` and skip themselves on machines without one.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=()
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
  tier=(-L "^$1\$")
  shift
fi
scripts/install-dependencies.sh
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir build --output-on-failure -j"$jobs" "${tier[@]}" "$@"
