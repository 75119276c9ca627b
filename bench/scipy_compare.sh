#!/usr/bin/env bash
# homodyne vs scipy.optimize.least_squares on the same ~1e6-point laminar-flow file.
#
# Simulates configs/simulate_laminar_flow.yaml (3 angles, dt 0.1 s, float32, gzip) with FRAMES
# frames (default 578: 3 x 578^2 = 1.0e6 values in the file; 3 x 577 x 576 = 997,056 fitted i != j
# points), fits it with `homodyne` (all cores, then one thread) and with bench/scipy_compare.py
# (numpy model, analytic Jacobian, TRF), all timed with /usr/bin/time -v, and prints both
# parameter sets and the time ratios. Both start from the config's initial values.
# Usage: bench/scipy_compare.sh [FRAMES] [scipy_compare.py flags...]
#   e.g. bench/scipy_compare.sh 578 --x-scale jac --max-nfev 1000
# Environment: HOMODYNE_BIN_DIR (default build/src/cli), PYTHON (default /usr/bin/python3),
#              BENCH_DIR (default /tmp/homodyne_bench/scipy_compare; the file is reused),
#              REPEAT (homodyne runs per setting, default 3; the median is reported).
# Needs Python with numpy, scipy, h5py and PyYAML; it checks and stops with a message if not.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${HOMODYNE_BIN_DIR:-$repo/build/src/cli}
python=${PYTHON:-/usr/bin/python3}
frames=${1:-578}
shift $(($# > 0 ? 1 : 0))
work=${BENCH_DIR:-/tmp/homodyne_bench/scipy_compare}
repeat=${REPEAT:-3}

for program in homodyne homodyne-simulate; do
  if [ ! -x "$bin/$program" ]; then
    echo "error: $bin/$program not found: build it"
    echo "       (cmake -S . -B build -DCMAKE_BUILD_TYPE=Release"
    echo "        && cmake --build build --target homodyne homodyne-simulate)"
    echo "       or set HOMODYNE_BIN_DIR to the folder holding it"
    exit 1
  fi
done
if ! "$python" -c "import numpy, scipy, h5py, yaml" 2>/dev/null; then
  echo "error: $python lacks numpy, scipy, h5py or PyYAML; install them first, e.g."
  echo "       apt-get install python3-numpy python3-scipy python3-h5py python3-yaml"
  echo "       (or set PYTHON to an interpreter that has them)"
  exit 1
fi
if [ ! -x /usr/bin/time ]; then
  echo "error: /usr/bin/time not found (apt-get install time)"; exit 1
fi

mkdir -p "$work"
cd "$work"
config=laminar_flow_${frames}.yaml
sed "s#simulated_laminar_flow.h5#simulated_laminar_flow_${frames}.h5#" \
  "$repo/configs/simulate_laminar_flow.yaml" > "$config"
data=data/simulated_laminar_flow_${frames}.h5

echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
if [ ! -s "$data" ]; then
  "$bin/homodyne-simulate" --config "$config" --frames "$frames" > /dev/null
fi
cat "$data" > /dev/null  # into the page cache: neither fit times the disk

# run_homodyne LABEL [env...]: fits with homodyne REPEAT times (a fit takes well under a second,
# so one run is noisy); run r writes out_LABEL_r/ and time_LABEL_r.txt.
run_homodyne() {
  local label=$1 r
  shift
  for r in $(seq 1 "$repeat"); do
    env "$@" /usr/bin/time -v -o "time_${label}_$r.txt" "$bin/homodyne" --config "$config" \
      --output-dir "out_${label}_$r" > "log_${label}_$r.txt" 2>&1 ||
      { echo "homodyne ($label) failed:"; tail -20 "log_${label}_$r.txt"; exit 1; }
  done
}
echo "== homodyne (all cores), $repeat runs"
run_homodyne all
echo "== homodyne (OMP_NUM_THREADS=1), $repeat runs"
run_homodyne one OMP_NUM_THREADS=1
# scipy's defaults here: x_scale "jac" and up to 1000 evaluations, so that it converges. With the
# reference path's x_scale 1 and max_nfev = max_iterations (100) it stops at the limit, far from
# the optimum (pass --x-scale 1 to see it).
if [ $# -eq 0 ]; then set -- --x-scale jac --max-nfev 1000; fi
echo "== scipy.optimize.least_squares $*"
/usr/bin/time -v -o time_scipy.txt "$python" "$repo/bench/scipy_compare.py" --config "$config" \
  --json scipy.json "$@" > log_scipy.txt 2>&1 ||
  { echo "scipy_compare.py failed:"; tail -20 log_scipy.txt; exit 1; }
head -2 log_scipy.txt

"$python" - "$frames" "$repeat" <<'PY'
import json, re, sys


def wall_and_rss(path):
    """Wall seconds and peak RSS (MB) from a /usr/bin/time -v report."""
    text = open(path).read()
    clock = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    hours, minutes, seconds = clock.groups()
    wall = int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024
    return wall, rss


def homodyne_run(label, repeat):
    """The median run (by wall time) of `repeat` runs of one setting, with its parameters."""
    runs = []
    for r in range(1, repeat + 1):
        wall, rss = wall_and_rss(f"time_{label}_{r}.txt")
        analysis = json.load(open(f"out_{label}_{r}/nlsq/analysis_results_nlsq.json"))
        runs.append((wall, rss, r, analysis))
    wall, rss, r, analysis = sorted(runs)[len(runs) // 2]
    parameters = json.load(open(f"out_{label}_{r}/nlsq/parameters.json"))
    values = {}
    for k, angle in enumerate(parameters["per_angle"]):
        values[f"contrast[{k}]"] = angle["contrast"]["value"]
        values[f"offset[{k}]"] = angle["offset"]["value"]
    for name, entry in parameters["parameters"].items():
        if name not in ("contrast", "offset"):
            values[name] = entry["value"]
    return {"wall": wall, "rss": rss, "fit": analysis["timings_s"]["optimization"],
            "load": analysis["timings_s"]["load"], "iterations": analysis["iterations"],
            "passes": analysis["passes"], "chi2": parameters["chi_squared"],
            "threads": analysis.get("threads"), "strategy": analysis["strategy"]["name"],
            "points": analysis["n_points"], "values": values,
            "walls": sorted(run[0] for run in runs)}


repeat = int(sys.argv[2])
all_cores, one_thread = homodyne_run("all", repeat), homodyne_run("one", repeat)
scipy_run = json.load(open("scipy.json"))
scipy_wall, scipy_rss = wall_and_rss("time_scipy.txt")
print(f"\n== {all_cores['points']} points (i != j; 3 angles x {int(sys.argv[1]) - 1} fitted "
      f"times), homodyne strategy {all_cores['strategy']}")
print(f"homodyne: median of {repeat} runs; walls {all_cores['walls']} s (all cores), "
      f"{one_thread['walls']} s (1 thread)")
print(f"{'':32s} {'wall s':>8s} {'fit s':>8s} {'peak MB':>8s} {'iter/nfev':>10s} {'chi2':>16s}")
for label, run in (("homodyne, %s threads" % all_cores["threads"], all_cores),
                   ("homodyne, 1 thread", one_thread)):
    print(f"{label:32s} {run['wall']:8.2f} {run['fit']:8.2f} {run['rss']:8.0f} "
          f"{run['iterations']:>10d} {run['chi2']:16.6f}")
print(f"{'scipy least_squares':32s} {scipy_wall:8.2f} {scipy_run['fit_s']:8.2f} {scipy_rss:8.0f} "
      f"{scipy_run['nfev']:>10d} {scipy_run['chi2']:16.6f}")
print(f"   ({scipy_run['method']}, njev {scipy_run['njev']}, status {scipy_run['status']}: "
      f"{scipy_run['message']})")
print("\nparameter            homodyne          scipy             relative difference")
for name, value in all_cores["values"].items():
    other = scipy_run["parameters"].get(name, float("nan"))
    difference = abs(value - other) / max(abs(value), abs(other), 1e-300)
    print(f"{name:20s} {value:< 17.10g} {other:< 17.10g} {difference:.2e}")
print(f"\nratio scipy / homodyne, wall (whole process): "
      f"{scipy_wall / all_cores['wall']:.1f}x ({all_cores['threads']} threads), "
      f"{scipy_wall / one_thread['wall']:.1f}x (1 thread)")
print(f"ratio scipy / homodyne, fit only:             "
      f"{scipy_run['fit_s'] / all_cores['fit']:.1f}x ({all_cores['threads']} threads), "
      f"{scipy_run['fit_s'] / one_thread['fit']:.1f}x (1 thread)")
PY
