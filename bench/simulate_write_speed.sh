#!/usr/bin/env bash
# Measures homodyne-simulate's write speed and peak memory, then reads the file back with
# `homodyne --dry-run` (which streams through every point to count NaN/Inf).
# Usage: bench/simulate_write_speed.sh [ANGLES] [FRAMES] [COMPRESSION] [DTYPE]
#   defaults: 10 angles x 10000 frames (1e9 points, 4 GB float32), no compression.
# Writes to ${BENCH_DIR:-/tmp/homodyne_bench} and deletes the file afterwards.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/build/src/cli"
angles=${1:-10}
frames=${2:-10000}
compression=${3:-none}
dtype=${4:-float32}
work=${BENCH_DIR:-/tmp/homodyne_bench}
mkdir -p "$work"
cd "$work"

phi=$(awk -v n="$angles" 'BEGIN{for(k=0;k<n;k++) printf "%s%g", (k?", ":""), -90+180*k/n}')
cat > bench.yaml <<YAML
analysis_mode: laminar_flow
analyzer_parameters:
  dt: 0.001
  start_frame: 1
  end_frame: -1
  scattering: {wavevector_q: 0.0054}
  geometry: {stator_rotor_gap: 2000000}
experimental_data:
  data_folder_path: ./
  data_file_name: bench.h5
phi_filtering:
  enabled: false
simulation:
  output: ./bench.h5
  format: aps_u
  frames: $frames
  phi_angles: [$phi]
  parameters: {D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.01, beta: 0.2,
               gamma_dot_t_offset: 0, phi0: 0}
  contrast: 0.3
  offset: 1.0
  noise_sigma: 0.01
  seed: 1
  dtype: $dtype
  compression: $compression
YAML

echo "== $(nproc) cores; $angles angles x $frames frames, $dtype, compression $compression"
/usr/bin/time -f "simulate: wall %e s, peak RSS %M KB" "$bin/homodyne-simulate" --config bench.yaml
ls -l bench.h5
/usr/bin/time -f "dry run: wall %e s, peak RSS %M KB" "$bin/homodyne" --config bench.yaml --dry-run \
  | grep -E "points to fit|non-finite|strategy "
[ -n "${KEEP_FILE:-}" ] || rm -f bench.h5 bench.yaml
