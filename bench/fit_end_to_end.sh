#!/usr/bin/env bash
# End-to-end fit benchmark: simulates a laminar-flow APS-U file (float32), then times
# `homodyne --config` on it (load + fit + result files) with /usr/bin/time.
# Usage: bench/fit_end_to_end.sh ANGLES FRAMES COMPRESSION [homodyne flags...]
#   e.g. bench/fit_end_to_end.sh 3 2001 lzf                      (12e6 points, default settings)
#        bench/fit_end_to_end.sh 5 6325 none --strategy streaming --memory-limit-gb 1
# Points in the file = ANGLES x FRAMES^2. The file is kept in ${BENCH_DIR:-/tmp/homodyne_bench}
# and reused when the same ANGLES/FRAMES/COMPRESSION is asked for again (page cache warm).
# BENCH_SIMULATE_ONLY=1: simulate the file (if missing), print its path and stop (no fit).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/build/src/cli"
angles=${1:?ANGLES}
frames=${2:?FRAMES}
compression=${3:?COMPRESSION}
shift 3
work=${BENCH_DIR:-/tmp/homodyne_bench}
mkdir -p "$work"
cd "$work"
name="fit_${angles}x${frames}_${compression}"

phi=$(awk -v n="$angles" 'BEGIN{for(k=0;k<n;k++) printf "%s%g", (k?", ":""), -90+180*k/n}')
cat > "$name.yaml" <<YAML
analysis_mode: laminar_flow
analyzer_parameters:
  dt: 0.001
  start_frame: 1
  end_frame: -1
  scattering: {wavevector_q: 0.0054}
  geometry: {stator_rotor_gap: 2000000}
experimental_data:
  data_folder_path: ./
  data_file_name: $name.h5
phi_filtering:
  enabled: false
initial_parameters:
  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
  values: [2500, -0.6, 5, 4.0e-5, -0.2, 0, 2]
parameter_space:
  bounds:
    - {name: D0, min: 100, max: 100000}
    - {name: alpha, min: -2, max: 2}
    - {name: D_offset, min: -100, max: 100}
    - {name: gamma_dot_t0, min: 1.0e-6, max: 0.5}
    - {name: beta, min: -2, max: 2}
    - {name: gamma_dot_t_offset, min: -0.1, max: 0.1}
    - {name: phi0, min: -10, max: 10}
simulation:
  output: ./$name.h5
  format: aps_u
  frames: $frames
  phi_angles: [$phi]
  parameters: {D0: 3000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 5.0e-5, beta: -0.3,
               gamma_dot_t_offset: 0, phi0: 3}
  contrast: 0.3
  offset: 1.0
  noise_sigma: 0.01
  seed: 1
  dtype: float32
  compression: $compression
YAML

echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== $angles angles x $frames frames ($((angles * frames * frames)) points), float32, $compression"
if [ ! -s "$name.h5" ]; then
  /usr/bin/time -f "simulate: wall %e s, peak RSS %M KB" "$bin/homodyne-simulate" \
    --config "$name.yaml" > /dev/null
fi
ls -l "$name.h5"
if [ "${BENCH_SIMULATE_ONLY:-0}" = 1 ]; then
  echo "$work/$name.h5"
  exit 0
fi
cat "$name.h5" > /dev/null  # into the page cache, so the first fit does not time the disk
/usr/bin/time -f "fit: wall %e s, peak RSS %M KB" "$bin/homodyne" --config "$name.yaml" \
  --output-dir "out_$name" "$@" 2>&1 |
  grep -E "strategy|global search [a-z_]*:|LM |chi2 .*points|fit: wall|error|warn" |
  grep -v "^\[info\] iteration"
python3 - "out_$name/nlsq/analysis_results_nlsq.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["timings_s"]
print(f"strategy {r['strategy']['name']}, {r['passes']} passes, {r['point_evaluations']:.3e} "
      f"point evaluations, load {t['load']:.2f} s, optimisation {t['optimization']:.2f} s, "
      f"total {t['total']:.2f} s, peak {r['memory_peak_mb']:.0f} MB, "
      f"{r['point_evaluations'] / t['optimization'] / 1e6:.0f} M points/s in the passes")
PY
