#!/usr/bin/env bash
# Two builds of homodyne on the same fit, runs interleaved (A, B, A, B, ...) so that both see the
# same machine load: wall, user and system seconds of every run, the load average before each
# pair, the medians, and whether both builds' parameters.json agree bitwise (timestamps aside).
# Usage: bench/compare_binaries.sh BIN_DIR_A BIN_DIR_B CONFIG [RUNS] [homodyne flags...]
#   e.g. bench/compare_binaries.sh /tmp/old/src/cli build/src/cli \
#          /tmp/homodyne_bench/fit_3x600_none.yaml 5
# BIN_DIR_*: folders holding homodyne. RUNS: runs per build (default 5). Environment overrides
# are passed to both builds alike (e.g. OMP_WAIT_POLICY=passive). Scratch: $BENCH_DIR (default
# /tmp/homodyne_bench)/compare.
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,10p' "$0" >&2
  exit 2
fi
bin_a=$(cd "$1" && pwd)
bin_b=$(cd "$2" && pwd)
config=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
runs=${4:-5}
shift $(( $# >= 4 ? 4 : 3 ))
work=${BENCH_DIR:-/tmp/homodyne_bench}/compare
mkdir -p "$work"
cd "$(dirname "$config")"
echo "command: $0 $bin_a $bin_b $config $runs $*"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for label in a b; do
  bin_var=bin_$label
  echo "build $label: ${!bin_var} ($("${!bin_var}/homodyne" --version 2>&1 | head -1))"
done
for run in $(seq 1 "$runs"); do
  echo "run $run, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for label in a b; do
    bin_var=bin_$label
    /usr/bin/time -f "%e %U %S" -o "$work/time_$label" "${!bin_var}/homodyne" --config "$config" \
      --output-dir "$work/$label" --no-resume --quiet "$@" > "$work/log_$label" 2>&1 ||
      { echo "build $label failed:"; tail -5 "$work/log_$label"; exit 1; }
    read -r wall user system < "$work/time_$label"
    echo "  $label: wall $wall s, user $user s, sys $system s"
    echo "$wall $user $system" >> "$work/all_$label.$$"
  done
done
for label in a b; do
  python3 - "$label" "$work/all_$label.$$" <<'PY'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[2])]
wall, user, system = (statistics.median(column) for column in zip(*rows))
print(f"median {sys.argv[1]}: wall {wall:.2f} s, user {user:.2f} s, sys {system:.2f} s")
PY
  rm -f "$work/all_$label.$$"
done
python3 - "$work/a/nlsq/parameters.json" "$work/b/nlsq/parameters.json" <<'PY'
import json, sys
a, b = (json.load(open(path)) for path in sys.argv[1:])
for record in (a, b):
    record.pop("timestamp", None)
print("parameters.json bitwise equal:", "yes" if a == b else "no")
PY
