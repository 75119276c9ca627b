#!/usr/bin/env bash
# What the default fit's global phase costs: the default fit against the local fit alone
# (`--global-search off`) on three laminar-flow data sets, side by side in one run:
#   demo     the README demo's data (configs/simulate_laminar_flow.yaml: 3 x 500 frames, 7.5e5
#            points), fitted from the demo config's start;
#   1.08e6   bench/fit_end_to_end.sh 3 600 none (3 x 600 frames, float32, no compression);
#   1.2e7    bench/fit_end_to_end.sh 3 2001 lzf (3 x 2001 frames, LZF).
# Each fit runs 3 times; printed: wall and CPU (user + sys) seconds of each run, the median
# wall, peak memory, and from convergence_metrics.json the phase's passes, point evaluations and
# passes by stage (docs/results.md, The global phase and correlations).
# Usage: bench/global_phase_cost.sh [THREADS]   (default 2)
# Environment: HOMODYNE_BIN (default build/src/cli), BENCH_DIR (scratch folder, default
# /tmp/homodyne_bench; the data files are reused when present).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${HOMODYNE_BIN:-$repo/build/src/cli}
threads=${1:-2}
work=${BENCH_DIR:-/tmp/homodyne_bench}
mkdir -p "$work/demo"

echo "command: $0 $threads (HOMODYNE_BIN=$bin)"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "binary: $("$bin/homodyne" --version 2>&1 | head -1)"

# The data sets and their configs.
cp "$repo/configs/simulate_laminar_flow.yaml" "$work/demo/laminar_flow.yaml"
if [ ! -f "$work/demo/data/simulated_laminar_flow.h5" ]; then
  (cd "$work/demo" && "$bin/homodyne-simulate" --config laminar_flow.yaml > /dev/null)
fi
configs=("$work/demo/laminar_flow.yaml")
for set in "3 600 none" "3 2001 lzf"; do
  # shellcheck disable=SC2086
  data=$(BENCH_DIR="$work" BENCH_SIMULATE_ONLY=1 "$repo/bench/fit_end_to_end.sh" $set | tail -1)
  configs+=("${data%.h5}.yaml")
done

metrics() {  # passes, point evaluations and passes by stage of the last run's global phase
  python3 - "$1/nlsq/convergence_metrics.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])).get("global_search", {})
if g.get("method", "off") == "off":
    print("global phase off")
else:
    print(f"global phase {g['seconds']:.2f} s, {g['passes']} passes, "
          f"{g['point_evaluations']:.3g} point evaluations, by stage {g['passes_by_stage']}")
PY
}

for config in "${configs[@]}"; do
  cd "$(dirname "$config")"
  for flags in "" "--global-search off"; do
    walls=()
    runs=""
    for _ in 1 2 3; do
      # shellcheck disable=SC2086
      /usr/bin/time -o "$work/time.txt" -f "%e %U %S %M" "$bin/homodyne" --config "$config" \
        --output-dir "$work/global_phase_cost_out" --quiet --no-resume --threads "$threads" \
        $flags > /dev/null 2> "$work/global_phase_cost.log"
      read -r wall user sys peak_kb < "$work/time.txt"
      walls+=("$wall")
      runs+=" ${wall}s/$(python3 -c "print(round($user + $sys, 2))")s"
    done
    median=$(printf "%s\n" "${walls[@]}" | sort -n | sed -n 2p)
    echo "$(basename "$config") [${flags:-default}] threads $threads: median wall ${median} s" \
         "(wall/CPU per run:$runs), peak $((peak_kb / 1024)) MB;" \
         "$(metrics "$work/global_phase_cost_out"); load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
