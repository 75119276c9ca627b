#!/usr/bin/env bash
# Time from SIGTERM to exit on large, sparsely stored data (docs/performance.md, Time from a signal
# to the exit):
#  1. files that declare huge matrices but store almost none (3 x 1e5 and 3 x 2e6 frames, NaN
#     fill): refused before planning, the time to exit 1 without any signal;
#  2. a 3 x 60000-frame file whose diagonal chunks alone are stored (5.4e9 upper-triangle points,
#     almost all NaN, 178 MB of LZF): homodyne is sent SIGTERM at several moments, with the global
#     phase on and off; prints each wait from the signal to the exit and the exit code (3: a
#     checkpoint was saved).
# Usage: bench/sigterm_latency.sh [DELAYS_SECONDS...]   (default: 3 10 30)
# Needs /usr/bin/python3 with h5py and numpy; files in ${BENCH_DIR:-/tmp/homodyne_bench}/sigterm.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
homodyne="$repo/build/src/cli/homodyne"
delays=("$@")
[ ${#delays[@]} -gt 0 ] || delays=(3 10 30)
work=${BENCH_DIR:-/tmp/homodyne_bench}/sigterm
mkdir -p "$work"
cd "$work"
/usr/bin/python3 - <<'PY'
import os
import h5py
import numpy as np

def layout(f, angles):
    f.create_dataset("xpcs/qmap/dynamic_v_list_dim0", data=np.array([0.0054]))
    f.create_dataset("xpcs/qmap/dynamic_v_list_dim1", data=np.array([0.0, 45.0, 90.0][:angles]))
    f.create_dataset("xpcs/twotime/processed_bins", data=np.arange(1, angles + 1, dtype="i4"))

def matrices(f, n, angles):
    return [f.create_dataset("xpcs/twotime/correlation_map/c2_%05d" % (k + 1), shape=(n, n),
                             dtype="f4", chunks=(256, 256), fillvalue=np.nan, compression="lzf")
            for k in range(angles)]

for name, n in (("declared_1e5.h5", 100000), ("declared_2e6.h5", 2000000)):
    if not os.path.exists(name):
        with h5py.File(name, "w") as f:
            layout(f, 3)
            matrices(f, n, 3)
if not os.path.exists("diagonal_6e4.h5"):
    rng = np.random.default_rng(1)
    n = 60000
    with h5py.File("diagonal_6e4.h5", "w") as f:
        layout(f, 3)
        for data in matrices(f, n, 3):
            for b in range(0, n, 256):
                e = min(b + 256, n)
                data[b:e, b:e] = (1.2 + 0.01 * rng.standard_normal((e - b, e - b))).astype("f4")
PY
config() {  # config FILE: a static fit of FILE, every frame
  cat <<YAML
analysis_mode: static
analyzer_parameters:
  dt: 0.001
  start_frame: 1
  end_frame: -1
  scattering: {wavevector_q: 0.0054}
experimental_data:
  data_folder_path: ./
  data_file_name: $1
optimization:
  streaming: {checkpoint_dir: ./checkpoints}
YAML
}
now() { date +%s.%N; }
for file in declared_1e5.h5 declared_2e6.h5; do
  config "$file" > "$file.yaml"
  start=$(now)
  code=0
  "$homodyne" --config "$file.yaml" --output-dir out > "$file.log" 2>&1 || code=$?
  printf '%-16s refused: exit %d after %.3f s: %s\n' "$file" "$code" "$(echo "$(now) - $start" | bc)" \
    "$(tail -1 "$file.log" | cut -c1-100)"
done
config diagonal_6e4.h5 > diagonal.yaml
for phase in auto off; do
  for delay in "${delays[@]}"; do
    rm -rf out checkpoints
    "$homodyne" --config diagonal.yaml --output-dir out --global-search "$phase" > run.log 2>&1 &
    pid=$!
    sleep "$delay"
    sent=$(now)
    kill -TERM "$pid" 2>/dev/null || true
    code=0
    wait "$pid" || code=$?
    printf 'diagonal_6e4.h5 global-search %-4s SIGTERM at %3d s: exit %d after %.3f s\n' "$phase" \
      "$delay" "$code" "$(echo "$(now) - $sent" | bc)"
  done
done
