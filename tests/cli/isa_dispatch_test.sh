#!/usr/bin/env bash
# The pass kernel's instruction-set level from the command line (docs/design.md section 2b):
# `homodyne --version` names the level the process runs (the best one of the build for this CPU, or
# the one HOMODYNE_ISA names); a level the CPU lacks and an unknown name are errors (exit 1) that
# say what is allowed. At every level this CPU runs, a fit logs its level and returns bitwise the
# same results on 1 and 2 threads, and the levels' results agree far within the statistical errors.
# A checkpoint written at one level is accepted at another, and that resumed fit agrees with the
# uninterrupted ones.
# Usage: isa_dispatch_test.sh BIN_DIR FAULTS_PROGRAM   (FAULTS_PROGRAM: homodyne_with_faults,
# tests/cli/homodyne_with_faults.cc, for the interruption)
set -u
bin_dir=$(cd "$1" && pwd)
faults_program=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
# shellcheck source=test_lib.sh
source "$repo/tests/cli/test_lib.sh"

# The build's levels, from the refusal of an unknown name ("must be one of a, b, c (the levels
# of this build)").
HOMODYNE_ISA=no-such-level expect_exit 1 \
  "HOMODYNE_ISA = 'no-such-level': unknown instruction-set level; must be one of [a-z0-9, ]+" \
  "$bin_dir/homodyne" --version
built=$(sed -n 's/.*must be one of \([a-z0-9, ]*\) (the levels of this build).*/\1/p' \
  <<<"$last_output" | tr -d ',')
[ -n "$built" ] || { echo "FAIL: no list of levels in: $last_output"; exit 1; }
echo "levels of this build: $built"

# What this CPU supports, from the kernel's flags: the features that tell x86-64-v3 and
# x86-64-v4 apart (a virtual machine may hide others, such as abm for LZCNT).
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
cpu_has() {
  local flag
  for flag in "$@"; do [[ "$cpu_flags" == *" $flag "* ]] || return 1; done
}
cpu_runs() {  # cpu_runs LEVEL
  case $1 in
    baseline | native) return 0 ;;
    avx2) cpu_has avx avx2 fma bmi1 bmi2 ;;
    avx512) cpu_has avx avx2 fma bmi1 bmi2 avx512f avx512bw avx512cd avx512dq avx512vl ;;
    *) return 1 ;;
  esac
}

runnable=()
for level in $built; do
  if cpu_runs "$level"; then
    runnable+=("$level")
    HOMODYNE_ISA=$level expect_exit 0 \
      "homodyne-cpp .*; pass kernel $level: .*, set by HOMODYNE_ISA \\(built: " \
      "$bin_dir/homodyne" --version
  else
    HOMODYNE_ISA=$level expect_exit 1 "HOMODYNE_ISA = '$level': this CPU lacks .*; it supports " \
      "$bin_dir/homodyne" --version
  fi
done
best=${runnable[${#runnable[@]} - 1]}
expect_exit 0 "pass kernel $best: " "$bin_dir/homodyne" --version
HOMODYNE_ISA= expect_exit 0 "pass kernel $best: " "$bin_dir/homodyne" --version
# --help does not depend on the variable.
HOMODYNE_ISA=no-such-level expect_exit 0 "Usage" "$bin_dir/homodyne" --help

# Fits: a small laminar-flow data set (3 x 31k points in batches of 10k, so that 2 threads share
# the passes), every runnable level, 1 and 2 threads.
cat > sim.yaml <<YAML
analysis_mode: laminar_flow
analyzer_parameters:
  dt: 0.1
  start_frame: 1
  end_frame: -1
  scattering:
    wavevector_q: 0.0054
  geometry:
    stator_rotor_gap: 2000000
experimental_data:
  data_folder_path: ./
  data_file_name: sim.h5
optimization:
  streaming:
    batch_size: 10000
simulation:
  output: ./sim.h5
  format: aps_u
  frames: 250
  phi_angles: [0, 45, 90]
  parameters: {D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.0002, beta: 0, gamma_dot_t_offset: 0, phi0: 0}
  contrast: [0.3, 0.28, 0.25]
  offset: 1.0
  noise_sigma: 0.01
  seed: 7
  dtype: float32
  compression: lzf
YAML
"$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null ||
  { echo "FAIL: homodyne-simulate"; exit 1; }
for level in "${runnable[@]}"; do
  for threads in 1 2; do
    HOMODYNE_ISA=$level expect_exit 0 "\\[info\\] pass kernel $level: .*set by HOMODYNE_ISA" \
      "$bin_dir/homodyne" --config sim.yaml --threads $threads --output-dir "out_${level}_$threads"
  done
  same_results "out_${level}_1" "out_${level}_2"
done
# A fit interrupted (SIGTERM, checkpoint saved) at the best level and resumed at the lowest one:
# the checkpoint is accepted (docs/design.md section 2b, Checkpoints).
if [ "${#runnable[@]}" -gt 1 ]; then
  total=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
    "out_${best}_1/nlsq/convergence_metrics.json")
  HOMODYNE_ISA=$best HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((total * 2 / 3)):15 expect_exit 3 \
    "interrupted by SIGTERM; checkpoint saved" "$faults_program" --config sim.yaml \
    --checkpoint-dir ck --output-dir out_resumed_1
  HOMODYNE_ISA=${runnable[0]} expect_exit 0 "resumed from the checkpoint" \
    "$bin_dir/homodyne" --config sim.yaml --checkpoint-dir ck --output-dir out_resumed_1
  grep -q "pass kernel ${runnable[0]}: " <<<"$last_output" ||
    { echo "FAIL: the resumed fit did not run at ${runnable[0]}"; failures=$((failures + 1)); }
  runnable+=(resumed)
fi
# The levels differ at most in the last bits of each pass; after the fit, by far less than the
# uncertainties.
for level in "${runnable[@]}"; do
  if python3 - "out_${runnable[0]}_1/nlsq/parameters.json" "out_${level}_1/nlsq/parameters.json" <<'PY'; then
import json, sys
a, b = (json.load(open(path)) for path in sys.argv[1:])
worst = 0.0
for name, entry in a["parameters"].items():
    other = b["parameters"][name]
    if entry["uncertainty"] > 0:
        worst = max(worst, abs(entry["value"] - other["value"]) / entry["uncertainty"])
print(f"largest difference: {worst:.2e} standard errors")
sys.exit(0 if worst < 1e-6 and abs(a["chi_squared"] / b["chi_squared"] - 1) < 1e-9 else 1)
PY
    echo "ok: levels ${runnable[0]} and $level agree"
  else
    echo "FAIL: levels ${runnable[0]} and $level disagree"; failures=$((failures + 1))
  fi
done

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "isa dispatch: ok"
