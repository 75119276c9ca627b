#!/usr/bin/env bash
# Writes two synthetic data sets (both beamline layouts) and inspects them with --dry-run.
# Run it from anywhere: it uses the installed homodyne and homodyne-simulate when they are on
# PATH, else those of the build tree (build/src/cli). ctest runs it installed
# (examples.simulate_and_inspect_installed).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if command -v homodyne > /dev/null && command -v homodyne-simulate > /dev/null; then
  bin=$(dirname "$(command -v homodyne)")
else
  bin="$repo/build/src/cli"
fi
echo "programs from $bin"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

cp "$repo/configs/simulate_static.yaml" static.yaml
cp "$repo/configs/simulate_laminar_flow.yaml" laminar.yaml
"$bin/homodyne-simulate" --config static.yaml
"$bin/homodyne" --config static.yaml --dry-run
"$bin/homodyne-simulate" --config laminar.yaml --frames 300 --seed 11
"$bin/homodyne" --config laminar.yaml --dry-run --strategy streaming --memory-limit-gb 1
