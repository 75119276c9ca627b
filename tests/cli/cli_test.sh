#!/usr/bin/env bash
# End-to-end tests of the command-line programs: exit codes and messages for good and bad input.
# Usage: cli_test.sh BIN_DIR CASE FAULTS_PROGRAM   (runs one case in a fresh temporary folder)
# FAULTS_PROGRAM: the test build homodyne_with_faults (tests/cli/homodyne_with_faults.cc), the
# homodyne program with the faults of the HOMODYNE_TEST_* variables injected.
set -u
bin_dir=$(cd "$1" && pwd)
case_name=$2
faults_program=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

failures=0
# shellcheck source=test_lib.sh
source "$repo/tests/cli/test_lib.sh"

write_config() {  # write_config FILE MODE DATA_FILE [extra yaml]
  local truth="D0: 1000, alpha: -0.5, D_offset: 10"
  case "$2" in
    laminar_flow) truth="$truth, gamma_dot_t0: 0.01, beta: 0, gamma_dot_t_offset: 0, phi0: 0" ;;
    two_component)
      truth="D0_ref: 1000, alpha_ref: -0.3, D_offset_ref: 10, D0_sample: 20000, alpha_sample: -0.5,
               D_offset_sample: 0, v0: 20, v_beta: 0.5, v_offset: 1, f0: 0.3, f1: 0.01, f2: 0.5,
               f3: 0.2, phi0_het: 2" ;;
  esac
  cat > "$1" <<YAML
analysis_mode: $2
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
  data_file_name: $3
simulation:
  output: ./$3
  format: aps_u
  frames: 60
  phi_angles: [0, 45, 90]
  parameters: {$truth}
  contrast: [0.3, 0.28, 0.25]
  offset: 1.0
  noise_sigma: 0.01
  seed: 7
  dtype: float32
  compression: lzf
$4
YAML
}

# cuda_device_usable CONFIG: true when this build has CUDA and `--backend auto` picks a CUDA
# device for CONFIG (a machine with a GPU); the cases that expect cuda to be refused check this.
cuda_device_usable() {
  [ "${HOMODYNE_TEST_WITH_CUDA:-OFF}" != OFF ] &&
    "$bin_dir/homodyne" --config "$1" --dry-run --backend auto 2>&1 | grep -q "backend auto: cuda"
}

# expect_strategies_bitwise CONFIG: the fit of CONFIG with each strategy forced (standard, large,
# chunked, streaming) returns bitwise the same parameters, per-angle scaling, covariance and chi2
# (they run the same passes in the same order: docs/design.md section 3). Leaves out_STRATEGY/.
expect_strategies_bitwise() {
  local strategy
  for strategy in standard large chunked streaming; do
    expect_exit 0 "strategy $strategy \\(forced" "$bin_dir/homodyne" --config "$1" \
      --strategy $strategy --output-dir "out_$strategy"
    [ "$strategy" = standard ] || same_results out_standard "out_$strategy"
  done
}

# plot_python: prints a Python that has h5py and matplotlib (the system one first), or exits 77
# (ctest SKIP_RETURN_CODE) when there is none: plots are optional, the fit never needs them.
plot_python() {
  local python
  for python in /usr/bin/python3 python3; do
    if "$python" -c "import h5py, matplotlib, numpy" 2>/dev/null; then echo "$python"; return; fi
  done
  echo "skipped: no Python with h5py, numpy and matplotlib"
  exit 77
}

# expect_png FILE: FILE exists, starts with the PNG signature and is not trivially small.
expect_png() {
  local signature
  signature=$(head -c 8 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  if [ "$signature" != 89504e470d0a1a0a ]; then
    echo "FAIL: $1 missing or not a PNG (signature '$signature')"
    failures=$((failures + 1)); return
  fi
  if [ "$(stat -c %s "$1")" -lt 10000 ]; then
    echo "FAIL: $1 is only $(stat -c %s "$1") bytes"; failures=$((failures + 1)); return
  fi
  echo "ok: $1 is a PNG of $(stat -c %s "$1") bytes"
}

case "$case_name" in
  simulate_and_dry_run)
    write_config sim.yaml laminar_flow sim.h5 ""
    expect_exit 0 "wrote .*sim.h5" "$bin_dir/homodyne-simulate" --config sim.yaml
    expect_exit 0 "points to fit +10266 " "$bin_dir/homodyne" --config sim.yaml --dry-run
    expect_exit 0 "angles kept +3: 0.00, 45.00, 90.00" "$bin_dir/homodyne" --config sim.yaml --dry-run
    expect_exit 0 "parameters +13 fitted" "$bin_dir/homodyne" --config sim.yaml --dry-run
    expect_exit 0 "strategy +standard" "$bin_dir/homodyne" --config sim.yaml --dry-run
    expect_exit 0 "strategy +streaming \(forced" "$bin_dir/homodyne" --config sim.yaml --dry-run \
      --strategy streaming
    expect_exit 0 "memory available +1.00 GB \(--memory-limit-gb\)" "$bin_dir/homodyne" \
      --config sim.yaml --dry-run --memory-limit-gb 1
    expect_exit 0 "parameters +9 fitted: 3 physical \+ 6 scaling" "$bin_dir/homodyne" --config sim.yaml --dry-run \
      --static-mode --data-file ./sim.h5
    expect_exit 0 "not scanned \(fast mode\)" "$bin_dir/homodyne" --config sim.yaml --dry-run \
      --fast-mode
    # The command line's analysis mode decides bounds and start values: a
    # static config run with --laminar-flow gets laminar_flow's (it failed with "no bounds for
    # parameter 'gamma_dot_t0'"); a laminar_flow config whose start values and bounds name the
    # shear terms runs with --static-mode, which drops them with a warning.
    write_config static.yaml static sim.h5 ""
    expect_exit 0 "parameters +13 fitted: 7 physical \+ 6 scaling" "$bin_dir/homodyne" \
      --config static.yaml --dry-run --laminar-flow
    expect_exit 0 "start values +D0 50050 in \[100, 100000\], .*gamma_dot_t0 0.002 in \[1e-06, 0.5\]" \
      "$bin_dir/homodyne" --config static.yaml --dry-run --laminar-flow --initial-gamma-dot-t0 0.002
    write_config shear.yaml laminar_flow sim.h5 "initial_parameters:
  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
  values: [1000, -0.5, 10, 0.01, 0, 0, 0]
parameter_space:
  bounds:
    - {name: gamma_dot_t0, min: 1.0e-5, max: 0.1}
    - {name: phi0, min: -5, max: 5}"
    expect_exit 0 "start values +D0 1000 in \[100, 100000\], alpha -0.5 in \[-2, 2\], D_offset 10 in" \
      "$bin_dir/homodyne" --config shear.yaml --dry-run --static-mode
    expect_exit 0 "'gamma_dot_t0', not a parameter of static mode; ignored" "$bin_dir/homodyne" \
      --config shear.yaml --dry-run --static-mode
    expect_exit 0 "shear.yaml: valid" "$bin_dir/homodyne-config" --validate shear.yaml
    # A laminar-flow-only flag in static mode names the flag as the user types it.
    expect_exit 2 "--initial-gamma-dot-offset applies to laminar_flow only" "$bin_dir/homodyne" \
      --config sim.yaml --dry-run --static-mode --initial-gamma-dot-offset 0.1
    HOMODYNE_MEMORY_LIMIT=2 expect_exit 0 "2.00 GB \(HOMODYNE_MEMORY_LIMIT\)" \
      "$bin_dir/homodyne" --config sim.yaml --dry-run
    ;;
  q_rings)
    # Several q rings (docs/configuration.md, Several q rings; docs/results.md, Several q rings):
    # a 3-ring x 2-angle file simulated with one truth (the demo's, static mode, 150 frames),
    # fitted ring by ring.
    sed 's/^analysis_mode: laminar_flow/analysis_mode: static/; s/wavevector_q: 0.0054 /wavevector_q: [0.0048, 0.0054, 0.0060]/; s/phi_angles: \[0.0, 45.0, 90.0\]/phi_angles: [0.0, 90.0]/; s/frames: 500/frames: 150/; s/simulated_laminar_flow/rings/' \
      "$repo/configs/simulate_laminar_flow.yaml" > rings.yaml
    expect_exit 0 "wrote .*rings.h5: 135000 points" "$bin_dir/homodyne-simulate" --config rings.yaml
    expect_exit 0 "q rings: 3 selected, q_fit: independent" "$bin_dir/homodyne" --config rings.yaml --dry-run
    expect_exit 0 "ring 2: q = 0.0054 1/A: 2 angles \(0, 90 deg\), 44104 points" \
      "$bin_dir/homodyne" --config rings.yaml --dry-run
    expect_exit 0 "plan of ring 3 \(every ring is planned alike\)" "$bin_dir/homodyne" \
      --config rings.yaml --dry-run --q-index 2
    grep -q "checkpoints *none to resume in ./checkpoints/q_0.006" <<<"$last_output" ||
      { echo "FAIL: the ring's checkpoint folder is not its own"; failures=$((failures + 1)); }
    # Every ring, one after the other: its own folder, then the summary naming every ring.
    expect_exit 0 "q summary in out/nlsq/q_summary.json" "$bin_dir/homodyne" --config rings.yaml \
      --output-dir out
    grep -q "ring 3 of 3, q = 0.006 1/A" <<<"$last_output" ||
      { echo "FAIL: no line for ring 3"; failures=$((failures + 1)); }
    for ring in q_0.0048 q_0.0054 q_0.006; do
      for file in parameters.json analysis_results_nlsq.json fitted_data.h5 derived_rates.json; do
        [ -s "out/$ring/nlsq/$file" ] || { echo "FAIL: out/$ring/nlsq/$file missing"; failures=$((failures + 1)); }
      done
    done
    # Each ring recovers the shared truth within 4 error bars; the summary names every ring.
    if python3 - out/nlsq/q_summary.json out/nlsq/q_summary.csv <<'PY'; then
import csv, json, sys
summary = json.load(open(sys.argv[1]))
truth = {"D0": 3000.0, "alpha": -0.5, "D_offset": 10.0}
rings = summary["rings"]
assert [ring["folder"] for ring in rings] == ["q_0.0048", "q_0.0054", "q_0.006"], rings
assert summary["n_rings"] == 3 and summary["reference_time_s"] > 0
for ring in rings:
    assert ring["fitted"] and ring["quality_flag"] and ring["reduced_chi_squared"] > 0, ring
    assert ring["rates_at_reference_time"]["D"]["uncertainty"] > 0, ring
    for name, value in truth.items():
        fit = ring["parameters"][name]
        pull = abs(fit["value"] - value) / fit["uncertainty"]
        print(f"q {ring['q']}: {name} {fit['value']:.6g} +- {fit['uncertainty']:.3g} ({pull:.2f} sigma)")
        assert pull < 4, (ring["q"], name, fit, value)
rows = list(csv.DictReader(open(sys.argv[2])))
assert [row["folder"] for row in rows] == ["q_0.0048", "q_0.0054", "q_0.006"], rows
assert all(row["D0_uncertainty"] and row["D_at_reference_time"] for row in rows), rows
PY
      echo "ok: every ring recovers the truth; the summary names every ring"
    else
      echo "FAIL: q_summary"; failures=$((failures + 1))
    fi
    # Interrupted in ring 1: its checkpoint in its own folder; the rerun resumes it and ends with
    # bitwise the uninterrupted rings.
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=100:15 expect_exit 3 "interrupted by SIGTERM; checkpoint saved" \
      "$faults_program" --config rings.yaml --output-dir resumed
    ls checkpoints/q_0.0048/homodyne_state_batch_*.h5 > /dev/null 2>&1 ||
      { echo "FAIL: no checkpoint in checkpoints/q_0.0048"; failures=$((failures + 1)); }
    expect_exit 0 "resuming from ./checkpoints/q_0.0048/" "$bin_dir/homodyne" --config rings.yaml \
      --output-dir resumed
    for ring in q_0.0048 q_0.0054 q_0.006; do same_results "out/$ring" "resumed/$ring"; done
    # A ring of the list is bitwise the fit of a config naming that ring alone.
    sed 's/wavevector_q: \[0.0048, 0.0054, 0.0060\]/wavevector_q: 0.0054/' rings.yaml > one.yaml
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config one.yaml --output-dir one
    same_results out/q_0.0054 one
    # One ring alone (a SLURM array's task), then the summary from the folders.
    expect_exit 0 "ring 2 of 3 done; when every ring is, write the summary with --q-summary" \
      "$bin_dir/homodyne" --config rings.yaml --output-dir task --q-index 1
    [ -d task/q_0.0048 ] && { echo "FAIL: --q-index 1 fitted ring 1"; failures=$((failures + 1)); }
    same_results out/q_0.0054 task/q_0.0054
    expect_exit 0 "q summary in task/nlsq/q_summary.json" "$bin_dir/homodyne" --config rings.yaml \
      --output-dir task --q-summary
    grep -q '"fitted": false' task/nlsq/q_summary.json ||
      { echo "FAIL: the summary does not mark the rings not fitted"; failures=$((failures + 1)); }
    expect_exit 2 "--q-index 3: the config selects 3 ring\(s\), indices 0 to 2" "$bin_dir/homodyne" \
      --config rings.yaml --output-dir task --q-index 3
    expect_exit 2 "--q-index needs several q rings" "$bin_dir/homodyne" --config one.yaml \
      --q-index 0
    # `all`, and data_filtering keeping two rings.
    sed 's/wavevector_q: \[0.0048, 0.0054, 0.0060\]/wavevector_q: all/' rings.yaml > all.yaml
    printf 'data_filtering:\n  enabled: true\n  q_range: {min: 0.005, max: 0.007}\n' >> all.yaml
    expect_exit 0 "q rings: 2 selected" "$bin_dir/homodyne" --config all.yaml --dry-run
    # Errors name the key and the ring.
    sed 's/wavevector_q: \[0.0048, 0.0054, 0.0060\]/wavevector_q: [0.0054, 0.009]/' rings.yaml > absent.yaml
    expect_exit 1 "wavevector_q\[1\]: wavevector q = 0.009 1/A is not present" "$bin_dir/homodyne" \
      --config absent.yaml --dry-run
    # A SLURM array over the rings (slurm/README.md, Several q rings), its tasks run without
    # SLURM: every ring's folder in one results folder, then the summary from them.
    for task in 1 2 3; do
      SLURM_JOB_ID=$((4240 + task)) SLURM_ARRAY_JOB_ID=77 SLURM_ARRAY_TASK_ID=$task \
        SLURM_CPUS_PER_TASK=2 SCRATCH_DIR=$PWD/scratch Q_RINGS=1 CONFIG=rings.yaml \
        HOMODYNE=$bin_dir/homodyne bash "$repo/slurm/homodyne_array.sbatch" > "array_$task.log" 2>&1 ||
        { echo "FAIL: array task $task"; cat "array_$task.log"; failures=$((failures + 1)); }
    done
    expect_exit 0 "q summary in homodyne_results/77/rings/nlsq/q_summary.json" "$bin_dir/homodyne" \
      --config rings.yaml --output-dir homodyne_results/77/rings --q-summary
    [ "$(grep -c '"fitted": true' homodyne_results/77/rings/nlsq/q_summary.json)" -eq 3 ] ||
      { echo "FAIL: the array's summary does not hold 3 fitted rings"; failures=$((failures + 1)); }
    same_results out/q_0.006 homodyne_results/77/rings/q_0.006
    # Rings of different frame counts (a file h5py writes: the simulator writes one size).
    "$(plot_python)" - <<'PY' || { echo "FAIL: cannot write frames.h5"; failures=$((failures + 1)); }
import h5py, numpy
with h5py.File("data/frames.h5", "w") as f:
    f["/xpcs/qmap/dynamic_v_list_dim0"] = numpy.array([0.0054, 0.006])
    f["/xpcs/qmap/dynamic_v_list_dim1"] = numpy.array([0.0])
    f["/xpcs/twotime/processed_bins"] = numpy.array([1, 2])
    for k, n in ((1, 20), (2, 30)):
        f[f"/xpcs/twotime/correlation_map/c2_{k:05d}"] = numpy.triu(numpy.ones((n, n))) + 0.1
PY
    sed 's/wavevector_q: \[0.0048, 0.0054, 0.0060\]/wavevector_q: [0.0054, 0.006]/; s/data_file_name: rings.h5/data_file_name: frames.h5/' rings.yaml > frames.yaml
    expect_exit 1 "analyzer_parameters.scattering.wavevector_q: the ring q = 0.006 1/A \(/xpcs/twotime/correlation_map/c2_00002\) has 30 frames but the ring q = 0.0054 1/A" \
      "$bin_dir/homodyne" --config frames.yaml --dry-run
    # Joint: every ring's matrices in one data set, one fit with the physical parameters shared
    # and a contrast and offset per (q, phi) matrix (docs/design.md section 2d).
    sed 's/wavevector_q: \[0.0048, 0.0054, 0.0060\]/wavevector_q: [0.0048, 0.0054, 0.0060]\n    q_fit: joint/' rings.yaml > joint.yaml
    expect_exit 0 "plan of the joint fit" "$bin_dir/homodyne" --config joint.yaml --dry-run
    expect_exit 0 "results in joint/nlsq/" "$bin_dir/homodyne" --config joint.yaml \
      --output-dir joint
    "$(plot_python)" - <<'PY' || { echo "FAIL: the joint fit's per-matrix q"; failures=$((failures + 1)); }
import json
result = json.load(open("joint/nlsq/parameters.json"))
qs = sorted({round(angle["q"], 6) for angle in result["per_angle"]})
assert qs == [0.0048, 0.0054, 0.006], qs
assert result["convergence_status"] == "converged", result["convergence_status"]
PY
    ;;
  frame_window)
    write_config sim.yaml static sim.h5 ""
    "$bin_dir/homodyne-simulate" --config sim.yaml --frames 40 > /dev/null || failures=1
    sed -i 's/end_frame: -1/end_frame: 30/; s/start_frame: 1/start_frame: 11/' sim.yaml
    # frames 11..30 -> 20 raw frames, 19 fitted times: 3 * 19 * 18 points.
    expect_exit 0 "points to fit +1026 " "$bin_dir/homodyne" --config sim.yaml --dry-run
    # end_frame past the file is clamped with a warning, as the reference does.
    sed -i 's/end_frame: 30/end_frame: 99/' sim.yaml
    expect_exit 0 "end_frame = 99 beyond the file's 40 frames" "$bin_dir/homodyne" \
      --config sim.yaml --dry-run
    # A window starting past the last frame is an error naming the file.
    sed -i 's/start_frame: 11/start_frame: 50/' sim.yaml
    expect_exit 1 "sim.h5.*start_frame" "$bin_dir/homodyne" --config sim.yaml --dry-run
    ;;
  fit)
    write_config sim.yaml laminar_flow sim.h5 ""
    sed -i 's/frames: 60/frames: 120/; s/gamma_dot_t0: 0.01/gamma_dot_t0: 0.0002/' sim.yaml
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config sim.yaml --output-dir out
    for file in parameters.json analysis_results_nlsq.json convergence_metrics.json \
      fitted_data.h5; do
      [ -s "out/nlsq/$file" ] || { echo "FAIL: out/nlsq/$file missing"; failures=$((failures + 1)); }
    done
    grep -q '"convergence_status": "converged"' out/nlsq/parameters.json ||
      { echo "FAIL: parameters.json not converged"; failures=$((failures + 1)); }
    [ "$(grep -c '"phi"' out/nlsq/parameters.json)" -eq 3 ] ||
      { echo "FAIL: parameters.json does not list 3 angles"; failures=$((failures + 1)); }
    grep -q '"phi": 45.0' out/nlsq/parameters.json ||
      { echo "FAIL: angle 45 missing from per_angle"; failures=$((failures + 1)); }
    # Results that cannot be written: exit 1 naming the folder; nothing else is lost.
    echo "a file" > blocked
    expect_exit 1 "blocked/nlsq" "$bin_dir/homodyne" --config sim.yaml --output-dir blocked
    expect_exit 1 "phi +45.00 deg +contrast" "$bin_dir/homodyne" --config sim.yaml \
      --output-dir blocked
    # Every strategy of the shared pass returns bitwise the same fit.
    expect_strategies_bitwise sim.yaml
    same_results out out_standard  # the default strategy is standard here
    # An allocation failure while setting up a strategy falls back to the next leaner one.
    HOMODYNE_TEST_FAIL_ALLOCATION=large expect_exit 0 "fell back to streaming" \
      "$faults_program" --config sim.yaml --strategy large --output-dir out_fallback
    grep -q "fell back to streaming" out_fallback/nlsq/analysis_results_nlsq.json ||
      { echo "FAIL: fallback not recorded in the results"; failures=$((failures + 1)); }
    ;;
  fit_status)
    # docs/results.md, Convergence status: contrast and offset started on the lower bounds their
    # optimum lies below, the physical parameters fixed: nothing can move. With sigma 1e-5 the
    # residuals are over a thousand sigma wide: no_progress, exit 1, the reason printed and
    # written. With sigma 0.01 the same point is the bounded optimum: converged, exit 0, with the
    # warning that nothing was free.
    write_config sim.yaml static sim.h5 "initial_parameters:
  values: [1000, -0.5, 10]
  fixed_parameters: [D0, alpha, D_offset]
  per_angle_scaling: {contrast: [0.5, 0.5, 0.5], offset: [1.2, 1.2, 1.2]}
parameter_space:
  bounds: [{name: contrast, min: 0.5, max: 0.6}, {name: offset, min: 1.2, max: 1.5}]
optimization:
  nlsq: {sigma: 1.0e-5}"
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    expect_exit 1 "fit no_progress: the fit never moved from its start" "$bin_dir/homodyne" \
      --config sim.yaml --output-dir stuck --global-search off --no-variable-projection
    grep -q '"convergence_status": "no_progress"' stuck/nlsq/parameters.json ||
      { echo "FAIL: parameters.json not no_progress"; failures=$((failures + 1)); }
    sed -i 's/sigma: 1.0e-5/sigma: 0.01/' sim.yaml
    expect_exit 0 "no fitted parameter was free to move" "$bin_dir/homodyne" \
      --config sim.yaml --output-dir held --global-search off --no-variable-projection
    grep -q '"convergence_status": "converged"' held/nlsq/parameters.json ||
      { echo "FAIL: parameters.json not converged"; failures=$((failures + 1)); }
    ;;
  fit_two_component)
    # A small two_component set (150 frames x 3 angles) fitted as the config stands (bound
    # midpoints, global phase on): every strategy bitwise the same, the 14 physical parameters
    # named in model order (docs/model.md, Two-component mode).
    write_config sim.yaml two_component sim.h5 ""
    sed -i 's/frames: 60/frames: 150/' sim.yaml
    expect_exit 0 "wrote .*sim.h5" "$bin_dir/homodyne-simulate" --config sim.yaml
    expect_strategies_bitwise sim.yaml
    python3 - out_standard/nlsq/parameters.json <<'PY' ||
import json, sys
result = json.load(open(sys.argv[1]))
names = [name for name in result["parameters"] if name not in ("contrast", "offset")]
want = ["D0_ref", "alpha_ref", "D_offset_ref", "D0_sample", "alpha_sample", "D_offset_sample",
        "v0", "v_beta", "v_offset", "f0", "f1", "f2", "f3", "phi0_het"]
if result["analysis_mode"] != "two_component" or names != want:
    print(result["analysis_mode"], names)
    sys.exit(1)
PY
      { echo "FAIL: parameters.json is not a two_component fit in model order"; failures=$((failures + 1)); }
    ;;
  profile_check)
    # The profile check of the uncertainties (docs/results.md, What the uncertainties mean): a
    # two_component set (bench/two_component_success.sh seed 1 set22) fitted from its optimum
    # with the global phase off. Held 4 standard errors toward the truth, v_offset's chi2 rises by
    # 9.5 reduced chi2 (16 on a quadratic surface): the check names it, by default in this mode;
    # optimization.nlsq.profile_check: false skips it and changes no number.
    cat > pc.yaml <<'YAML'
analysis_mode: two_component
analyzer_parameters:
  dt: 0.1
  start_frame: 1
  end_frame: -1
  scattering: {wavevector_q: 0.0054}
experimental_data: {data_folder_path: ./, data_file_name: data.h5}
simulation:
  output: ./data.h5
  frames: 384
  phi_angles: [0.0, 45.0, 90.0]
  parameters: {D0_ref: 679.027, alpha_ref: 0.224005, D_offset_ref: 0.0, D0_sample: 41277.2,
               alpha_sample: -0.0174757, D_offset_sample: 0.0, v0: 15.3263, v_beta: 0.463554,
               v_offset: 0.794962, f0: 0.340249, f1: -0.0050117, f2: 0.478377, f3: 0.172164,
               phi0_het: 1.29729}
  contrast: 0.3
  offset: 1.0
  noise_sigma: 0.01
  seed: 1022
  dtype: float32
initial_parameters:
  parameter_names: [D0_ref, alpha_ref, D_offset_ref, D0_sample, alpha_sample, D_offset_sample,
                    v0, v_beta, v_offset, f0, f1, f2, f3, phi0_het]
  values: [313.902, 0.355799, 411.643, 46143.5, -0.0113846, -5402.44, 5.61172, 0.687034,
           17.3792, 0.912849, -0.00181713, -1.0, -0.397814, 1.57581]
optimization:
  nlsq: {sigma: 0.01, global_search: {method: "off"}}
YAML
    sed 's/sigma: 0.01,/sigma: 0.01, profile_check: false,/' pc.yaml > pc_off.yaml
    expect_exit 0 "wrote .*data.h5" "$bin_dir/homodyne-simulate" --config pc.yaml
    expect_exit 0 "the data do not determine [a-zA-Z0-9_, ]*v_offset[a-zA-Z0-9_, ]* \(4 standard errors from the result, the other parameters refitted, chi2 rises by less than 12 reduced chi2" \
      "$bin_dir/homodyne" --config pc.yaml --output-dir on
    grep -q "4 standard errors from the result" on/nlsq/convergence_metrics.json ||
      { echo "FAIL: the profile warning is not in the results"; failures=$((failures + 1)); }
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config pc_off.yaml --output-dir off
    if grep -q "4 standard errors from the result" <<<"$last_output"; then
      echo "FAIL: profile_check: false still checked"; failures=$((failures + 1))
    fi
    # The same fit either way; only the intervals of what the check names come from profiles
    # (docs/results.md, Intervals).
    python3 - on/nlsq/parameters.json off/nlsq/parameters.json <<'PY' || failures=$((failures + 1))
import json, sys
on, off = (json.load(open(path)) for path in sys.argv[1:])
interval_keys = ("interval_68", "interval_95", "interval_method", "interval_note", "profile")
strip = lambda entry: {k: v for k, v in entry.items() if k not in interval_keys}
failed = []
for name, entry in on["parameters"].items():
    if strip(entry) != strip(off["parameters"][name]):
        failed.append(name + ": value or uncertainty differ")
if on["covariance"] != off["covariance"] or on["chi_squared"] != off["chi_squared"]:
    failed.append("covariance or chi2 differ")
if on["parameters"]["v_offset"].get("interval_method") != "profile":
    failed.append("v_offset, named by the check, has no profile interval")
if off["parameters"]["v_offset"].get("interval_method") != "student_t":
    failed.append("without the check v_offset's interval is not value +- t u")
print("FAIL: " + "; ".join(failed) if failed else "ok: the check changes only the intervals of what it names")
sys.exit(1 if failed else 0)
PY
    ;;
  bounds_warning)
    # Full validation warns about a parameter that ended on a bound; fast mode skips that check.
    write_config sim.yaml static sim.h5 "initial_parameters:
  parameter_names: [D0, alpha, D_offset]
  values: [700, -0.5, 10]
parameter_space:
  bounds:
    - {name: D0, min: 100, max: 800}"
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    # --uncertainty standard: what fast mode reports (it skips the jackknife's pass).
    expect_exit 0 "D0 = 800 ended at its upper bound" "$bin_dir/homodyne" --config sim.yaml \
      --output-dir full --uncertainty standard
    grep -q "ended at its upper bound" full/nlsq/convergence_metrics.json ||
      { echo "FAIL: the bounds warning is not in the results"; failures=$((failures + 1)); }
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config sim.yaml --output-dir fast --fast-mode
    if grep -q "ended at its" <<<"$last_output"; then
      echo "FAIL: fast mode warned about bounds"; failures=$((failures + 1))
    fi
    same_results full fast
    ;;
  save_plots)
    python=$(plot_python) || { echo "$python"; exit 77; }
    write_config sim.yaml laminar_flow sim.h5 ""
    sed -i 's/gamma_dot_t0: 0.01/gamma_dot_t0: 0.0002/' sim.yaml
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    expect_exit 0 "plots written" "$bin_dir/homodyne" --config sim.yaml --output-dir out \
      --save-plots
    for phi in 0.0 45.0 90.0; do expect_png "out/nlsq/c2_heatmaps_phi_${phi}deg.png"; done
    # Plots that cannot be drawn are a warning: the fit's exit code and result files stand.
    HOMODYNE_PLOT_SCRIPT=/no/such/plot.py expect_exit 0 "no plots written: HOMODYNE_PLOT_SCRIPT" \
      "$bin_dir/homodyne" --config sim.yaml --output-dir out_no_script --save-plots
    [ -s out_no_script/nlsq/parameters.json ] ||
      { echo "FAIL: results missing without plots"; failures=$((failures + 1)); }
    HOMODYNE_PYTHON=/no/such/python expect_exit 0 "no plots written: /no/such/python cannot" \
      "$bin_dir/homodyne" --config sim.yaml --output-dir out_no_python --save-plots
    ;;
  plot_script)
    # scripts/homodyne_plot.py on the fitted_data.h5 of an ordinary fit (no --save-plots).
    python=$(plot_python) || { echo "$python"; exit 77; }
    script="$repo/scripts/homodyne_plot.py"
    write_config sim.yaml laminar_flow sim.h5 ""
    sed -i 's/gamma_dot_t0: 0.01/gamma_dot_t0: 0.0002/; s/contrast: \[.*\]/contrast: 0.3/' sim.yaml
    sed -i 's/phi_angles: \[0, 45, 90\]/phi_angles: [-30, 60]/' sim.yaml
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    "$bin_dir/homodyne" --config sim.yaml --output-dir out > /dev/null 2>&1 || failures=1
    expect_exit 0 "wrote out/nlsq/c2_heatmaps_phi_-30.0deg.png" "$python" "$script" out
    for phi in -30.0 60.0; do expect_png "out/nlsq/c2_heatmaps_phi_${phi}deg.png"; done
    # Matrices larger than --max-pixels are strided (59 fitted times -> every 3rd).
    expect_exit 0 "wrote small/c2_heatmaps_phi_60.0deg.png" "$python" "$script" out \
      --max-pixels 20 --plot-dir small
    expect_png small/c2_heatmaps_phi_60.0deg.png
    # The data alone (--plot-experimental-data), before any fit: from the data file (the q
    # ring chosen as the fit chooses it; without dt the times are in frames), from the config
    # (its data file, q, dt and frame window), from the fitted_data.h5 of a fit, from an
    # APS-old file; files that cannot be plotted are one line, exit 1.
    experimental=(experimental_c2_heatmaps.png experimental_g2_lag.png)
    expect_exit 0 "wrote exp_data/experimental_g2_lag.png" "$python" "$script" \
      --plot-experimental-data sim.h5
    for figure in "${experimental[@]}"; do expect_png "exp_data/$figure"; done
    expect_exit 0 "wrote exp_config/experimental_c2_heatmaps.png" "$python" "$script" \
      --plot-experimental-data --config sim.yaml --plot-dir exp_config
    expect_exit 0 "wrote exp_yaml/experimental_c2_heatmaps.png" "$python" "$script" \
      --plot-experimental-data sim.yaml --plot-dir exp_yaml --jobs 1
    cmp -s exp_config/experimental_g2_lag.png exp_yaml/experimental_g2_lag.png ||
      { echo "FAIL: --config and a .yaml argument draw different figures"; failures=$((failures + 1)); }
    cmp -s exp_data/experimental_g2_lag.png exp_config/experimental_g2_lag.png &&
      { echo "FAIL: the config's dt changes nothing"; failures=$((failures + 1)); }
    expect_exit 0 "wrote out/nlsq/experimental_g2_lag.png" "$python" "$script" \
      --plot-experimental-data out
    for figure in "${experimental[@]}"; do expect_png "out/nlsq/$figure"; done
    sed 's/format: aps_u/format: aps_old/; s/sim\.h5/old.h5/' sim.yaml > old.yaml
    "$bin_dir/homodyne-simulate" --config old.yaml > /dev/null || failures=$((failures + 1))
    expect_exit 0 "wrote exp_old/experimental_c2_heatmaps.png" "$python" "$script" \
      --plot-experimental-data old.h5 --q 0.0054 --dt 0.1 --plot-dir exp_old
    expect_png exp_old/experimental_c2_heatmaps.png
    expect_exit 1 "^homodyne-plot: error: sim.h5: wavevector q = 0.02 1/A is not present: the closest is 0.0054" \
      "$python" "$script" --plot-experimental-data sim.h5 --q 0.02
    expect_exit 1 "^homodyne-plot: error: out/nlsq/fitted_data.h5: neither the APS-U layout" \
      "$python" "$script" --plot-experimental-data out/nlsq/fitted_data.h5
    expect_exit 1 "^homodyne-plot: error: missing.h5: not found" \
      "$python" "$script" --plot-experimental-data missing.h5
    expect_exit 1 "nowhere/nlsq/fitted_data.h5: not found" "$python" "$script" nowhere
    mkdir -p junk/nlsq && echo "not HDF5" > junk/nlsq/fitted_data.h5
    expect_exit 1 "junk/nlsq/fitted_data.h5: cannot read it as HDF5" "$python" "$script" junk
    expect_exit 2 "usage" "$python" "$script"
    ;;
  plot_bad_input)
    # homodyne_plot.py on result files it cannot plot (tests/fuzz/corpus/plot/, each placed in a
    # copy of valid results under its file name): one line naming the file and the key path or
    # dataset, exit 1, never a traceback; size flags out of range are refused naming the flag.
    python=$(plot_python) || { echo "$python"; exit 77; }
    script="$repo/scripts/homodyne_plot.py"
    "$python" "$repo/tests/cli/plot_results.py" good || failures=$((failures + 1))
    expect_exit 0 "wrote good/nlsq/parameter_correlations.png" "$python" "$script" good
    declare -A expected=(
      [fitted_data_nan_time.h5]="/t\[3\]: nan: the fitted times must be finite"
      [fitted_data_decreasing_time.h5]="/t\[5\]: 0.3 after 0.5: the fitted times must increase"
      [fitted_data_string_phi.h5]="/angles/phi_000 attribute phi: 'zero': must be a number"
      [fitted_data_wrong_shape.h5]="/angles/phi_000/data: \(8, 7\) float64: must be a 8 x 8"
      [parameters_string_chi2.json]="key chi_squared: \"abc\" is not a number"
      [parameters_list_reduced.json]="key reduced_chi_squared: \[1, 2\] is not a number"
      [parameters_null_mode.json]="key analysis_mode: null is not a string"
      [parameters_missing_reduced.json]="key reduced_chi_squared: missing"
      [parameters_string_in_matrix.json]="key correlation.matrix\[0\]\[1\]: \"x\" is not a number"
      [parameters_matrix_not_square.json]="key correlation.matrix: 1 rows for 2 parameter_names"
      [convergence_metrics_string_minimum.json]="key global_search.minima\[0\].chi2: \"low\""
      [convergence_history_string_accepted.json]="key history\[0\].accepted: \"yes\" is not true"
      [derived_rates_short_band.json]="key D_interval_68: must hold one \[lo, hi\] per time in t \(3\)"
      [derived_rates_short_curve.json]="key D: 2 values for 3 times in t"
      [derived_rates_string_time.json]="key t\[0\]: \"0.1\" is not a number"
    )
    for input in "$repo"/tests/fuzz/corpus/plot/*; do
      name=$(basename "$input")
      case $name in
        fitted_data_*) target=fitted_data.h5 ;;
        parameters_*) target=parameters.json ;;
        convergence_metrics_*) target=convergence_metrics.json ;;
        convergence_history_*) target=convergence_history.json ;;
        derived_rates_*) target=derived_rates.json ;;
        *) echo "FAIL: $name: no result file to place it as"; failures=$((failures + 1)); continue ;;
      esac
      rm -rf bad && cp -r good bad && cp "$input" "bad/nlsq/$target"
      expect_exit 1 "^homodyne-plot: error: bad/nlsq/$target(: |, )${expected[$name]:-}" \
        "$python" "$script" bad
      if [ "$(wc -l <<<"$last_output")" -ne 1 ] || grep -q Traceback <<<"$last_output"; then
        echo "FAIL: $name: not one line"; failures=$((failures + 1))
      fi
    done
    expect_exit 2 "^homodyne-plot: error: --dpi 100000: must be 10 to 1200$" \
      "$python" "$script" good --dpi 100000
    expect_exit 2 "^homodyne-plot: error: --max-pixels 100000: must be 2 to 4000$" \
      "$python" "$script" good --max-pixels 100000
    expect_exit 2 "^homodyne-plot: error: --jobs 100: must be 0 to 64$" \
      "$python" "$script" good --jobs 100
    expect_exit 2 "^homodyne-plot: error: --q: only with --plot-experimental-data$" \
      "$python" "$script" good --q 0.0054
    expect_exit 2 "^homodyne-plot: error: --dt -1.0: must be a positive number$" \
      "$python" "$script" --plot-experimental-data good --dt -1
    expect_exit 2 "^homodyne-plot: error: the following arguments are required: OUTPUT_DIR" \
      "$python" "$script" --plot-experimental-data
    # A figure too large for the dpi (400 parameters' correlations at 1200 dpi: 171 inches).
    "$python" - good/nlsq/parameters.json <<'PY' || failures=$((failures + 1))
import json, sys
n = 400
json.dump({"analysis_mode": "static", "chi_squared": 1.0, "reduced_chi_squared": 1.0,
           "correlation": {"parameter_names": [f"p{k}" for k in range(n)],
                           "matrix": [[float(i == j) for j in range(n)] for i in range(n)]}},
          open(sys.argv[1], "w"))
PY
    expect_exit 1 "^homodyne-plot: error: big/parameter_correlations.png: the figure would be .* at --dpi 1200, .*: choose a smaller --dpi$" \
      "$python" "$script" good --dpi 1200 --plot-dir big
    [ ! -e big/parameter_correlations.png.partial.png ] ||
      { echo "FAIL: a partial PNG is left"; failures=$((failures + 1)); }
    # Any other failure: one line naming what was being done, the traceback only on request.
    crash="import sys; sys.path.insert(0, '$repo/scripts'); import homodyne_plot as plot
def main(argv):
    plot.current_activity = 'x/fitted_data.h5: reading it'
    raise ZeroDivisionError('division by zero')
plot.main = main
sys.exit(plot.run(sys.argv[1:]))"
    expect_exit 1 "^homodyne-plot: error: x/fitted_data.h5: reading it: ZeroDivisionError: division by zero \(--debug or HOMODYNE_PLOT_DEBUG=1 prints the traceback\)$" \
      "$python" -c "$crash" good
    HOMODYNE_PLOT_DEBUG=1 expect_exit 1 "Traceback" "$python" -c "$crash" good
    expect_exit 1 "Traceback" "$python" -c "$crash" good --debug
    ;;
  plot_figures)
    # homodyne-plot (the build tree's wrapper, next to the programs) draws every figure of
    # docs/results.md, Figures, from the files of a finished fit: each a PNG of reasonable size,
    # no two the same. The final fit runs many iterations (no global phase, no variable
    # projection) so that convergence_history.json has a history to plot.
    python=$(plot_python) || { echo "$python"; exit 77; }
    write_config sim.yaml static sim.h5 "optimization:
  nlsq: {variable_projection: false}"
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config sim.yaml --output-dir out \
      --global-search off
    # The history belongs to this fit: its chi2 and iterations are convergence_metrics.json's,
    # one entry per iteration from 0, and the accepted chi2 never rises.
    "$python" - out/nlsq <<'PY' || { echo "FAIL: convergence_history.json"; failures=$((failures + 1)); }
import json, sys
folder = sys.argv[1]
history = json.load(open(folder + "/convergence_history.json"))
metrics = json.load(open(folder + "/convergence_metrics.json"))["convergence"]
entries = history["history"]
chi2 = [entry["chi2"] for entry in entries]
checks = {
    "chi2 matches": history["chi_squared"] == metrics["final_chi_squared"],
    "iterations match": history["iterations"] == metrics["iterations"],
    "several iterations": history["iterations"] >= 3,
    "one entry per iteration": [e["iteration"] for e in entries] == list(range(len(entries))),
    "chi2 never rises": all(b <= a for a, b in zip(chi2, chi2[1:])),
    "damping recorded": all(e["damping"] > 0 for e in entries),
    "sigma": history["sigma"] == 0.01,
    "units": history["parameter_units"]["D_offset"] == "\u00c5\u00b2/s",
}
print(checks)
sys.exit(0 if all(checks.values()) else 1)
PY
    expect_exit 0 "wrote out/nlsq/convergence.png" "$bin_dir/homodyne-plot" out
    figures=()
    for phi in 0.0 45.0 90.0; do
      figures+=("out/nlsq/c2_heatmaps_phi_${phi}deg.png" "out/nlsq/c2_cuts_phi_${phi}deg.png")
    done
    figures+=(out/nlsq/residual_histogram.png out/nlsq/convergence.png
              out/nlsq/parameter_correlations.png out/nlsq/g2_lag.png
              out/nlsq/derived_rates.png)
    for figure in "${figures[@]}"; do expect_png "$figure"; done
    distinct=$(md5sum "${figures[@]}" 2>/dev/null | cut -d' ' -f1 | sort -u | wc -l)
    if [ "$distinct" -eq ${#figures[@]} ]; then echo "ok: the ${#figures[@]} figures differ"; else
      echo "FAIL: only $distinct distinct files among the ${#figures[@]} figures"
      failures=$((failures + 1)); fi
    # The data file's name in the titles: dataset_info.data_file (sim.h5) by default, which
    # --data-file replaces: every figure changes, none fails.
    expect_exit 0 "wrote named/g2_lag.png" "$bin_dir/homodyne-plot" out --plot-dir named \
      --data-file renamed.h5 --jobs 1
    cmp -s out/nlsq/g2_lag.png named/g2_lag.png &&
      { echo "FAIL: --data-file is not in the g2 title"; failures=$((failures + 1)); }
    # Without dataset_info.data_file the default titles lose the name: they differ too.
    mkdir -p unnamed/nlsq && cp out/nlsq/* unnamed/nlsq/ &&
      python3 -c 'import json, sys; p = sys.argv[1]; a = json.load(open(p)); del a["dataset_info"]["data_file"]; json.dump(a, open(p, "w"))' \
        unnamed/nlsq/analysis_results_nlsq.json || failures=$((failures + 1))
    expect_exit 0 "wrote unnamed/nlsq/g2_lag.png" "$bin_dir/homodyne-plot" unnamed --jobs 1
    cmp -s out/nlsq/g2_lag.png unnamed/nlsq/g2_lag.png &&
      { echo "FAIL: dataset_info.data_file is not in the g2 title"; failures=$((failures + 1)); }
    # nlsq/derived_rates.json (docs/results.md, What the data determine): its 68 % bands are drawn on D(t); without the file
    # (above) the curves of the fitted values alone.
    cp -r out banded
    "$python" - banded/nlsq <<'PY' || { echo "FAIL: writing derived_rates.json"; failures=$((failures + 1)); }
import json, sys
t = [0.1 * k for k in range(1, 60)]
d = [1000 * x ** -0.5 + 10 for x in t]
json.dump({"t": t, "D": d, "D_interval_68": [[0.9 * v, 1.1 * v] for v in d]},
          open(sys.argv[1] + "/derived_rates.json", "w"))
PY
    expect_exit 0 "wrote banded/nlsq/derived_rates.png" "$bin_dir/homodyne-plot" banded
    expect_png banded/nlsq/derived_rates.png
    cmp -s out/nlsq/derived_rates.png banded/nlsq/derived_rates.png &&
      { echo "FAIL: derived_rates.json changes nothing"; failures=$((failures + 1)); }
    # A final fit of one iteration (its start, the global phase's minimum, was the optimum):
    # the convergence figure shows the global phase's work instead of two points.
    cp -r out one
    "$python" - "$repo/scripts" one <<'PY' || { echo "FAIL: one-iteration convergence figure"; failures=$((failures + 1)); }
import json, sys
sys.path.insert(0, sys.argv[1])
import homodyne_plot as plot
folder = sys.argv[2] + "/nlsq/"
history = json.load(open(folder + "convergence_history.json"))
metrics = json.load(open(folder + "convergence_metrics.json"))
history["history"] = history["history"][:2]
history["iterations"] = metrics["convergence"]["iterations"] = 1
history["chi_squared"] = metrics["convergence"]["final_chi_squared"] = history["history"][1]["chi2"]
metrics["global_search"] = {"method": "auto", "chosen": 0, "passes": 40,
                            "passes_by_stage": {"screening": 30, "local_fits": 10},
                            "minima": [{"chi2": 100.0, "start": 0, "status": "converged (ftol)",
                                        "iterations": 7}]}
json.dump(history, open(folder + "convergence_history.json", "w"))
json.dump(metrics, open(folder + "convergence_metrics.json", "w"))
calls = []
original = plot.plot_short_final_fit
plot.plot_short_final_fit = lambda *arguments: (calls.append(1), original(*arguments))
code = plot.run([sys.argv[2], "--jobs", "1"])
print(f"exit {code}, short-fit panels drawn {len(calls)} time(s)")
sys.exit(0 if code == 0 and calls == [1] else 1)
PY
    expect_png one/nlsq/convergence.png
    # The figures drawn by one process (--jobs 1) and by several are the same files.
    expect_exit 0 "wrote serial/convergence.png" "$bin_dir/homodyne-plot" out --plot-dir serial \
      --jobs 1
    for figure in "${figures[@]}"; do
      cmp -s "$figure" "serial/$(basename "$figure")" ||
        { echo "FAIL: $figure differs with --jobs 1"; failures=$((failures + 1)); }
    done
    # A history that is not of the result files beside it (chi2 changed) is not used.
    sed -i 's/"chi_squared": [0-9.e+]*/"chi_squared": 1.5/' out/nlsq/convergence_history.json
    expect_exit 0 "not of the fit in convergence_metrics.json" "$bin_dir/homodyne-plot" out \
      --plot-dir stale
    expect_png stale/convergence.png
    # A Python without h5py, numpy and matplotlib (-S: no site packages): one line, exit 3.
    printf '#!/bin/sh\nexec %s -S "$@"\n' "$python" > bare_python && chmod +x bare_python
    expect_exit 3 "^homodyne-plot: error: No module named .*install the Python packages" \
      env HOMODYNE_PYTHON="$PWD/bare_python" "$bin_dir/homodyne-plot" out
    [ "$(printf '%s\n' "$last_output" | wc -l)" -eq 1 ] ||
      { echo "FAIL: the missing-module message is not one line"; failures=$((failures + 1)); }
    expect_exit 3 "HOMODYNE_PYTHON = /no/such/python cannot be run" \
      env HOMODYNE_PYTHON=/no/such/python "$bin_dir/homodyne-plot" out
    # --save-plots on a two_component fit draws the same set (20 parameters in the matrix).
    write_config tc.yaml two_component tc.h5 ""
    "$bin_dir/homodyne-simulate" --config tc.yaml > /dev/null || failures=1
    expect_exit 0 "plots written to tc/nlsq" "$bin_dir/homodyne" --config tc.yaml \
      --output-dir tc --save-plots --global-search off
    for figure in tc/nlsq/c2_cuts_phi_45.0deg.png tc/nlsq/residual_histogram.png \
                  tc/nlsq/convergence.png tc/nlsq/parameter_correlations.png \
                  tc/nlsq/g2_lag.png tc/nlsq/derived_rates.png; do
      expect_png "$figure"
    done
    ;;
  performance_log)
    # logging.performance (docs/configuration.md, Performance log): <output-dir>/<filename>. The
    # chunked strategy with small batches: passes of several chunks, checkpoints inside them.
    # Without variable projection, --global-search off leaves the final fit many iterations.
    write_config sim.yaml static sim.h5 "optimization:
  nlsq: {variable_projection: false}
  streaming: {batch_size: 600, checkpoint_frequency: 3, checkpoint_min_interval_seconds: 0}"
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=1
    with_log() {  # with_log FILE LEVEL THRESHOLD [FILENAME]: sim.yaml plus logging.performance
      cp sim.yaml "$1"
      printf 'logging:\n  performance:\n    enabled: true\n    level: %s\n    threshold_seconds: %s\n' \
        "$2" "$3" >> "$1"
      [ -z "${4:-}" ] || printf '    filename: %s\n' "$4" >> "$1"
    }
    # count_lines FILE REGEX: how many lines of FILE match (0 when FILE is missing).
    count_lines() { grep -Ec -- "$2" "$1" 2>/dev/null || true; }
    check_count() {  # check_count WHAT COUNT OP N
      if [ "$2" "$3" "$4" ]; then echo "ok: $1 ($2)"; else
        echo "FAIL: $1: $2 lines, expected $3 $4"; failures=$((failures + 1)); fi
    }
    stamp='^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} '
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config sim.yaml --strategy chunked \
      --output-dir plain
    [ ! -e plain/performance.log ] ||
      { echo "FAIL: a performance log without logging.performance"; failures=$((failures + 1)); }
    # INFO with a threshold no operation reaches: passes, checkpoints, stages, phases,
    # iterations and the total, no chunk lines and nothing slow.
    with_log info.yaml INFO 1000000
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config info.yaml --strategy chunked \
      --output-dir info
    log=info/performance.log
    [ -s "$log" ] || { echo "FAIL: $log missing or empty"; failures=$((failures + 1)); }
    check_count "INFO pass lines" "$(count_lines $log "${stamp}\[INFO\] pass [0-9]+ \(J\) completed in [0-9]+\.[0-9]{3} s \([0-9]+ batches\)$")" -ge 1
    check_count "INFO checkpoint lines" "$(count_lines $log "${stamp}\[INFO\] checkpoint saved in [0-9.]+ s \([0-9]+ bytes, .*\.h5\)$")" -ge 1
    check_count "INFO iteration lines" "$(count_lines $log "${stamp}\[INFO\] iteration [0-9]+ (\(start\)|accepted|rejected) completed in [0-9.]+ s")" -ge 1
    check_count "global search stage lines" "$(count_lines $log "\[INFO\] global search stage [a-z ]+ completed in")" -ge 1
    check_count "phase lines" "$(count_lines $log "\[INFO\] (load|global search|final fit) phase completed in")" -eq 3
    check_count "total lines" "$(count_lines $log "${stamp}\[INFO\] fit completed in [0-9.]+ s total \(converged, ")" -eq 1
    check_count "results line" "$(count_lines $log "\[INFO\] results written to info/nlsq in")" -eq 1
    check_count "chunk lines at INFO" "$(count_lines $log " batch [0-9]+/")" -eq 0
    check_count "slow lines above the threshold" "$(count_lines $log "slow:")" -eq 0
    check_count "lines without a timestamp" "$(grep -Evc "${stamp}\[(INFO|DEBUG|WARNING)\] " $log)" -eq 0
    # The log only observes: bitwise the same results as without it.
    same_results plain info
    # DEBUG adds every chunk of a pass and every global-search step.
    with_log debug.yaml DEBUG 1000000
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config debug.yaml --strategy chunked \
      --output-dir debug
    check_count "DEBUG chunk lines" "$(count_lines debug/performance.log "${stamp}\[DEBUG\] pass [0-9]+ \((J|c)\) batch [0-9]+/[0-9]+ completed in [0-9.]+ s$")" -ge 3
    check_count "DEBUG global search steps" "$(count_lines debug/performance.log "\[DEBUG\] global search screening [0-9]+/[0-9]+ completed in")" -ge 1
    # threshold_seconds: 0 makes every operation slow: WARNING lines instead of INFO ones.
    with_log slow.yaml INFO 0 logs/perf.log
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config slow.yaml --strategy chunked \
      --global-search off --output-dir slow
    log=slow/logs/perf.log
    check_count "slow pass lines" "$(count_lines $log "${stamp}\[WARNING\] slow: pass [0-9]+ \(J\) completed in [0-9.]+ s \([0-9]+ batches\) \(threshold 0 s\)$")" -ge 3
    check_count "slow checkpoint lines" "$(count_lines $log "\[WARNING\] slow: checkpoint saved in")" -ge 1
    check_count "slow iteration lines" "$(count_lines $log "\[WARNING\] slow: iteration [0-9]+")" -ge 2
    check_count "INFO pass, checkpoint or iteration lines" "$(count_lines $log "\[INFO\] (pass|checkpoint|iteration) ")" -eq 0
    check_count "total lines (never slow)" "$(count_lines $log "\[INFO\] fit completed in")" -eq 1
    # WARNING writes only the slow operations.
    with_log warning.yaml WARNING 0
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config warning.yaml --strategy chunked \
      --global-search off --output-dir warning
    check_count "WARNING-level slow lines" "$(count_lines warning/performance.log "\[WARNING\] slow: ")" -ge 5
    check_count "WARNING-level other lines" "$(grep -vc "\[WARNING\] slow: " warning/performance.log)" -eq 0
    # A log that cannot be written: one warning, the fit and its results go on.
    echo "a file" > blocker
    with_log blocked.yaml INFO 0.1 blocker/perf.log
    sed -i 's#filename: blocker/perf.log#filename: ../blocker/perf.log#' blocked.yaml
    expect_exit 1 "logging.performance.filename = '../blocker/perf.log': must be a file name or a relative path" \
      "$bin_dir/homodyne" --config blocked.yaml --output-dir blocked
    mkdir -p blocked && echo "a file" > blocked/blocker
    with_log blocked.yaml INFO 0.1 blocker/perf.log
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config blocked.yaml --output-dir blocked
    check_count "warnings about the unwritable log" "$(grep -c "performance log blocked/blocker/perf.log: cannot create its folder" <<<"$last_output")" -eq 1
    [ -s blocked/nlsq/parameters.json ] ||
      { echo "FAIL: no results after an unwritable log"; failures=$((failures + 1)); }
    # Bad values are config errors naming the YAML path, the value and the rule.
    with_log bad_level.yaml LOUD 0.1
    expect_exit 1 "logging.performance.level = 'LOUD': must be one of DEBUG, INFO, WARNING" \
      "$bin_dir/homodyne" --config bad_level.yaml --dry-run
    with_log bad_threshold.yaml INFO -1
    expect_exit 1 "logging.performance.threshold_seconds = -1: must be a finite number >= 0" \
      "$bin_dir/homodyne" --config bad_threshold.yaml --dry-run
    ;;
  full_disk)
    # A write that fails part way (a file size limit stands in for a full disk: write() fails
    # with EFBIG as it would with ENOSPC) ends with exit 1 and the OS reason, never a crash;
    # the final name never holds part of a file and no temporary file is left behind.
    limited() {  # limited KB COMMAND...: runs COMMAND with files limited to KB kilobytes
      local kilobytes=$1
      shift
      bash -c 'trap "" XFSZ; ulimit -f "$0"; exec "$@"' "$kilobytes" "$@"
    }
    write_config sim.yaml laminar_flow sim.h5 ""
    expect_exit 1 "sim.h5: cannot write the file .*File too large" \
      limited 8 "$bin_dir/homodyne-simulate" --config sim.yaml
    if [ -e sim.h5 ] || ls -A | grep -q '\.tmp$'; then
      echo "FAIL: a failed simulation left files: $(ls -A)"; failures=$((failures + 1))
    fi
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    # The fit's small JSON files fit under the limit, fitted_data.h5 does not: the fit reports
    # which file failed and why, prints its numbers, and publishes no result file (all or
    # nothing, docs/results.md, How the files are written).
    expect_exit 1 "fitted_data.h5: cannot write the fitted data.*File too large.*nothing published" \
      limited 40 "$bin_dir/homodyne" --config sim.yaml --global-search off --output-dir out
    grep -q "reduced chi2" <<<"$last_output" ||
      { echo "FAIL: the fit's numbers were not printed"; failures=$((failures + 1)); }
    if [ -n "$(ls -A out/nlsq)" ]; then
      echo "FAIL: a failed write left files: $(ls -A out/nlsq)"; failures=$((failures + 1))
    fi
    ;;
  bad_usage)
    expect_exit 2 "usage error" "$bin_dir/homodyne" --no-such-flag
    expect_exit 2 "--strategy fastest: must be one of" "$bin_dir/homodyne" --config x.yaml \
      --strategy fastest --dry-run
    expect_exit 2 "usage error" "$bin_dir/homodyne" --static-mode --laminar-flow
    expect_exit 2 "usage error" "$bin_dir/homodyne-simulate"
    expect_exit 0 "Exit codes" "$bin_dir/homodyne" --help
    expect_exit 0 "homodyne-cpp .*(built without CUDA|CUDA runtime linked, with CUDA kernels)" "$bin_dir/homodyne" --version
    ;;
  simulate_bad_flags)
    # homodyne-simulate refuses a flag value out of its range (never wraps a negative seed) and
    # angles homodyne would refuse, naming the flag or key, the value and the rule; no file.
    write_config sim.yaml laminar_flow sim.h5 ""
    seeds="an integer in \[0, 18446744073709551615\] \(simulation.seed\)"
    frames="an integer in \[3, 1000000\] \(simulation.frames\)"
    noise="a finite number >= 0 \(simulation.noise_sigma\)"
    for flag in "--seed -1:$seeds" "--seed 18446744073709551616:$seeds" "--seed 1.5:$seeds" \
                "--seed 0x10:$seeds" "--seed :$seeds" "--frames 0:$frames" "--frames -5:$frames" \
                "--frames 1e12:$frames" "--frames 2:$frames" "--frames 1000001:$frames" \
                "--frames 99999999999:$frames" "--noise -1:$noise" "--noise nan:$noise" \
                "--noise inf:$noise" "--noise 1e400:$noise" "--noise 0.1x:$noise"; do
      option=${flag%%:*}
      # timeout: a flag that is not refused would simulate up to 1e6 frames.
      expect_exit 2 "^homodyne-simulate: usage error: ${option}: must be ${flag#*:}$" \
        timeout 20 "$bin_dir/homodyne-simulate" --config sim.yaml ${option%% *} "${option#* }"
    done
    [ ! -e sim.h5 ] || { echo "FAIL: sim.h5 written"; failures=$((failures + 1)); }
    expect_exit 0 "wrote .*sim.h5" "$bin_dir/homodyne-simulate" --config sim.yaml \
      --seed 18446744073709551615 --frames 3 --noise 0
    # 0 and 360 are one angle for homodyne (normalised to (-180, 180]): refused before writing.
    rm -f sim.h5
    sed -i 's/phi_angles: \[0, 45, 90\]/phi_angles: [0, 45, 360]/' sim.yaml
    expect_exit 1 "^homodyne-simulate: error: simulation.phi_angles = \[0, 45, 360\]: 0 and 360 are the same angle \(0 degrees after normalisation to \(-180, 180\]\)" \
      "$bin_dir/homodyne-simulate" --config sim.yaml
    [ ! -e sim.h5 ] || { echo "FAIL: sim.h5 written"; failures=$((failures + 1)); }
    sed -i 's/phi_angles: \[0, 45, 360\]/phi_angles: [0, .nan, 90]/' sim.yaml
    expect_exit 1 "^homodyne-simulate: error: simulation.phi_angles = \[0, nan, 90\]: nan is not finite" \
      "$bin_dir/homodyne-simulate" --config sim.yaml
    # Angles distinct after normalisation: written, and homodyne reads every one of them.
    sed -i 's/phi_angles: \[0, .nan, 90\]/phi_angles: [0, 180, 370]/' sim.yaml
    expect_exit 0 "wrote .*sim.h5" "$bin_dir/homodyne-simulate" --config sim.yaml
    expect_exit 0 "angles kept       3: 0.00, 180.00, 10.00 deg" "$bin_dir/homodyne" --config sim.yaml \
      --dry-run
    ;;
  bad_input)
    expect_exit 1 "missing.yaml: config file not found" "$bin_dir/homodyne" --config missing.yaml
    write_config nofile.yaml laminar_flow absent.h5 ""
    expect_exit 1 "absent.h5" "$bin_dir/homodyne" --config nofile.yaml --dry-run
    echo "this is not HDF5" > text.h5
    write_config text.yaml laminar_flow text.h5 ""
    expect_exit 1 "text.h5.*HDF5" "$bin_dir/homodyne" --config text.yaml --dry-run
    printf 'analysis_mode: laminar_flow\nanalyzer_parameters: [1, 2\n' > broken.yaml
    expect_exit 1 "broken.yaml" "$bin_dir/homodyne" --config broken.yaml --dry-run
    write_config negdt.yaml laminar_flow sim.h5 ""
    sed -i 's/dt: 0.1/dt: -0.1/' negdt.yaml
    expect_exit 1 "analyzer_parameters.dt" "$bin_dir/homodyne" --config negdt.yaml --dry-run
    write_config nosim.yaml laminar_flow sim.h5 ""
    sed -i '/^simulation:/,$d' nosim.yaml
    expect_exit 1 "simulation" "$bin_dir/homodyne-simulate" --config nosim.yaml
    write_config ro.yaml laminar_flow sim.h5 ""
    sed -i 's#output: ./sim.h5#output: /proc/no_such_dir/sim.h5#' ro.yaml
    expect_exit 1 "/proc/no_such_dir/sim.h5" "$bin_dir/homodyne-simulate" --config ro.yaml
    # Bad input to the fit: nothing left to fit, bounds inverted, max_iterations <= 0, sigma <= 0.
    write_config fitin.yaml laminar_flow sim.h5 ""
    "$bin_dir/homodyne-simulate" --config fitin.yaml > /dev/null || failures=$((failures + 1))
    cp fitin.yaml fixed.yaml
    cat >> fixed.yaml <<'YAML'
initial_parameters:
  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
  fixed_parameters: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0,
                     contrast, offset]
YAML
    expect_exit 1 "fixed_parameters fixes every parameter" "$bin_dir/homodyne" --config fixed.yaml
    for bad in "parameter_space: {bounds: [{name: D0, min: 1000, max: 10}]}|bounds\\[0\\].min" \
               "optimization: {nlsq: {max_iterations: 0}}|max_iterations = 0" \
               "optimization: {nlsq: {sigma: -1}}|sigma = -1"; do
      cp fitin.yaml bad.yaml
      echo "${bad%%|*}" >> bad.yaml
      expect_exit 1 "${bad##*|}" "$bin_dir/homodyne" --config bad.yaml
    done
    # --backend is read in any case, as --strategy is; a name that is none of them is a usage
    # error (exit 2) before anything runs.
    expect_exit 2 "--backend gpu: must be one of cpu, cuda, auto" "$bin_dir/homodyne" \
      --config fitin.yaml --backend gpu
    expect_exit 0 "strategy +standard" "$bin_dir/homodyne" --config fitin.yaml --backend CPU \
      --dry-run
    # A backend this build lacks is refused, not replaced by the CPU in silence. A build with
    # CUDA refuses it for want of a usable device; where auto finds one (a GPU machine), cuda
    # runs there (the self-check before its first pass, docs/backends.md).
    if [ "${HOMODYNE_TEST_WITH_CUDA:-OFF}" = OFF ]; then
      expect_exit 1 "backend cuda: this homodyne was built without CUDA" "$bin_dir/homodyne" \
        --config fitin.yaml --backend cuda
    elif cuda_device_usable fitin.yaml; then
      expect_exit 0 "backend +cuda" "$bin_dir/homodyne" --config fitin.yaml --backend cuda --dry-run
    else
      expect_exit 1 "backend cuda: (no CUDA device \(cudaGetDeviceCount: .+\)|CUDA device 0 \(.+\) unusable: .+); use --backend cpu or auto" \
        "$bin_dir/homodyne" --config fitin.yaml --backend cuda
    fi
    ;;
  output_format)
    # --output-format yaml|json adds the legacy summary OUTPUT_DIR/homodyne_results.FORMAT (the
    # reference's fields, its parameter order) and changes nothing else; npz and others are refused.
    write_config sim.yaml laminar_flow sim.h5 ""
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    flags=(--config sim.yaml --global-search off)
    expect_exit 0 "LM converged" "$bin_dir/homodyne" "${flags[@]}" --output-dir plain
    [ ! -e plain/homodyne_results.yaml ] && [ ! -e plain/homodyne_results.json ] ||
      { echo "FAIL: a legacy summary without --output-format"; failures=$((failures + 1)); }
    expect_exit 0 "legacy summary in as_json/homodyne_results.json" "$bin_dir/homodyne" \
      "${flags[@]}" --output-dir as_json --output-format json
    same_results plain as_json
    python3 - as_json/homodyne_results.json as_json/nlsq/parameters.json <<'PY' ||
import json, sys
summary, fit = (json.load(open(path)) for path in sys.argv[1:])
want = ([a["contrast"]["value"] for a in fit["per_angle"]] +
        [a["offset"]["value"] for a in fit["per_angle"]] +
        [fit["parameters"][name]["value"] for name in
         ["D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "gamma_dot_t_offset", "phi0"]])
checks = {
    "keys": list(summary) == ["method", "analysis_mode", "success", "optimization_time",
                              "device_config", "parameter_names", "parameters", "diagnostics"],
    "method": summary["method"] == "nlsq" and summary["analysis_mode"] == "laminar_flow",
    "success": summary["success"] == (fit["convergence_status"] == "converged"),
    "names": summary["parameter_names"][:2] == ["contrast_0", "contrast_1"] and
             summary["parameter_names"][6:8] == ["D0", "alpha"] and len(summary["parameters"]) == 13,
    "parameters": summary["parameters"] == want,
    "chi2": summary["diagnostics"]["chi_squared"] == fit["chi_squared"],
}
bad = [name for name, ok in checks.items() if not ok]
print("homodyne_results.json:", "ok" if not bad else "wrong " + ", ".join(bad))
sys.exit(1 if bad else 0)
PY
      failures=$((failures + 1))
    expect_exit 0 "legacy summary in as_yaml/homodyne_results.yaml" "$bin_dir/homodyne" \
      "${flags[@]}" --output-dir as_yaml --output-format yaml
    same_results plain as_yaml
    chi2=$(python3 -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))["chi_squared"]))' \
      plain/nlsq/parameters.json)
    for line in "method: nlsq" "analysis_mode: laminar_flow" "  - contrast_0" "  - D0" \
                "  chi_squared: $chi2"; do
      grep -qxF -- "$line" as_yaml/homodyne_results.yaml ||
        { echo "FAIL: homodyne_results.yaml lacks '$line'"; failures=$((failures + 1)); }
    done
    [ ! -e plain/nlsq/fitted_data.npz ] ||
      { echo "FAIL: fitted_data.npz without --output-format npz"; failures=$((failures + 1)); }
    expect_exit 2 "--output-format xml: must be one of yaml, json, npz, both" \
      "$bin_dir/homodyne" "${flags[@]}" --output-format xml
    ;;
  npz_output)
    # --output-format npz: nlsq/fitted_data.npz holds the successor's arrays, the matrices equal
    # to fitted_data.h5's; both: the json summary too; a later set without npz removes it.
    python=/usr/bin/python3
    "$python" -c "import numpy, h5py" 2>/dev/null || { echo "skipped: no numpy and h5py"; exit 77; }
    write_config sim.yaml laminar_flow sim.h5 ""
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    flags=(--config sim.yaml --global-search off --phi 0 90)
    expect_exit 0 "results in out/nlsq" "$bin_dir/homodyne" "${flags[@]}" --output-dir out \
      --output-format npz
    [ ! -e out/homodyne_results.json ] ||
      { echo "FAIL: npz wrote a legacy summary"; failures=$((failures + 1)); }
    "$python" - out/nlsq <<'PY' || failures=$((failures + 1))
import json, sys, zipfile
import h5py, numpy as np
folder = sys.argv[1]
names = ["phi_angles", "c2_exp", "c2_theoretical_raw", "c2_theoretical_scaled",
         "per_angle_scaling", "per_angle_scaling_solver", "residuals", "residuals_normalized",
         "t1", "t2", "q"]
bad = []
if zipfile.ZipFile(folder + "/fitted_data.npz").testzip() is not None:
    bad.append("a CRC")
npz = np.load(folder + "/fitted_data.npz")
h5 = h5py.File(folder + "/fitted_data.h5", "r")
sigma = json.load(open(folder + "/convergence_history.json"))["sigma"]
if npz.files != names:
    bad.append(f"names {npz.files}")
n = len(h5["t"])
if npz["c2_exp"].shape != (2, n, n) or npz["c2_exp"].dtype != np.float64:
    bad.append(f"c2_exp shape {npz['c2_exp'].shape} {npz['c2_exp'].dtype}")
for key, want in [("phi_angles", h5["phi"][()]), ("t1", h5["t"][()]), ("t2", h5["t"][()]),
                  ("q", [h5["q"][()]]),
                  ("per_angle_scaling", np.stack([h5["contrast"][()], h5["offset"][()]], 1))]:
    if not np.array_equal(npz[key], want):
        bad.append(key)
if list(npz["phi_angles"]) != [0.0, 90.0]:
    bad.append(f"phi_angles {npz['phi_angles']}")
for k in range(2):
    group = h5[f"angles/phi_{k:03d}"]
    for key, name in [("c2_exp", "data"), ("c2_theoretical_scaled", "fit"),
                      ("residuals", "residuals")]:
        if not np.array_equal(npz[key][k], group[name][()]):
            bad.append(f"{key}[{k}]")
    if not np.array_equal(npz["residuals_normalized"][k], group["residuals"][()] / sigma):
        bad.append(f"residuals_normalized[{k}]")
    contrast, offset = group.attrs["contrast"], group.attrs["offset"]
    # the fit is offset + contrast g1^2, the raw model 1 + g1^2
    scaled = offset + contrast * (npz["c2_theoretical_raw"][k] - 1.0)
    if not np.allclose(scaled, group["fit"][()], rtol=0, atol=1e-12):
        bad.append(f"c2_theoretical_raw[{k}]")
    if not np.all(npz["c2_theoretical_raw"][k] > 1.0):
        bad.append(f"c2_theoretical_raw[{k}] not 1 + g1^2")
print("fitted_data.npz:", "ok" if not bad else "wrong " + ", ".join(bad))
sys.exit(1 if bad else 0)
PY
    # dataset_info.data_file: the fitted file's absolute path (homodyne-plot's titles read it).
    python3 - out/nlsq/analysis_results_nlsq.json "$PWD/sim.h5" <<'PY' || failures=$((failures + 1))
import json, sys
info = json.load(open(sys.argv[1]))["dataset_info"]
print("data_file:", "ok" if info.get("data_file") == sys.argv[2] else f"wrong {info}")
sys.exit(0 if info.get("data_file") == sys.argv[2] else 1)
PY
    expect_exit 0 "legacy summary in out/homodyne_results.json" "$bin_dir/homodyne" \
      "${flags[@]}" --output-dir out --output-format both
    [ -s out/nlsq/fitted_data.npz ] ||
      { echo "FAIL: --output-format both wrote no fitted_data.npz"; failures=$((failures + 1)); }
    expect_exit 0 "results in out/nlsq" "$bin_dir/homodyne" "${flags[@]}" --output-dir out
    [ ! -e out/nlsq/fitted_data.npz ] ||
      { echo "FAIL: a set without npz left the earlier fitted_data.npz"; failures=$((failures + 1)); }
    ;;
  successor_flags)
    # The successor's (xpcsjax) spellings: --mode, --phi, --multistart-n, --initial-D0 (any case),
    # --initial-gamma-dot-t-offset and the two_component --initial-* flags.
    write_config sim.yaml laminar_flow sim.h5 ""
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    expect_exit 0 "analysis mode +static" "$bin_dir/homodyne" --config sim.yaml --dry-run \
      --mode static
    expect_exit 0 "analysis mode +static" "$bin_dir/homodyne" --config sim.yaml --dry-run \
      --mode static_isotropic
    expect_exit 2 "--static-mode excludes --mode" "$bin_dir/homodyne" --config sim.yaml \
      --dry-run --mode static --static-mode
    expect_exit 2 "'steady' is not an analysis mode" "$bin_dir/homodyne" --config sim.yaml \
      --dry-run --mode steady
    expect_exit 0 "angles kept +2: 0.00, 90.00 deg" "$bin_dir/homodyne" --config sim.yaml \
      --dry-run --phi 0 90
    expect_exit 0 "angles kept +2: 45.00, 90.00 deg" "$bin_dir/homodyne" --config sim.yaml \
      --dry-run --phi 405.5,89.2
    expect_exit 0 "angles filtered +2: 0.00, 90.00 deg" "$bin_dir/homodyne" --config sim.yaml \
      --dry-run --phi 45
    expect_exit 1 "--phi 47: no angle of the file within 1 degree \(its angles: 0, 45, 90\)" \
      "$bin_dir/homodyne" --config sim.yaml --dry-run --phi 0 47
    expect_exit 0 "start values +D0 2000 .*D_offset 5 .*gamma_dot_t_offset 0.02 " \
      "$bin_dir/homodyne" --config sim.yaml --dry-run --initial-D0 2000 --initial-D-offset 5 \
      --initial-gamma-dot-t-offset 0.02
    expect_exit 0 "start values .*D0_ref 500 .*v0 3 .*v_beta 0.7 .*f3 0.1 .*phi0_het 2 in" \
      "$bin_dir/homodyne" --config sim.yaml --dry-run --mode two_component --initial-D0-ref 500 \
      --initial-v0 3 --initial-v-beta 0.7 --initial-f3 0.1 --initial-phi0-het 2
    expect_exit 2 "--initial-f0 applies to two_component only; the analysis mode is laminar_flow" \
      "$bin_dir/homodyne" --config sim.yaml --dry-run --initial-f0 0.3
    expect_exit 2 "--multistart-n 0: must be from 1 to 100000" "$bin_dir/homodyne" \
      --config sim.yaml --dry-run --multistart-n 0
    expect_exit 2 "--multistart-n 4: sets the multi-start search's starts, but --global-search off" \
      "$bin_dir/homodyne" --config sim.yaml --dry-run --multistart-n 4 --global-search off
    # --multistart-n 4 runs multi-start with 4 sampled starts: 5 screened with the user's start.
    expect_exit 0 "multi_start: 5 candidates screened" "$bin_dir/homodyne" --config sim.yaml \
      --multistart-n 4 --output-dir ms
    python3 - ms/nlsq/analysis_results_nlsq.json <<'PY' || failures=$((failures + 1))
import json, sys
search = json.load(open(sys.argv[1]))["global_search"]
ok = search["method"] == "multi_start" and search["reason"] == "--multistart-n 4"
print("global_search:", "ok" if ok else "wrong " + json.dumps(search)[:300])
sys.exit(0 if ok else 1)
PY
    ;;
  sigma_auto)
    # optimization.nlsq.sigma: auto: the noise estimated from a first fit's residuals,
    # sqrt(chi2 / dof) at sigma 1, and the fit repeated at it; reported with its source and a
    # warning. The simulated noise is 0.01 (write_config).
    write_config sim.yaml static sim.h5 "optimization:
  nlsq:
    sigma: auto"
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    expect_exit 0 "sigma auto \(from the residuals of a first fit at 0.01\)" \
      "$bin_dir/homodyne-config" --validate sim.yaml
    expect_exit 0 "sigma adjusted: optimization.nlsq.sigma auto = " "$bin_dir/homodyne" \
      --config sim.yaml --output-dir auto
    sed 's/sigma: auto/sigma: 0.02/' sim.yaml > fixed.yaml
    expect_exit 0 "results in fixed/nlsq" "$bin_dir/homodyne" --config fixed.yaml \
      --output-dir fixed
    python3 - auto/nlsq fixed/nlsq <<'PY' || failures=$((failures + 1))
import json, sys
auto, fixed = (json.load(open(folder + "/analysis_results_nlsq.json")) for folder in sys.argv[1:])
history = json.load(open(sys.argv[1] + "/convergence_history.json"))
warnings = json.load(open(sys.argv[1] + "/convergence_metrics.json"))["quality_warnings"]
sigma = auto["fit_quality"]["sigma"]
checks = {
    "estimate near the simulated noise": 0.009 < sigma["value"] < 0.011,
    "source": sigma["source"].startswith("auto: sqrt(chi2 / dof) of a first fit at sigma 0.01"),
    "reduced chi2 about 1": abs(auto["fit_quality"]["reduced_chi_squared"] - 1.0) < 0.01,
    "history's sigma": history["sigma"] == sigma["value"],
    "warning": warnings[0].startswith("sigma adjusted: optimization.nlsq.sigma auto = "),
    "numeric sigma": fixed["fit_quality"]["sigma"] == {"value": 0.02,
                                                        "source": "optimization.nlsq.sigma"},
}
bad = [name for name, ok in checks.items() if not ok]
print("sigma auto:", "ok" if not bad else f"wrong {bad}: {sigma} {auto['fit_quality']}")
sys.exit(1 if bad else 0)
PY
    ;;
  short_flags)
    # -v is --verbose in homodyne; homodyne-config has no -v (the reference's short --validate)
    # and says so; its long --validate works.
    write_config sim.yaml laminar_flow sim.h5 ""
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    expect_exit 0 "sim.yaml: valid" "$bin_dir/homodyne-config" --validate sim.yaml
    expect_exit 2 "-v is not a flag of homodyne-config: use --validate FILE" \
      "$bin_dir/homodyne-config" -v sim.yaml
    expect_exit 2 "use --validate FILE" "$bin_dir/homodyne-config" --force -v sim.yaml
    expect_exit 0 "homodyne dry run" "$bin_dir/homodyne" --config sim.yaml --dry-run -v
    expect_exit 0 "homodyne dry run" "$bin_dir/homodyne" --config sim.yaml --dry-run --verbose
    ;;
  dry_run_agrees)
    # The dry run runs the fit's own steps before its first pass (src/pipeline/fit_preparation.h):
    # a config the fit refuses, the dry run refuses with the same first error line and exit code;
    # a start outside its bounds is a remark in both, not an error.
    write_config sim.yaml laminar_flow sim.h5 ""
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    physical="D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0"
    # case|YAML appended to sim.yaml|flags|exit code|pattern (of the first error line; with exit
    # 0, of a line both outputs hold)
    cases=(
      "two_contrasts|initial_parameters: {per_angle_scaling: {contrast: [0.3, 0.3]}}||1|per_angle_scaling.contrast has 2 values but the data has 3 angles"
      "four_per_angle|initial_parameters: {per_angle_scaling: {contrast: [0.3, 0.3, 0.3, 0.3], offset: [1, 1, 1, 1]}}||1|per_angle_scaling.contrast has 4 values but the data has 3 angles"
      "all_fixed_off|initial_parameters: {fixed_parameters: [$physical, contrast, offset]}|--global-search off|1|initial_parameters.fixed_parameters fixes every parameter: nothing to fit"
      "all_fixed_on|initial_parameters: {fixed_parameters: [$physical, contrast, offset]}|--global-search auto|1|initial_parameters.fixed_parameters fixes every parameter: nothing to fit"
      "physical_fixed_off|initial_parameters: {fixed_parameters: [$physical]}|--global-search off|1|initial_parameters.fixed_parameters fixes every physical parameter: nothing left to fit"
      "physical_fixed_on|initial_parameters: {fixed_parameters: [$physical]}|--global-search auto|1|initial_parameters.fixed_parameters fixes every physical parameter: nothing left to fit"
      "physical_fixed_cmaes|initial_parameters: {fixed_parameters: [$physical]}|--global-search cmaes|1|initial_parameters.fixed_parameters fixes every physical parameter: nothing left to fit"
      "cuda||--backend cuda|1|backend cuda: .*use --backend cpu or auto"
      "ceres_large|optimization: {nlsq: {solver: ceres}}|--strategy large|1|solver = ceres needs the standard strategy \(this fit uses large\)"
      "start_outside|initial_parameters: {parameter_names: [D0, alpha, D_offset], values: [200000, -0.5, 10]}|--global-search off|0|initial value of D0 = 200000 is above its upper bound 100000: clipped to 100000"
    )
    for row in "${cases[@]}"; do
      IFS='|' read -r name yaml flags want pattern <<<"$row"
      if [ "$name" = cuda ] && cuda_device_usable sim.yaml; then
        echo "ok: case cuda not run: this machine has a usable CUDA device (cuda is not refused)"
        continue
      fi
      cp sim.yaml "$name.yaml"
      [ -z "$yaml" ] || echo "$yaml" >> "$name.yaml"
      # shellcheck disable=SC2086  # flags: zero or more words
      dry_output=$("$bin_dir/homodyne" --config "$name.yaml" $flags --dry-run 2>&1)
      dry_code=$?
      # shellcheck disable=SC2086
      fit_output=$("$bin_dir/homodyne" --config "$name.yaml" $flags --output-dir "out_$name" 2>&1)
      fit_code=$?
      dry_error=$(grep -m1 '^homodyne: ' <<<"$dry_output")
      fit_error=$(grep -m1 '^homodyne: ' <<<"$fit_output")
      if [ "$dry_code" -ne "$want" ] || [ "$fit_code" -ne "$want" ]; then
        echo "FAIL: $name: dry run exited $dry_code, fit $fit_code, expected $want"
        echo "$dry_output" | tail -5; echo "$fit_output" | tail -5; failures=$((failures + 1))
      elif [ "$dry_error" != "$fit_error" ]; then
        echo "FAIL: $name: different first error lines: dry run '$dry_error', fit '$fit_error'"
        failures=$((failures + 1))
      elif [ "$want" -ne 0 ] && ! grep -Eq -- "$pattern" <<<"$fit_error"; then
        echo "FAIL: $name: '$fit_error' does not match /$pattern/"; failures=$((failures + 1))
      elif [ "$want" -eq 0 ] && ! { grep -Eq -- "$pattern" <<<"$dry_output" &&
                                     grep -Eq -- "$pattern" <<<"$fit_output"; }; then
        echo "FAIL: $name: /$pattern/ missing from the dry run or the fit"
        echo "$dry_output"; echo "$fit_output" | head -20; failures=$((failures + 1))
      else
        echo "ok: $name: dry run and fit exit $want${dry_error:+ with '$dry_error'}"
      fi
    done
    # The remark names the start and the bound the fit clips it to; the dry run says so.
    expect_exit 0 "start clipped +initial value of D0 = 200000 is above its upper bound 100000: clipped to 100000" \
      "$bin_dir/homodyne" --config start_outside.yaml --dry-run
    # fixed_parameters: the dry run counts and names what the fit fits (11 on laminar flow with
    # two of the 7 physical parameters fixed: 5 + 3 contrasts + 3 offsets).
    cp sim.yaml fixed_two.yaml
    echo "initial_parameters: {fixed_parameters: [phi0, gamma_dot_t_offset]}" >> fixed_two.yaml
    expect_exit 0 "parameters +11 fitted: 5 physical \+ 6 scaling" "$bin_dir/homodyne" \
      --config fixed_two.yaml --dry-run
    expect_exit 0 "fitted +D0, alpha, D_offset, gamma_dot_t0, beta, contrast\[0\.\.2\], offset\[0\.\.2\]" \
      "$bin_dir/homodyne" --config fixed_two.yaml --dry-run
    expect_exit 0 "held fixed +gamma_dot_t_offset, phi0 \(at their start values\)" \
      "$bin_dir/homodyne" --config fixed_two.yaml --dry-run
    expect_exit 0 "individual \(one contrast and offset per angle\); 11 parameters fitted" \
      "$bin_dir/homodyne" --config fixed_two.yaml --global-search off --output-dir out_fixed_two
    # The backend the fit selects, and why.
    expect_exit 0 "backend +cpu \(backend cpu\)" "$bin_dir/homodyne" --config sim.yaml --dry-run
    if cuda_device_usable sim.yaml; then
      expect_exit 0 "backend +cuda \(backend auto: cuda" \
        "$bin_dir/homodyne" --config sim.yaml --dry-run --backend auto
    else
      expect_exit 0 "backend +cpu \(backend auto: cpu \((built without CUDA|no CUDA device|CUDA device 0 .* unusable)" \
        "$bin_dir/homodyne" --config sim.yaml --dry-run --backend auto
    fi
    # The checkpoint a fit would resume from: none, then the one an interrupted fit left (the
    # announcement the fit logs when it resumes), and with --no-resume a fresh start that the dry
    # run announces but does not make (the checkpoints stay).
    cp sim.yaml ck.yaml
    echo "optimization:
  streaming: {batch_size: 500, checkpoint_dir: ./ck, checkpoint_frequency: 2,
              checkpoint_min_interval_seconds: 0}" >> ck.yaml
    flags=(--config ck.yaml --strategy streaming --global-search off)
    expect_exit 0 "checkpoints +none to resume in \./ck" "$bin_dir/homodyne" "${flags[@]}" --dry-run
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=7:15 expect_exit 3 "interrupted by SIGTERM; checkpoint saved" \
      "$faults_program" "${flags[@]}" --output-dir out_ck
    resume_line="resuming from \./ck/homodyne_state_batch_[0-9]{6}\.h5 \(batch [0-9]+, written [0-9]+ s ago by homodyne-cpp [^)]+\); --no-resume starts afresh"
    expect_exit 0 "checkpoints +$resume_line" "$bin_dir/homodyne" "${flags[@]}" --dry-run
    expect_exit 0 "--no-resume: the fit starts afresh and removes the [0-9]+ earlier checkpoint\(s\) in \./ck" \
      "$bin_dir/homodyne" "${flags[@]}" --dry-run --no-resume
    if ! ls ck/homodyne_state_batch_*.h5 > /dev/null 2>&1; then
      echo "FAIL: the dry run with --no-resume removed the checkpoints"; failures=$((failures + 1))
    fi
    expect_exit 0 "\[warning\] $resume_line" "$bin_dir/homodyne" "${flags[@]}" --output-dir out_ck
    ;;
  fault_variables_ignored)
    # The production homodyne reads none of the test fault variables (faults are injected only by
    # tests, through src/base/fault_injection.h): with all of them set, a streaming fit with
    # checkpoints finishes and returns bitwise the fit without them.
    write_config sim.yaml laminar_flow sim.h5 "optimization:
  streaming: {batch_size: 500, checkpoint_dir: ./checkpoints, checkpoint_frequency: 1,
              checkpoint_min_interval_seconds: 0}"
    "$bin_dir/homodyne-simulate" --config sim.yaml > /dev/null || failures=$((failures + 1))
    flags=(--config sim.yaml --strategy streaming --global-search off)
    expect_exit 0 "LM converged" "$bin_dir/homodyne" "${flags[@]}" --output-dir plain
    HOMODYNE_TEST_FAIL_ALLOCATION=standard,large,chunked,streaming,ceres_jacobian \
      HOMODYNE_TEST_FAIL_READ_AT_BATCH=0 HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=1:9 \
      HOMODYNE_TEST_CRASH_DURING_CHECKPOINT_WRITE=1 HOMODYNE_TEST_BATCH_DELAY_MS=1000 \
      expect_exit 0 "LM converged" "$bin_dir/homodyne" "${flags[@]}" --output-dir with_variables
    same_results plain with_variables
    if grep -q "HOMODYNE_TEST_" "$bin_dir/homodyne"; then
      echo "FAIL: the homodyne binary names a test fault variable"; failures=$((failures + 1))
    fi
    # The test build, given the same read variable, does inject the fault.
    HOMODYNE_TEST_FAIL_READ_AT_BATCH=0 expect_exit 1 "batch 0 .* could not be read after 2 retries" \
      "$faults_program" "${flags[@]}" --output-dir faulted --no-resume
    # ... and its batch delay (HOMODYNE_TEST_BATCH_DELAY_MS, what tests/slurm uses so that a fit
    # outlasts SLURM's signal on any machine) makes the fit last at least the delay times its
    # batch count (convergence_metrics.json batch_statistics.batches), with the same results.
    start_ns=$(date +%s%N)
    HOMODYNE_TEST_BATCH_DELAY_MS=20 expect_exit 0 "LM converged" \
      "$faults_program" "${flags[@]}" --output-dir delayed --no-resume
    elapsed_ms=$((($(date +%s%N) - start_ns) / 1000000))
    batches=$(python3 -c 'import json, sys
print(json.load(open(sys.argv[1]))["batch_statistics"]["batches"])' \
      delayed/nlsq/convergence_metrics.json) || batches=0
    if [ "${batches:-0}" -lt 10 ] || [ "$elapsed_ms" -lt $((20 * batches)) ]; then
      echo "FAIL: with a 20 ms batch delay the fit of $batches batches took $elapsed_ms ms"
      failures=$((failures + 1))
    else
      echo "ok: 20 ms per batch: $batches batches in $elapsed_ms ms"
    fi
    same_results plain delayed
    ;;
  *)
    echo "unknown case $case_name"; exit 2 ;;
esac

if [ "$failures" -ne 0 ]; then echo "$case_name: $failures check(s) failed"; exit 1; fi
echo "$case_name: all checks passed"
