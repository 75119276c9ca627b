#!/usr/bin/env bash
# The global phase reaches the optimum from untuned starts (a small version of
# bench/global_success.sh). Three simulated laminar-flow data sets (different truths, 2-4 angles,
# per-angle contrast and offset, noise 0.01, 100-120 frames; dt, q and the gap set so that the
# shear phase (4-8 rad over the window) and the diffusion decay are both visible). Each is fitted
# from the truth with --global-search off (the reference: it defines the optimum), then with the
# DEFAULT settings from the bound midpoints and from 2 seeded random starts (uniform in the
# default bounds, D0 and gamma_dot_t0 log-uniform). Every fit must reach the optimum: chi2 within
# 2 of the reference's (or lower) and every physical parameter within 4 of the reference's
# uncertainties; and its convergence_metrics.json must hold a global_search section (method,
# starts or generations, point_evaluations, seconds, minima [{chi2, parameters}], chosen).
# HOMODYNE_GLOBAL_TEST_FLAGS adds flags to the fits under test: with "--global-search off
# --no-variable-projection" (the plain local fit) all 9 fits stop in false minima (no flow,
# parameters on bounds) and this test fails, as it must.
# Usage: global_search_test.sh BIN_DIR
set -u
bin_dir=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

failures=0
# shellcheck source=test_lib.sh
source "$repo/tests/cli/test_lib.sh"

# Flags added to every non-reference fit (empty = the defaults under test).
read -r -a fit_flags <<<"${HOMODYNE_GLOBAL_TEST_FLAGS:-}"

if ! "$bin_dir/homodyne" --help 2>&1 | grep -q -- "--global-search"; then
  echo "FAIL: $bin_dir/homodyne has no --global-search"
  exit 1
fi

physical="D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0"

# write_set DIR FRAMES DT Q GAP ANGLES CONTRAST OFFSET TRUTH VALUES: DIR/fit.yaml simulates and
# fits DIR/data.h5; VALUES is the start (a YAML list or null); checkpoints off.
write_set() {
  mkdir -p "$1"
  cat > "$1/fit.yaml" <<YAML
analysis_mode: laminar_flow
analyzer_parameters:
  dt: $3
  start_frame: 1
  end_frame: -1
  scattering: {wavevector_q: $4}
  geometry: {stator_rotor_gap: $5}
experimental_data:
  data_folder_path: ./
  data_file_name: data.h5
simulation:
  output: ./data.h5
  format: aps_u
  frames: $2
  phi_angles: $6
  parameters: $9
  contrast: $7
  offset: $8
  noise_sigma: 0.01
  seed: 5
  dtype: float64
  compression: none
initial_parameters:
  parameter_names: [$physical]
  values: ${10}
optimization:
  nlsq: {max_iterations: 100, tolerance: 1.0e-8, sigma: 0.01}
  streaming: {enable_checkpoints: false, resume_from_checkpoint: false}
YAML
}

# random_start SEED: a start drawn uniformly inside the default bounds (D0 and gamma_dot_t0
# log-uniform), as a YAML list in the order of $physical.
random_start() {
  python3 - "$1" <<'PY'
import math, random, sys
rng = random.Random(int(sys.argv[1]))
bounds = [("D0", 1e2, 1e5, True), ("alpha", -2, 2, False), ("D_offset", -1e5, 1e5, False),
          ("gamma_dot_t0", 1e-6, 0.5, True), ("beta", -2, 2, False),
          ("gamma_dot_t_offset", -0.1, 0.1, False), ("phi0", -10, 10, False)]
values = [10 ** rng.uniform(math.log10(lo), math.log10(hi)) if log else rng.uniform(lo, hi)
          for _, lo, hi, log in bounds]
print("[" + ", ".join(f"{v:.6g}" for v in values) + "]")
PY
}

# check_fit REF_DIR FIT_DIR LABEL: the fit reached the reference's optimum and reports its
# global phase.
check_fit() {
  if python3 - "$1/nlsq/parameters.json" "$2/nlsq/parameters.json" \
      "$2/nlsq/convergence_metrics.json" "$3" <<'PY'; then
import json, sys
ref, fit = (json.load(open(p)) for p in sys.argv[1:3])
label = sys.argv[4]
names = ["D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "gamma_dot_t_offset", "phi0"]
problems = []
dchi2 = fit["chi_squared"] - ref["chi_squared"]
if dchi2 > 2.0:
    problems.append(f"chi2 {fit['chi_squared']:.10g} is {dchi2:.4g} above the reference "
                    f"{ref['chi_squared']:.10g}")
for n in names:
    r, f = ref["parameters"][n], fit["parameters"][n]
    allowed = 4 * r["uncertainty"] + 1e-9 * max(abs(r["value"]), 1e-6)
    if abs(f["value"] - r["value"]) > allowed:
        problems.append(f"{n} = {f['value']:.6g}, reference {r['value']:.6g} +- "
                        f"{r['uncertainty']:.3g} (off by {abs(f['value'] - r['value']):.3g})")
try:
    search = json.load(open(sys.argv[3])).get("global_search")
except (OSError, ValueError) as error:
    search = None
    problems.append(f"{sys.argv[3]}: {error}")
if not isinstance(search, dict):
    problems.append("convergence_metrics.json has no global_search section")
else:
    missing = [k for k in ("method", "point_evaluations", "seconds", "minima", "chosen")
               if k not in search]
    if not any(k in search for k in ("starts", "generations")):
        missing.append("starts|generations")
    if missing:
        problems.append(f"global_search lacks {missing}")
    minima = search.get("minima")
    if not isinstance(minima, list) or not minima or not all(
            isinstance(m, dict) and "chi2" in m and "parameters" in m for m in minima):
        problems.append(f"global_search.minima is not a non-empty list of {{chi2, parameters}}: "
                        f"{json.dumps(minima)[:200]}")
if problems:
    print(f"FAIL: {label}: " + "; ".join(problems))
    sys.exit(1)
print(f"ok: {label}: chi2 {fit['chi_squared']:.10g} (reference {ref['chi_squared']:.10g}, "
      f"{dchi2:+.3g}), gamma_dot_t0 {fit['parameters']['gamma_dot_t0']['value']:.5g}; "
      f"global_search {search.get('method')}, {len(search.get('minima'))} minima, "
      f"{search.get('seconds'):.3g} s")
PY
    :
  else
    failures=$((failures + 1))
  fi
}

# run_set NAME FRAMES DT Q GAP ANGLES CONTRAST OFFSET TRUTH: simulates the set, fits it from the
# truth (the reference), then from the midpoints and 2 random starts with the settings under test.
seed=0
run_set() {
  local name=$1 frames=$2 dt=$3 q=$4 gap=$5 angles=$6 contrast=$7 offset=$8 truth
  local truth_values start values before
  truth=$(tr -s '\n ' ' ' <<<"$9")
  truth_values=$(sed -E 's/[{}]//g; s/[A-Za-z_0-9]+: //g' <<<"$truth")
  write_set "$name/truth" "$frames" "$dt" "$q" "$gap" "$angles" "$contrast" "$offset" "$truth" \
    "[$truth_values]"
  (cd "$name/truth" && "$bin_dir/homodyne-simulate" --config fit.yaml > /dev/null) ||
    { echo "FAIL: set $name: homodyne-simulate"; failures=$((failures + 1)); return; }
  cd "$work/$name/truth" || exit 1
  expect_exit 0 "reduced chi2" "$bin_dir/homodyne" --config fit.yaml --output-dir ref \
    --global-search off --no-resume
  cd "$work" || exit 1
  [ -s "$name/truth/ref/nlsq/parameters.json" ] ||
    { echo "FAIL: set $name: no reference fit"; failures=$((failures + 1)); return; }
  for start in midpoint random1 random2; do
    seed=$((seed + 1))
    if [ $start = midpoint ]; then values=null; else values=$(random_start $seed); fi
    write_set "$name/$start" "$frames" "$dt" "$q" "$gap" "$angles" "$contrast" "$offset" \
      "$truth" "$values"
    ln -s ../truth/data.h5 "$name/$start/data.h5"
    before=$failures
    cd "$work/$name/$start" || exit 1
    expect_exit 0 "reduced chi2" "$bin_dir/homodyne" --config fit.yaml --output-dir out \
      --no-resume "${fit_flags[@]}"
    cd "$work" || exit 1
    if [ "$failures" -eq "$before" ]; then
      check_fit "$name/truth/ref" "$name/$start/out" "set $name from $start (values: $values)"
    fi
  done
}

# Shear phase over the window 6, 4 and 8 rad; diffusion decay 1.5, 1 and 2.
run_set a 120 0.0852 0.0131 824000 "[0, 45, 90]" "[0.3, 0.22, 0.15]" "[1.0, 0.97, 1.03]" \
  "{D0: 3000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 5.0e-4, beta: -0.3, gamma_dot_t_offset: 0,
    phi0: 3}"
run_set b 100 0.00955 0.012 900000 "[-20, 70]" "[0.35, 0.2]" "[1.02, 0.98]" \
  "{D0: 12000, alpha: -0.2, D_offset: 5, gamma_dot_t0: 3.0e-3, beta: 0.2, gamma_dot_t_offset: 0,
    phi0: -6}"
run_set c 110 0.377 0.0202 535000 "[-60, -15, 30, 75]" "[0.12, 0.25, 0.38, 0.3]" \
  "[0.96, 1.04, 1.0, 1.01]" \
  "{D0: 1500, alpha: -0.8, D_offset: 2, gamma_dot_t0: 1.5e-4, beta: -0.1, gamma_dot_t_offset: 0,
    phi0: 7}"

if [ "$failures" -ne 0 ]; then echo "global_search: $failures check(s) failed"; exit 1; fi
echo "global_search: all checks passed"
