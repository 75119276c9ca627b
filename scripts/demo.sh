#!/usr/bin/env bash
# The main job on a built-in example: install dependencies, build, simulate a laminar-flow data
# set (3 angles x 500 frames, APS-U layout, gzip-compressed float32), inspect it with
# `homodyne --dry-run`, fit it and print the result. Everything is written under build/demo/.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
scripts/install-dependencies.sh
# Only the two programs the demo runs (scripts/test.sh builds the tests).
HOMODYNE_BUILD_TARGETS="homodyne homodyne-simulate" scripts/build.sh

demo_dir=build/demo
mkdir -p "$demo_dir"
cp configs/simulate_laminar_flow.yaml "$demo_dir/laminar_flow.yaml"
cd "$demo_dir"
bin="$repo/build/src/cli"

echo "== homodyne-simulate: writing a laminar-flow data set"
"$bin/homodyne-simulate" --config laminar_flow.yaml
echo
echo "== homodyne --dry-run: what a fit of it would do"
"$bin/homodyne" --config laminar_flow.yaml --dry-run
echo
echo "== homodyne: fitting it (truth: D0 3000, alpha -0.5, D_offset 10, gamma_dot_t0 5e-5,"
echo "   beta -0.3, gamma_dot_t_offset 0, phi0 3, contrast 0.3, offset 1.0)"
"$bin/homodyne" --config laminar_flow.yaml --output-dir results
