#!/usr/bin/env bash
# Writes two synthetic data sets (both beamline layouts) and inspects them with --dry-run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/build/src/cli"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

cp "$repo/configs/simulate_static.yaml" static.yaml
cp "$repo/configs/simulate_laminar_flow.yaml" laminar.yaml
"$bin/homodyne-simulate" --config static.yaml
"$bin/homodyne" --config static.yaml --dry-run
"$bin/homodyne-simulate" --config laminar.yaml --frames 300 --seed 11
"$bin/homodyne" --config laminar.yaml --dry-run --strategy streaming --memory-limit-gb 1
