#!/usr/bin/env bash
# Fault injection (docs/design.md section 7): real fits of the streaming, chunked and standard
# strategies, interrupted,
# killed, crashed while checkpointing, fed corrupt or foreign checkpoints, an unreadable batch,
# an unwritable checkpoint folder, and NaN/Inf data; killed at each stage of the result writing,
# a result file that cannot be written, two fits on one checkpoint folder and a stale lock; each
# asserts the outcome, and every resumed fit must return bitwise the parameters of the
# uninterrupted one.
# Usage: fault_injection_test.sh BIN_DIR STRATEGY CASE FAULTS_PROGRAM [MODE [LOSS]]
# STRATEGY: streaming, chunked, standard (the LM core) or ceres (standard with --solver ceres).
# MODE: the analysis mode of the fit, laminar_flow (default) or two_component; each mode's set is
# sized so that a pass is ~40 batches, which the signal counts below assume.
# LOSS: optimization.nlsq.loss of the fit, linear (default) or a robust loss (then f_scale 2):
# a robust fit resumes bitwise too (docs/model.md, Robust loss).
# Every case but global_sigterm and global_kill9 runs with the global phase and variable
# projection off, so that the final local fit (whose checkpoints they test) starts at the config's
# values; global_sigterm and global_kill9 interrupt the global phase itself.
# The faults are injected by FAULTS_PROGRAM, the test build homodyne_with_faults
# (tests/cli/homodyne_with_faults.cc), through its variables
# HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=N:SIGNAL (raise SIGNAL after N batches),
# HOMODYNE_TEST_CRASH_DURING_CHECKPOINT_WRITE=1 (abort inside a checkpoint write) and
# HOMODYNE_TEST_FAIL_READ_AT_BATCH=B (every read of batch B fails; streaming),
# HOMODYNE_TEST_KILL_AT_RESULT_STAGE=STAGE (SIGKILL at a stage of the result writing) and
# HOMODYNE_TEST_FAIL_RESULT_WRITE=NAME (result file NAME fails as on a full disk). The production
# homodyne (BIN_DIR) ignores them; it runs every other fit, the resumed ones included.
set -u
bin_dir=$(cd "$1" && pwd)
strategy=$2
case_name=$3
faults_program=$(cd "$(dirname "$4")" && pwd)/$(basename "$4")
mode=${5:-laminar_flow}
loss=${6:-linear}
loss_yaml=""
[ "$loss" = linear ] || loss_yaml=", loss: $loss, f_scale: 2.0"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
# shellcheck source=test_lib.sh
source "$here/test_lib.sh"

# The mode's lines of fit.yaml: its start values (near the truth, so that the local fit converges
# in a few dozen iterations), batch size, frame count and the simulated truth.
case "$mode" in
  laminar_flow)
    mode_yaml="initial_parameters:
  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
  values: [1300, -0.4, 12, 0.00025, 0.1, 0, 1]"
    max_iterations=60; batch_size=3000; frames=300
    truth="{D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.0002, beta: 0,
               gamma_dot_t_offset: 0, phi0: 0}" ;;
  two_component)
    # f2 held: the model depends on f0 and f2 only through f0 exp(-f1 f2) (docs/model.md,
    # Two-component mode), so a free f2 leaves the fit a valley to wander along.
    mode_yaml="initial_parameters:
  parameter_names: [D0_ref, alpha_ref, D_offset_ref, D0_sample, alpha_sample, D_offset_sample,
                    v0, v_beta, v_offset, f0, f1, f2, f3, phi0_het]
  values: [1050, -0.32, 11, 21000, -0.48, 0.5, 21, 0.52, 1.1, 0.31, 0.012, 0.5, 0.21, 2.2]
  fixed_parameters: [f2]"
    max_iterations=100; batch_size=1500; frames=200
    truth="{D0_ref: 1000, alpha_ref: -0.3, D_offset_ref: 10, D0_sample: 20000,
               alpha_sample: -0.5, D_offset_sample: 0, v0: 20, v_beta: 0.5, v_offset: 1,
               f0: 0.3, f1: 0.01, f2: 0.5, f3: 0.2, phi0_het: 2}" ;;
  *) echo "FAIL: unknown mode '$mode' (laminar_flow or two_component)"; exit 1 ;;
esac
cat > fit.yaml <<YAML
analysis_mode: $mode
analyzer_parameters:
  dt: 0.1
  start_frame: 1
  end_frame: -1
  scattering: {wavevector_q: 0.0054}
  geometry: {stator_rotor_gap: 2000000}
experimental_data:
  data_folder_path: ./
  data_file_name: sim.h5
$mode_yaml
optimization:
  nlsq: {max_iterations: $max_iterations$loss_yaml}
  streaming:
    batch_size: $batch_size
    checkpoint_dir: ./checkpoints
    checkpoint_frequency: 4
    checkpoint_min_interval_seconds: 0  # every 4 batches, however fast
    keep_last_checkpoints: 3
simulation:
  output: ./sim.h5
  format: aps_u
  frames: $frames
  phi_angles: [0, 45, 90]
  parameters: $truth
  contrast: [0.3, 0.28, 0.25]
  offset: 1.0
  noise_sigma: 0.01
  seed: 7
  dtype: float32
  compression: none
YAML
"$bin_dir/homodyne-simulate" --config fit.yaml > /dev/null || { echo "FAIL: simulate"; exit 1; }
if [ "$strategy" = ceres ]; then
  strategy_flags=(--strategy standard --solver ceres)
else
  strategy_flags=(--strategy "$strategy")
fi
local_only=(--global-search off --no-variable-projection)
case_flags=()
case "$case_name" in
  global_sigterm | global_kill9) local_only=() ;;
  # Profile intervals need variable projection (docs/results.md, Profile intervals).
  profile_sigterm) local_only=(--global-search off); case_flags=(--profile-intervals) ;;
  # The profile check and the intervals of what it names need variable projection too.
  check_sigterm) local_only=(--global-search off) ;;
esac
fit() {
  "$bin_dir/homodyne" --config fit.yaml "${strategy_flags[@]}" "${local_only[@]}" \
    ${case_flags[@]+"${case_flags[@]}"} "$@"
}
# The same fit, by the program that injects the faults of the HOMODYNE_TEST_* variables.
fit_with_faults() {
  "$faults_program" --config fit.yaml "${strategy_flags[@]}" "${local_only[@]}" \
    ${case_flags[@]+"${case_flags[@]}"} "$@"
}
# When the hooks signal, in batches (a pass is ~40). Chunked and streaming save inside passes;
# the standard strategy (LM core) at iteration ends, one pass each; Ceres at iteration ends,
# the first one after two passes.
case "$strategy" in
  ceres) kill_at=600; term_at=300 ;;
  standard) kill_at=200; term_at=100 ;;
  *) kill_at=70; term_at=45 ;;
esac

# The uninterrupted reference (its own checkpoint folder, removed on success).
expect_exit 0 "LM converged" fit --output-dir reference --checkpoint-dir ./reference_checkpoints
reference_output=$last_output
grep -q "\"analysis_mode\": \"$mode\"" reference/nlsq/parameters.json ||
  { echo "FAIL: the reference fit is not a $mode fit"; failures=$((failures + 1)); }
# The result files of a fit (include/homodyne/results.h, kResultFileNames), in publishing order.
result_files=(fitted_data.h5 convergence_metrics.json analysis_results_nlsq.json parameters.json)
# earlier/: the result files of another fit (2 iterations), which a later write must not mix with.
earlier_results() {
  expect_exit 0 "" fit --output-dir earlier --checkpoint-dir ./earlier_checkpoints --max-iterations 2
}
# expect_set DIR earlier|new LABEL: DIR/nlsq holds the earlier set whole (every file identical to
# earlier/'s), or files of the new set only (none identical to earlier/'s, parameters.json only
# with all the others): never a mix.
expect_set() {
  local dir=$1 want=$2 label=$3 name same=0 present=0
  for name in "${result_files[@]}"; do
    [ -e "$dir/nlsq/$name" ] || continue
    present=$((present + 1))
    cmp -s "$dir/nlsq/$name" "earlier/nlsq/$name" && same=$((same + 1))
  done
  if [ "$want" = earlier ]; then
    [ "$same" -eq 4 ] || { echo "FAIL ($label): the earlier results are not whole ($same of 4 kept, $(ls -A "$dir/nlsq"))"; failures=$((failures + 1)); }
  else
    [ "$same" -eq 0 ] || { echo "FAIL ($label): $same earlier file(s) mixed with the new ones ($(ls -A "$dir/nlsq"))"; failures=$((failures + 1)); }
    if [ -e "$dir/nlsq/parameters.json" ] && [ "$present" -ne 4 ]; then
      echo "FAIL ($label): parameters.json without the whole set ($(ls -A "$dir/nlsq"))"; failures=$((failures + 1))
    fi
  fi
}
no_temporary_files() {
  if ls -A "$1/nlsq" | grep -q '\.tmp$'; then
    echo "FAIL ($2): temporary files left: $(ls -A "$1/nlsq")"; failures=$((failures + 1))
  fi
}
# same_result_files A B LABEL: every result file bitwise the same, the JSON files less the fields
# a resumed run cannot share with an uninterrupted one: the timings and timestamps, and the run's
# history (recovery_actions and strategy.fallbacks, which name the resume; batch_statistics,
# passes and point_evaluations, which count the batches of both runs); fitted_data.h5 by value
# (h5diff: HDF5 keeps object times).
same_result_files() {
  if python3 - "$1/nlsq" "$2/nlsq" <<'PY'; then
import json, sys
history = {"timestamp", "timings_s", "execution_time", "seconds", "memory_peak_mb",
           "recovery_actions", "fallbacks", "batch_statistics", "passes", "point_evaluations",
           "replayed_passes"}
def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k not in history}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node
bad = []
for name in ["parameters.json", "analysis_results_nlsq.json", "convergence_metrics.json"]:
    a, b = (strip(json.load(open(folder + "/" + name))) for folder in sys.argv[1:])
    if a != b:
        bad.append(name)
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                print(" ", name, k, json.dumps(a.get(k))[:300], "|", json.dumps(b.get(k))[:300])
sys.exit(1 if bad else 0)
PY
    if h5diff -q "$1/nlsq/fitted_data.h5" "$2/nlsq/fitted_data.h5"; then
      echo "ok: $1 and $2 hold bitwise the same result files ($3)"
      return
    fi
  fi
  echo "FAIL: $1 and $2 result files differ ($3)"; failures=$((failures + 1))
}
checkpoint_count() { find checkpoints -name 'homodyne_state_batch_*.h5' 2>/dev/null | wc -l; }
newest_checkpoint() { find checkpoints -name 'homodyne_state_batch_*.h5' | sort | tail -1; }

# Leaves checkpoints of a fit killed with SIGKILL after $kill_at batches (several passes in).
# reference_batches: the batches the uninterrupted reference fit computed (its
# convergence_metrics.json batch_statistics.batches), to place a signal in its run.
reference_batches() {
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
    reference/nlsq/convergence_metrics.json
}

killed_run() {
  rm -rf checkpoints
  HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$kill_at:9 fit_with_faults --output-dir killed > /dev/null 2>&1
  local code=$?
  [ "$code" -eq 137 ] || { echo "FAIL: the killed run exited $code, expected 137"; failures=$((failures + 1)); }
  [ "$(checkpoint_count)" -ge 2 ] ||
    { echo "FAIL: $(checkpoint_count) checkpoints after kill -9"; failures=$((failures + 1)); }
}

case "$case_name" in
  profile_sigterm)
    # SIGTERM among the profile intervals' refits (docs/results.md, Profile intervals): half-way
    # between the batches of the fit without intervals and those of the reference, which has them.
    # Exit 3 with a checkpoint that holds the profile points computed; the resumed run takes them
    # from it, computes the rest and writes bitwise the reference's result files, intervals and
    # profiles included.
    total=$(reference_batches)
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config fit.yaml "${strategy_flags[@]}" \
      "${local_only[@]}" --output-dir plain --checkpoint-dir ./plain_checkpoints
    plain=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
      plain/nlsq/convergence_metrics.json)
    [ "$total" -gt $((plain + 8)) ] ||
      { echo "FAIL: the profile intervals took $((total - plain)) batches, too few to interrupt"; failures=$((failures + 1)); }
    rm -rf checkpoints
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$(((plain + total) / 2)):15 expect_exit 3 \
      "interrupted by SIGTERM; checkpoint saved" fit_with_faults --output-dir interrupted
    [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL: no checkpoint after SIGTERM"; failures=$((failures + 1)); }
    h5dump -a format_version "$(newest_checkpoint)" 2>/dev/null | grep -q "(0): 5" ||
      { echo "FAIL: the checkpoint holds no profile points (format_version 5)"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir interrupted
    grep -Eq "profile points: [0-9]+ \(the profile check's and intervals'\), [1-9][0-9]* of them from the checkpoint" \
      <<<"$last_output" ||
      { echo "FAIL: the resumed run did not take profile points from the checkpoint"; failures=$((failures + 1)); }
    grep -q '"interval_method": "profile"' interrupted/nlsq/parameters.json ||
      { echo "FAIL: no profile intervals in the resumed result"; failures=$((failures + 1)); }
    same_result_files reference interrupted "profile intervals SIGTERM + resume"
    [ "$(checkpoint_count)" -eq 0 ] || { echo "FAIL: checkpoints left after success"; failures=$((failures + 1)); }
    ;;
  check_sigterm)
    # SIGTERM in the profile check of the uncertainties and in the profile intervals of the
    # parameters it names (docs/results.md, What the uncertainties mean and Intervals; the
    # default for two_component, which names D_offset_ref, f0 and f3 here): each exits 3 with a
    # checkpoint that holds the profile points computed so far, like a signal anywhere else, and
    # the run resumed twice writes bitwise the reference's result files.
    [ "$mode" = two_component ] || { echo "FAIL: check_sigterm needs MODE two_component"; exit 1; }
    total=$(reference_batches)
    reference_points=$(grep -Eo "profile points: [0-9]+" <<<"$reference_output")
    sed 's/nlsq: {max_iterations: [0-9]*/&, profile_check: false/' fit.yaml > plain.yaml
    expect_exit 0 "LM converged" "$bin_dir/homodyne" --config plain.yaml "${strategy_flags[@]}" \
      "${local_only[@]}" --output-dir plain --checkpoint-dir ./plain_checkpoints
    grep -q "standard errors from the result" <<<"$last_output" &&
      { echo "FAIL: profile_check: false still checked"; failures=$((failures + 1)); }
    plain=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
      plain/nlsq/convergence_metrics.json)
    # The check's and the intervals' refits count as batches (their passes), as the final fit's.
    [ "$total" -gt $((plain + 8)) ] ||
      { echo "FAIL: the check and its intervals took $((total - plain)) batches, too few to interrupt"; failures=$((failures + 1)); }
    rm -rf checkpoints
    # A tenth into the profile batches: in the check (its warning, printed when it ends, is not out).
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((plain + (total - plain) / 10)):15 expect_exit 3 \
      "interrupted by SIGTERM; checkpoint saved" fit_with_faults --output-dir interrupted
    grep -q "standard errors from the result" <<<"$last_output" &&
      { echo "FAIL: the first signal came after the profile check"; failures=$((failures + 1)); }
    [ ! -e interrupted/nlsq/parameters.json ] ||
      { echo "FAIL: the interrupted run wrote results"; failures=$((failures + 1)); }
    h5dump -a format_version "$(newest_checkpoint)" 2>/dev/null | grep -q "(0): 5" ||
      { echo "FAIL: the checkpoint holds no profile points (format_version 5)"; failures=$((failures + 1)); }
    # Resumed, and stopped again three quarters in (the batch count goes on from the
    # checkpoint's): after the check, among the intervals of what it named.
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((plain + (total - plain) * 3 / 4)):15 expect_exit 3 \
      "interrupted by SIGTERM; checkpoint saved" fit_with_faults --output-dir interrupted
    grep -q "resumed from the checkpoint" <<<"$last_output" ||
      { echo "FAIL: the second run did not resume"; failures=$((failures + 1)); }
    grep -q "standard errors from the result" <<<"$last_output" ||
      { echo "FAIL: the second signal came before the check's end"; failures=$((failures + 1)); }
    [ ! -e interrupted/nlsq/parameters.json ] ||
      { echo "FAIL: the interrupted run wrote results"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir interrupted
    grep -Eq "profile points: [0-9]+ \(the profile check's and intervals'\), [1-9][0-9]* of them from the checkpoint" \
      <<<"$last_output" ||
      { echo "FAIL: the resumed run did not take profile points from the checkpoint"; failures=$((failures + 1)); }
    # The trail of profile points is an uninterrupted run's: no point recorded twice.
    [ "$(grep -Eo "profile points: [0-9]+" <<<"$last_output")" = "$reference_points" ] ||
      { echo "FAIL: the resumed run recorded $(grep -Eo "profile points: [0-9]+" <<<"$last_output"), the reference $reference_points"; failures=$((failures + 1)); }
    grep -q '"interval_method": "profile"' interrupted/nlsq/parameters.json ||
      { echo "FAIL: no profile intervals in the resumed result"; failures=$((failures + 1)); }
    same_result_files reference interrupted "profile check SIGTERM, intervals SIGTERM + resume"
    [ "$(checkpoint_count)" -eq 0 ] || { echo "FAIL: checkpoints left after success"; failures=$((failures + 1)); }
    # profile_check is not in the checkpoint's identity (it adds warnings and intervals after the
    # fit): a checkpoint saved in the check, resumed with the check off, gives the plain fit's
    # result files.
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((plain + (total - plain) / 10)):15 expect_exit 3 \
      "interrupted by SIGTERM; checkpoint saved" fit_with_faults --output-dir check_off
    expect_exit 0 "resumed from the checkpoint" "$bin_dir/homodyne" --config plain.yaml \
      "${strategy_flags[@]}" "${local_only[@]}" --output-dir check_off
    same_result_files plain check_off "profile check SIGTERM, resumed with profile_check: false"
    ;;
  global_sigterm)
    # SIGTERM inside the global phase (it screens ~140 candidates, one pass each, before any
    # local fit): exit 3 with a checkpoint; the resumed run replays the screening saved in it,
    # computes the rest and returns bitwise the uninterrupted run's parameters.
    rm -rf checkpoints
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=400:15 fit_with_faults --output-dir interrupted > global.log 2>&1
    code=$?
    [ "$code" -eq 3 ] || { echo "FAIL: global phase SIGTERM exited $code, expected 3"; failures=$((failures + 1)); }
    grep -q "global search screening" global.log ||
      { echo "FAIL: the signal did not come during the global phase"; cat global.log; failures=$((failures + 1)); }
    grep -q "global search local fit" global.log &&
      { echo "FAIL: the global phase reached its local fits before the signal"; failures=$((failures + 1)); }
    [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL: no checkpoint after SIGTERM"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir interrupted
    grep -Eq "replaying [1-9][0-9]* evaluations and 0 local fits" <<<"$last_output" ||
      { echo "FAIL: the resumed run did not replay the screening"; failures=$((failures + 1)); }
    same_results reference interrupted "global phase SIGTERM + resume"
    # SIGTERM four fifths into the run, which is mostly the global phase (its screening is about
    # two thirds of it since the ranked local fits stop early, the final fit from its minimum a
    # few passes): among the local fits, after the first ones (linear and cauchy loss alike). The
    # resumed run replays the screening and the local fits done.
    total=$(reference_batches)
    rm -rf checkpoints
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((total * 4 / 5)):15 expect_exit 3 \
      "interrupted by SIGTERM" fit_with_faults --output-dir midway
    expect_exit 0 "resumed from the checkpoint" fit --output-dir midway
    grep -Eq "replaying [1-9][0-9]* evaluations and [1-9][0-9]* local fits" <<<"$last_output" ||
      { echo "FAIL: the resumed run did not replay the local fits"; failures=$((failures + 1)); }
    same_results reference midway "global phase local-fit SIGTERM + resume"
    grep -q '"global_search"' interrupted/nlsq/convergence_metrics.json ||
      { echo "FAIL: no global_search section"; failures=$((failures + 1)); }
    # SIGTERM in the final fit's last pass (the reference's batch count minus 20): the resumed
    # run continues the final fit and does not repeat the global phase.
    rm -rf checkpoints
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((total - 20)):15 expect_exit 3 "interrupted by SIGTERM" \
      fit_with_faults --output-dir late
    expect_exit 0 "resumed from the checkpoint" fit --output-dir late
    grep -Eq "global search [a-z_]+: .* ([0-9]+) passes \(\1 replayed\)" <<<"$last_output" ||
      { echo "FAIL: the resumed final fit did not replay the whole global phase"; failures=$((failures + 1)); }
    grep -q "global search screening" <<<"$last_output" &&
      { echo "FAIL: the resumed final fit repeated the global phase"; failures=$((failures + 1)); }
    python3 - reference/nlsq/convergence_metrics.json late/nlsq/convergence_metrics.json <<'PY' ||
import json, sys
a, b = (json.load(open(path))["global_search"] for path in sys.argv[1:])
keys = ["method", "minima", "chosen", "local_fits", "passes"]
sys.exit(0 if all(a.get(k) == b.get(k) for k in keys) else 1)
PY
      { echo "FAIL: the resumed run's global_search section differs from the reference's"; failures=$((failures + 1)); }
    same_results reference late "final-fit SIGTERM + resume"
    ;;
  sigterm)
    # SIGTERM mid-pass: exit 3 with a checkpoint; the resumed run is bitwise the reference.
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$term_at:15 expect_exit 3 "interrupted by SIGTERM; checkpoint saved" \
      fit_with_faults --output-dir interrupted
    [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL: no checkpoint after SIGTERM"; failures=$((failures + 1)); }
    perms=$(stat -c %a "$(newest_checkpoint)")
    [ "$perms" = 600 ] || { echo "FAIL: checkpoint mode $perms, expected 600"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir resumed
    same_results reference resumed
    [ "$(checkpoint_count)" -eq 0 ] || { echo "FAIL: checkpoints left after success"; failures=$((failures + 1)); }
    # A real signal from another process, while the fit runs: same outcome. The fit is the test
    # build's (the same program objects and signal handling as homodyne) with every batch 20 ms
    # longer (HOMODYNE_TEST_BATCH_DELAY_MS), so that it lasts at least the reference's batch count
    # times 20 ms on any machine (574 batches, 11 s, for laminar_flow with standard), and the
    # signal, sent once the first checkpoint is on disk (two passes in at most), lands inside it: a
    # fit that ends by itself fails the test, as it would then test nothing.
    outside_delay_ms=20
    # The program itself in the background, not the shell function: $! is then its process.
    HOMODYNE_TEST_BATCH_DELAY_MS=$outside_delay_ms "$faults_program" --config fit.yaml \
      "${strategy_flags[@]}" "${local_only[@]}" --output-dir outside > outside.log 2>&1 &
    pid=$!
    for _ in $(seq 1 3000); do
      [ "$(checkpoint_count)" -ge 1 ] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.02
    done
    kill -TERM "$pid" 2>/dev/null
    wait "$pid"
    code=$?
    if [ "$code" -eq 3 ]; then
      grep -q "interrupted by SIGTERM; checkpoint saved" outside.log ||
        { echo "FAIL: external SIGTERM: exit 3 without the interrupt message"; cat outside.log; failures=$((failures + 1)); }
      echo "ok: external SIGTERM -> 3, $(checkpoint_count) checkpoint(s); unsignalled, the fit would last $(reference_batches) batches x ${outside_delay_ms} ms at least"
      expect_exit 0 "resumed from the checkpoint" fit --output-dir outside_resumed
      same_results reference outside_resumed
    elif [ "$code" -eq 0 ]; then
      echo "FAIL: the fit finished before the external SIGTERM arrived (reference $(reference_batches) batches at ${outside_delay_ms} ms each at least): the signal tested nothing"
      failures=$((failures + 1))
    else
      echo "FAIL: external SIGTERM gave exit $code"; cat outside.log; failures=$((failures + 1))
    fi
    ;;
  global_kill9)
    # kill -9 among the global phase's local fits (four fifths into the run, which is mostly the
    # global phase): nothing is saved at the kill, so the resumed run starts from the newest
    # periodic checkpoint of the phase, replays the work it records and returns bitwise the
    # uninterrupted run's parameters.
    total=$(reference_batches)
    rm -rf checkpoints
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$((total * 4 / 5)):9 fit_with_faults --output-dir killed \
      > killed.log 2>&1
    code=$?
    [ "$code" -eq 137 ] || { echo "FAIL: the killed run exited $code, expected 137"; failures=$((failures + 1)); }
    grep -q "global search local fit" killed.log ||
      { echo "FAIL: the kill did not come among the global phase's local fits"; tail -5 killed.log; failures=$((failures + 1)); }
    grep -q "^LM " killed.log &&
      { echo "FAIL: the final fit had started before the kill"; failures=$((failures + 1)); }
    [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL: no periodic checkpoint before kill -9"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir killed
    grep -Eq "replaying [1-9][0-9]* evaluations and [0-9]+ local fits" <<<"$last_output" ||
      { echo "FAIL: the resumed run did not replay the global phase's work"; failures=$((failures + 1)); }
    same_results reference killed "global phase kill -9 + resume"
    ;;
  kill9)
    killed_run
    # The resume is announced under --quiet too: the file (the newest), its batch, its age and
    # the version that wrote it (docs/checkpoints.md, How resume picks a file).
    newest=$(basename "$(newest_checkpoint)")
    batch=$((10#$(sed -E 's/.*_([0-9]+)\.h5$/\1/' <<<"$newest")))
    expect_exit 0 "resuming from \./checkpoints/$newest \(batch $batch, written [0-9]+ (s|min|h|days) ago by homodyne-cpp [0-9][0-9.]*\); --no-resume starts afresh" \
      fit --quiet --output-dir resumed
    ! grep -q "\[info\]" <<<"$last_output" ||
      { echo "FAIL: --quiet printed info lines"; failures=$((failures + 1)); }
    same_results reference resumed
    ;;
  crash_in_checkpoint_write)
    killed_run
    before=$(newest_checkpoint)
    # The resumed run aborts inside its first checkpoint write: the earlier files stay valid.
    HOMODYNE_TEST_CRASH_DURING_CHECKPOINT_WRITE=1 fit_with_faults --output-dir crashed > crashed.log 2>&1
    code=$?
    [ "$code" -ne 0 ] && [ "$code" -ne 3 ] || { echo "FAIL: crash hook run exited $code"; failures=$((failures + 1)); }
    [ "$(newest_checkpoint)" = "$before" ] ||
      { echo "FAIL: newest checkpoint changed to $(newest_checkpoint)"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir resumed
    same_results reference resumed
    ;;
  corrupt_checkpoint)
    for damage in flip truncate empty; do
      killed_run
      newest=$(newest_checkpoint)
      size=$(stat -c %s "$newest")
      case $damage in
        flip) python3 -c "
import sys
path, size = sys.argv[1], int(sys.argv[2])
data = bytearray(open(path, 'rb').read())
for k in range(size // 3, size // 3 + 64): data[k] ^= 0xFF
open(path, 'wb').write(data)" "$newest" "$size" ;;
        truncate) truncate -s $((size / 2)) "$newest" ;;
        empty) : > "$newest" ;;
      esac
      expect_exit 0 "$(basename "$newest").*skipped" fit --output-dir "resumed_$damage"
      grep -q "resumed from the checkpoint" <<<"$last_output" ||
        { echo "FAIL ($damage): the older checkpoint was not used"; failures=$((failures + 1)); }
      same_results reference "resumed_$damage"
    done
    ;;
  foreign_checkpoint)
    killed_run
    sed 's/max_iterations: 60/max_iterations: 61/' fit.yaml > other.yaml
    expect_exit 1 "different config" "$bin_dir/homodyne" --config other.yaml "${strategy_flags[@]}" \
      "${local_only[@]}" --output-dir other
    # The other optimiser's state: Ceres (--solver ceres) or the LM core (every other strategy,
    # which share their batches and resume each other's checkpoints).
    if [ "$strategy" = ceres ]; then
      other=(--strategy large); writer="Ceres solver"
      advice="--strategy standard --solver ceres \(optimization.nlsq.solver: ceres"
    else
      other=(--strategy standard --solver ceres); writer="LM core"
      advice="--solver lm \(optimization.nlsq.solver: lm\)"
    fi
    expect_exit 1 "written by the $writer.*resume it with $advice" "$bin_dir/homodyne" \
      --config fit.yaml "${other[@]}" "${local_only[@]}" --output-dir other_strategy
    # A value edited in place, the size and modification time kept: a byte of angle 0's (100, 200)
    # point, in none of the fingerprint's sampled rows (0, the middle and the last): the
    # checksum of the file's bytes sees it (docs/checkpoints.md, How resume picks a file).
    cp -p sim.h5 sim_unedited.h5
    /usr/bin/python3 - <<'PY' || { echo "FAIL: cannot edit sim.h5"; failures=$((failures + 1)); }
import h5py
with h5py.File("sim.h5", "r") as f:
    data = f["xpcs/twotime/correlation_map/c2_00001"]
    assert data.compression is None
    if data.chunks is None:
        offset = data.id.get_offset() + (100 * data.shape[1] + 200) * data.dtype.itemsize
    else:  # the byte of (100, 200) in its uncompressed chunk
        rows, cols = data.chunks
        corner = (100 - 100 % rows, 200 - 200 % cols)
        chunk = data.id.get_chunk_info_by_coord(corner)
        offset = chunk.byte_offset + ((100 - corner[0]) * cols + 200 - corner[1]) * data.dtype.itemsize
with open("sim.h5", "r+b") as f:
    f.seek(offset + 1)
    byte = f.read(1)
    f.seek(offset + 1)
    f.write(bytes([byte[0] ^ 0x40]))
PY
    touch -r sim_unedited.h5 sim.h5
    expect_exit 1 "different data set \(checkpoint 'content_crc32=" fit --output-dir edited
    mv sim_unedited.h5 sim.h5
    touch -d '2001-01-01' sim.h5
    expect_exit 1 "different data set" fit --output-dir touched
    expect_exit 0 "LM converged" fit --output-dir fresh --no-resume
    same_results reference fresh
    ;;
  unreadable_batch)
    if [ "$strategy" != streaming ]; then echo "skipped: streaming reads the file every pass"; exit 77; fi
    HOMODYNE_TEST_FAIL_READ_AT_BATCH=20 expect_exit 1 \
      "sim.h5: dataset /xpcs/twotime/correlation_map/c2_0+[0-9]+: batch 20 .* could not be read after 2 retries.*progress saved" \
      fit_with_faults --output-dir failed
    [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL: no checkpoint after the read failure"; failures=$((failures + 1)); }
    expect_exit 0 "resumed from the checkpoint" fit --output-dir resumed
    same_results reference resumed
    # enable_fault_tolerance: false: no retry.
    sed 's/^  streaming:$/  streaming:\n    enable_fault_tolerance: false/' fit.yaml > no_retry.yaml
    rm -rf checkpoints
    HOMODYNE_TEST_FAIL_READ_AT_BATCH=20 expect_exit 1 "batch 20 .* could not be read after 0 retries" \
      "$faults_program" --config no_retry.yaml "${strategy_flags[@]}" "${local_only[@]}" \
      --output-dir no_retry
    # The production homodyne ignores the variable: the same fit succeeds, bitwise the reference.
    HOMODYNE_TEST_FAIL_READ_AT_BATCH=20 expect_exit 0 "LM converged" fit --output-dir ignored \
      --no-resume
    same_results reference ignored
    ;;
  unwritable_checkpoints)
    expect_exit 0 "checkpoint not saved, the fit goes on" fit --output-dir nocheckpoints \
      --checkpoint-dir /proc/homodyne_no_such_dir
    same_results reference nocheckpoints
    grep -q '"checkpoint": [1-9]' nocheckpoints/nlsq/analysis_results_nlsq.json ||
      { echo "FAIL: checkpoint failures not in the results"; failures=$((failures + 1)); }
    ;;
  nan_data)
    # Plant NaN and Inf in the stored upper triangles: they are excluded and counted.
    /usr/bin/python3 - <<'PY' || { echo "skipped: no h5py"; exit 77; }
import h5py, numpy as np
with h5py.File("sim.h5", "r+") as f:
    group = f["/xpcs/twotime/correlation_map"]
    for name, value in zip(sorted(group), [np.nan, np.inf, -np.inf]):
        data = group[name][...]
        data[10, 20:30] = value
        data[100, 150] = value
        group[name][...] = data
PY
    # Fast mode skips the jackknife's pass and reports the standard error (docs/results.md, What
    # the uncertainties mean): otherwise the same numbers.
    expect_exit 0 "33 non-finite data points excluded" fit --output-dir nan --no-resume \
      --uncertainty standard
    expect_exit 0 "33 non-finite data points excluded" fit --output-dir nan_fast --no-resume \
      --fast-mode
    same_results nan nan_fast
    # Excluded, not replaced: 33 points fewer, both triangles (dof 66 lower than the reference's).
    python3 - reference/nlsq/analysis_results_nlsq.json nan/nlsq/analysis_results_nlsq.json <<'PY' ||
import json, sys
a, b = (json.load(open(path)) for path in sys.argv[1:])
da, db = a["fit_quality"]["degrees_of_freedom"], b["fit_quality"]["degrees_of_freedom"]
print("dof", da, "->", db)
sys.exit(0 if da - db == 66 else 1)
PY
      { echo "FAIL: the excluded points are not missing from dof"; failures=$((failures + 1)); }
    ;;
  checkpoint_interval)
    # Periodic saves need checkpoint_frequency batches and checkpoint_min_interval_seconds.
    saved() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['checkpoints_saved'])" \
      "$1/nlsq/analysis_results_nlsq.json"; }
    expect_exit 0 "LM converged" fit --output-dir every_batch --no-resume --checkpoint-frequency 1
    expect_exit 0 "LM converged" fit --output-dir held_back --no-resume --checkpoint-frequency 1 \
      --checkpoint-min-interval 3600
    echo "checkpoints saved: $(saved every_batch) every batch, $(saved held_back) at most hourly"
    [ "$(saved every_batch)" -ge 5 ] && [ "$(saved held_back)" -eq 0 ] ||
      { echo "FAIL: the minimum interval did not hold back periodic saves"; failures=$((failures + 1)); }
    same_results every_batch held_back
    # A signal still saves at once.
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$term_at:15 expect_exit 3 "checkpoint saved" \
      fit_with_faults --output-dir interrupted --checkpoint-min-interval 3600
    [ "$(checkpoint_count)" -eq 1 ] || { echo "FAIL: $(checkpoint_count) checkpoints after SIGTERM, expected 1"; failures=$((failures + 1)); }
    ;;
  result_stages)
    # SIGKILL at every stage of the result writing (FaultInjector::KillAtResultStage), over the
    # result files of an earlier fit: the folder holds the earlier set whole, or a prefix of the
    # new one (never a mix, docs/results.md, How the files are written); the checkpoints are
    # still there, and the rerun resumes and writes bitwise the uninterrupted run's results.
    earlier_results
    stages=()
    for name in "${result_files[@]}"; do stages+=("written:$name"); done
    stages+=(before_renames)
    for name in "${result_files[@]}"; do stages+=("renamed:$name"); done
    stages+=(after_renames before_checkpoint_removal)
    for stage in "${stages[@]}"; do
      out=out_${stage//[:.]/_}
      rm -rf checkpoints "$out"
      cp -r earlier "$out"
      HOMODYNE_TEST_KILL_AT_RESULT_STAGE=$stage fit_with_faults --output-dir "$out" > killed.log 2>&1
      code=$?
      [ "$code" -eq 137 ] || { echo "FAIL ($stage): exited $code, expected 137"; cat killed.log; failures=$((failures + 1)); }
      [ "$(checkpoint_count)" -ge 1 ] ||
        { echo "FAIL ($stage): the checkpoints went before the results were durable"; failures=$((failures + 1)); }
      case $stage in
        written:*|before_renames) expect_set "$out" earlier "$stage" ;;
        *) expect_set "$out" new "$stage" ;;
      esac
      expect_exit 0 "resumed from the checkpoint" fit --output-dir "$out"
      same_result_files reference "$out" "kill at $stage + rerun"
      no_temporary_files "$out" "$stage rerun"
      [ "$(checkpoint_count)" -eq 0 ] || { echo "FAIL ($stage): checkpoints left after the rerun"; failures=$((failures + 1)); }
    done
    ;;
  result_write_failure)
    # A result file that cannot be written (a full disk, injected: ENOSPC; a read-only nlsq/):
    # exit 1 naming the file, the earlier results untouched, no temporary file, the checkpoints
    # kept, the lock released; the rerun resumes and writes bitwise the reference's results.
    earlier_results
    for name in "${result_files[@]}"; do
      rm -rf checkpoints full
      cp -r earlier full
      HOMODYNE_TEST_FAIL_RESULT_WRITE=$name expect_exit 1 \
        "full/nlsq/$name: cannot write the file \(cannot write .*No space left on device\); nothing published, full/nlsq keeps its previous files" \
        fit_with_faults --output-dir full
      grep -q "iteration\|LM converged" <<<"$last_output" ||
        { echo "FAIL ($name): the fit did not run before the write"; failures=$((failures + 1)); }
      expect_set full earlier "full disk at $name"
      no_temporary_files full "full disk at $name"
      [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL ($name): checkpoints removed after a failed write"; failures=$((failures + 1)); }
      [ ! -e checkpoints/.homodyne.lock ] || { echo "FAIL ($name): lock file left"; failures=$((failures + 1)); }
      expect_exit 0 "resumed from the checkpoint" fit --output-dir full
      same_result_files reference full "full disk at $name + rerun"
    done
    # No earlier results: a failed write leaves no result file at all.
    rm -rf checkpoints fresh
    HOMODYNE_TEST_FAIL_RESULT_WRITE=parameters.json expect_exit 1 "No space left on device" \
      fit_with_faults --output-dir fresh
    [ -z "$(ls -A fresh/nlsq)" ] || { echo "FAIL: a failed first write left $(ls -A fresh/nlsq)"; failures=$((failures + 1)); }
    # A read-only nlsq/ (root ignores permission bits: the fit runs as nobody then).
    rm -rf checkpoints readonly
    cp -r earlier readonly
    chmod 555 readonly/nlsq
    as_user=()
    if [ "$(id -u)" -eq 0 ]; then
      chmod 755 "$work"
      mkdir -m 777 checkpoints
      as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    fi
    expect_exit 1 "readonly/nlsq/fitted_data.h5: cannot write the file \(cannot create a temporary file in readonly/nlsq: Permission denied\)" \
      "${as_user[@]}" "$bin_dir/homodyne" --config fit.yaml "${strategy_flags[@]}" "${local_only[@]}" \
      --output-dir readonly
    expect_set readonly earlier "read-only nlsq/"
    no_temporary_files readonly "read-only nlsq/"
    [ "$(checkpoint_count)" -ge 1 ] || { echo "FAIL: checkpoints removed after a read-only nlsq/"; failures=$((failures + 1)); }
    chmod 755 readonly/nlsq
    expect_exit 0 "resumed from the checkpoint" fit --output-dir readonly
    same_result_files reference readonly "read-only nlsq/ + rerun"
    ;;
  checkpoint_lock)
    # One live process per checkpoint folder: a fit paused (SIGSTOP) holds the lock; a second fit
    # on the folder stops before fitting, naming the holder's host and PID and the folder.
    rm -rf checkpoints
    # (Not through fit_with_faults: $! must be the program's PID, not a subshell's.)
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$term_at:19 "$faults_program" --config fit.yaml \
      "${strategy_flags[@]}" "${local_only[@]}" --output-dir first > first.log 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
      [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == T* ]] && break
      sleep 0.05
    done
    [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" == T* ]] || { echo "FAIL: the first fit did not pause"; failures=$((failures + 1)); }
    expect_exit 1 "checkpoint folder \./checkpoints is in use by PID $pid on host $(uname -n) \(lock file \./checkpoints/\.homodyne\.lock\)" \
      fit --output-dir second
    grep -q "iteration" <<<"$last_output" && { echo "FAIL: the second fit fitted"; failures=$((failures + 1)); }
    [ ! -e second/nlsq ] || { echo "FAIL: the second fit wrote results"; failures=$((failures + 1)); }
    # One live process per results folder too: a fit with its own checkpoint folder but the
    # paused fit's output folder stops before fitting, and the paused fit's results survive it.
    expect_exit 1 "results folder first/nlsq is in use by PID $pid on host $(uname -n) \(lock file first/nlsq/\.homodyne-results\.lock\)" \
      fit --output-dir first --checkpoint-dir other_checkpoints
    grep -q "iteration" <<<"$last_output" && { echo "FAIL: the fit on a locked results folder fitted"; failures=$((failures + 1)); }
    [ ! -e other_checkpoints ] || { echo "FAIL: the fit on a locked results folder made checkpoints"; failures=$((failures + 1)); }
    kill -CONT "$pid"
    wait "$pid"
    code=$?
    [ "$code" -eq 0 ] || { echo "FAIL: the paused fit exited $code"; cat first.log; failures=$((failures + 1)); }
    same_results reference first
    [ ! -e checkpoints/.homodyne.lock ] || { echo "FAIL: lock file left after success"; failures=$((failures + 1)); }
    [ ! -e first/nlsq/.homodyne-results.lock ] || { echo "FAIL: results lock file left after success"; failures=$((failures + 1)); }
    # Interrupted (exit 3): the lock is released with the checkpoints kept.
    HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=$term_at:15 expect_exit 3 "checkpoint saved" \
      fit_with_faults --output-dir interrupted
    [ ! -e checkpoints/.homodyne.lock ] || { echo "FAIL: lock file left after exit 3"; failures=$((failures + 1)); }
    # A stale lock of a killed process is taken over, with a note naming it.
    killed_run
    holder=$(cat checkpoints/.homodyne.lock 2>/dev/null)
    [[ "$holder" == "PID "*" on host $(uname -n)" ]] || { echo "FAIL: lock file after kill -9 holds '$holder'"; failures=$((failures + 1)); }
    expect_exit 0 "took over the stale lock of $holder on the checkpoint folder \./checkpoints" \
      fit --output-dir resumed
    same_results reference resumed
    [ ! -e checkpoints/.homodyne.lock ] || { echo "FAIL: lock file left after the resumed fit"; failures=$((failures + 1)); }
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
# A robust fit says so in its results (and so did not silently fit the linear loss).
if [ "$loss" != linear ] && [ -f reference/nlsq/parameters.json ]; then
  grep -q "\"loss\": \"$loss\"" reference/nlsq/parameters.json ||
    { echo "FAIL: reference/nlsq/parameters.json does not name loss $loss"; failures=$((failures + 1)); }
fi
[ "$failures" -eq 0 ] || { echo "$case_name ($strategy): $failures check(s) failed"; exit 1; }
echo "$case_name ($strategy): all checks passed"
