#!/usr/bin/env bash
# One fit on the ranks of an MPI job (docs/design.md section 5b): the results of
# `mpirun -n K homodyne` are bitwise those of the plain single process, a signal to one rank
# stops every rank with exit 3 after exactly one checkpoint, which a job of another rank count
# resumes bitwise, and a rank that dies or cannot read its rows ends the whole job in bounded
# time with a non-zero exit.
# Usage: mpi_test.sh BIN_DIR MPIEXEC CASE [ARGS...], with HOMODYNE_FAULTS_PROGRAM the test build
# homodyne_with_faults (tests/cli/homodyne_with_faults.cc: its HOMODYNE_TEST_* variables).
#   bitwise MODE STRATEGY   MODE static or laminar_flow; STRATEGY standard, large, chunked or
#                           streaming; the global phase on (multi_start, small); 2 and 3 ranks
#                           (and 1 for static)
#   spread_phase STRATEGY   laminar_flow with method auto on data large enough for its coarse
#                           level, whose candidates and local fits the ranks share: 2 and 3 ranks
#                           bitwise the single process; SIGTERM on rank 1 only in the middle of
#                           the phase, resumed on 3 ranks and in one process
#   signal_one_rank STRATEGY   SIGTERM raised on rank 1 only (2 ranks) in the middle of a pass,
#                              then resumes on 3 ranks and in one process (STRATEGY streaming
#                              or chunked)
#   profile_intervals STRATEGY   laminar_flow with --profile-intervals: 2 and 3 ranks bitwise the
#                           single process (standard: the ranks spread the interval ends;
#                           streaming: lock step); SIGTERM on rank 1 among the intervals, resumed
#                           on 3 ranks and in one process
#   check_signal            two_component (its profile check, in lock step): SIGTERM on rank 1
#                           in the check, resumed on 3 ranks and in one process
#   profile_faults          laminar_flow with --profile-intervals (standard), 2 ranks: rank 1
#                           cannot copy all the data (lock step instead, bitwise), then a profile
#                           fit fails on rank 1 (exit 1 naming it)
#   rank_killed             rank 1 SIGKILLed mid-fit (streaming)
#   unreadable_rows         every read of a batch of rank 1's share fails (streaming)
#   bad_input               a config error under 2 ranks: reported once, exit 1
# MPIEXEC: the launcher CMake found (FindMPI's MPIEXEC_EXECUTABLE). Open MPI runs as root only
# with --allow-run-as-root (CI containers), and more ranks than cores only with --oversubscribe.
set -u
bin_dir=$(cd "$1" && pwd)
mpiexec=$2
case_name=$3
faults_program=${HOMODYNE_FAULTS_PROGRAM:?the test build homodyne_with_faults}
shift 3
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
# shellcheck source=test_lib.sh
source "$here/test_lib.sh"

launcher=("$mpiexec")
if "$mpiexec" --version 2>&1 | grep -Eq "Open ?MPI|OpenRTE"; then
  # As root in CI; more ranks than the 2 cores; ranks that wait yield their core (the machine is
  # oversubscribed: busy-polling ranks would starve the one that computes).
  launcher+=(--allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1)
fi
# Every rank single-threaded: 3 ranks on 2 cores are oversubscribed already.
export OMP_NUM_THREADS=1

# write_config MODE FREQUENCY [INTERVAL [FRAMES [METHOD]]]: fit.yaml and its simulated data sim.h5
# (small: a fit takes about a second); checkpoints every FREQUENCY batches and INTERVAL seconds
# (default 0; chunked: chunks of FREQUENCY batches); FRAMES frames (default 120) and the global
# phase's METHOD (default multi_start).
write_config() {
  local mode=$1 frequency=$2 interval=${3:-0} frames=${4:-120} method=${5:-multi_start}
  local names values truth
  if [ "$mode" = static ]; then
    names="[D0, alpha, D_offset]"; values="[1300, -0.4, 12]"
    truth="{D0: 1000, alpha: -0.5, D_offset: 10}"
  else
    names="[D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]"
    values="[1300, -0.4, 12, 0.00025, 0.1, 0, 1]"
    truth="{D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.0002, beta: 0,
               gamma_dot_t_offset: 0, phi0: 0}"
  fi
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
initial_parameters:
  parameter_names: $names
  values: $values
optimization:
  nlsq:
    max_iterations: 40
    global_search: {method: $method}
    multi_start: {n_starts: 3, refine_top_k: 1}
  streaming:
    batch_size: 1500
    checkpoint_dir: ./checkpoints
    checkpoint_frequency: $frequency
    checkpoint_min_interval_seconds: $interval
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
}

# ranks K PROGRAM ARGS...: PROGRAM on K ranks, at most 120 s (a hang fails the test).
ranks() {
  local k=$1
  shift
  timeout 120 "${launcher[@]}" -n "$k" "$@"
}

# resume_on_3_ranks_and_one_process REFERENCE: the checkpoint in ./checkpoints resumed by a job
# of 3 ranks and, from a copy, by the single process (homodyne with the caller's `flags`); both
# must hold bitwise the results in REFERENCE.
resume_on_3_ranks_and_one_process() {
  local reference=$1
  cp -r checkpoints checkpoints_copy
  expect_exit 0 "resumed from the checkpoint" ranks 3 "$bin_dir/homodyne" "${flags[@]}" \
    --output-dir resumed3
  resumed3_output=$last_output
  same_results "$reference" resumed3
  rm -rf checkpoints && mv checkpoints_copy checkpoints
  expect_exit 0 "resumed from the checkpoint" "$bin_dir/homodyne" "${flags[@]}" \
    --output-dir resumed1
  same_results "$reference" resumed1
}

checkpoint_count() { find checkpoints -name 'homodyne_state_batch_*.h5' 2>/dev/null | wc -l; }

# signal_rank_1 BATCHES:SIGNAL COMMAND...: COMMAND on 2 ranks, rank 1 alone with
# HOMODYNE_TEST_SIGNAL_AFTER_BATCHES=BATCHES:SIGNAL (the faults program raises signal number
# SIGNAL once it has counted BATCHES batches).
signal_rank_1() {
  local spec=$1
  shift
  ranks 2 bash -c '
    [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" = 1 ] &&
      export HOMODYNE_TEST_SIGNAL_AFTER_BATCHES="$0"
    exec "$@"' "$spec" "$@"
}

# interrupt_rank_1_after BATCHES: a job of 2 ranks of the faults program (with the caller's
# `flags`, output in ./interrupted) whose rank 1 alone gets SIGTERM after BATCHES batches; it
# must exit 3 and leave exactly one checkpoint. Its output stays in last_output.
interrupt_rank_1_after() {
  expect_exit 3 "interrupted by SIGTERM; checkpoint saved" \
    signal_rank_1 "$1:15" "$faults_program" "${flags[@]}" --output-dir interrupted
  [ "$(checkpoint_count)" -eq 1 ] ||
    { echo "FAIL: $(checkpoint_count) checkpoints after the interruption, expected 1"; failures=$((failures + 1)); }
}

case "$case_name" in
  bitwise)
    mode=$1 strategy=$2
    write_config "$mode" 4  # chunked: several chunks a pass
    flags=(--config fit.yaml --strategy "$strategy" --threads 1)
    expect_exit 0 "results in" "$bin_dir/homodyne" "${flags[@]}" --output-dir single
    grep -q "global search multi_start" <<<"$last_output" ||
      { echo "FAIL: the global phase did not run"; failures=$((failures + 1)); }
    # One rank runs the single process's code path (a group of one); it is launched for the
    # static mode only, to keep the test time down.
    rank_counts=(2 3)
    [ "$mode" = static ] && rank_counts=(1 2 3)
    for k in "${rank_counts[@]}"; do
      expect_exit 0 "results in" ranks "$k" "$bin_dir/homodyne" "${flags[@]}" --output-dir "ranks$k"
      same_results single "ranks$k"
      # Rank 0 alone prints: one result block, one line per angle.
      lines=$(grep -c "results in" <<<"$last_output")
      [ "$lines" -eq 1 ] ||
        { echo "FAIL: $k ranks printed the result $lines times"; failures=$((failures + 1)); }
      if [ "$k" -gt 1 ]; then
        grep -Eq "$k ranks shared the passes: rank 0 received [0-9]+ bytes" <<<"$last_output" ||
          { echo "FAIL: no communication line for $k ranks"; failures=$((failures + 1)); }
      fi
    done
    ;;
  spread_phase)
    strategy=$1
    # 300 frames: about 1.3e5 points, a coarse level of every 3rd row. No periodic save.
    write_config laminar_flow 4 100000 300 auto
    flags=(--config fit.yaml --strategy "$strategy" --threads 1)
    expect_exit 0 "results in" "$bin_dir/homodyne" "${flags[@]}" --output-dir single
    grep -q "screening and local fits on" <<<"$last_output" ||
      { echo "FAIL: the phase had no coarse level"; failures=$((failures + 1)); }
    for k in 2 3; do
      expect_exit 0 "results in" ranks "$k" "$bin_dir/homodyne" "${flags[@]}" --output-dir "ranks$k"
      same_results single "ranks$k"
      grep -q "candidates and local fits spread over $k ranks" <<<"$last_output" ||
        { echo "FAIL: $k ranks did not spread the coarse level"; failures=$((failures + 1)); }
    done
    rm -rf checkpoints
    # SIGTERM on rank 1 only, after 4600 batches: in the coarse local fits (a coarse pass is 14
    # batches of several rows, RowBatch::row_stride; the screening 305 passes, about half of
    # them rank 1's). Every rank stops at the end of the round.
    interrupt_rank_1_after 4600
    grep -q "global search local fit" <<<"$last_output" ||
      { echo "FAIL: not stopped in the local fits"; failures=$((failures + 1)); }
    resume_on_3_ranks_and_one_process single
    ;;
  signal_one_rank)
    strategy=$1
    # Chunks of 4 batches, no periodic save: the interruption writes the only checkpoint.
    write_config laminar_flow 4 100000
    flags=(--config fit.yaml --strategy "$strategy" --threads 1 --global-search off
           --no-variable-projection)
    expect_exit 0 "results in" "$bin_dir/homodyne" "${flags[@]}" --output-dir reference
    rm -rf checkpoints
    # SIGTERM on rank 1 only, after 30 batches: every rank stops at the same chunk boundary.
    interrupt_rank_1_after 30
    [ ! -e interrupted/nlsq/parameters.json ] ||
      { echo "FAIL: the interrupted job wrote results"; failures=$((failures + 1)); }
    # Resumed by a job of another rank count, and (from a copy) by the single process: both
    # bitwise the reference.
    resume_on_3_ranks_and_one_process reference
    ;;
  profile_intervals)
    strategy=$1
    # Profile intervals (docs/results.md, Profile intervals), no periodic save. standard: the
    # ranks spread the interval ends, each rank holding all the data; streaming: each refit's
    # passes shared in lock step. Both bitwise the single process, profiles included.
    write_config laminar_flow 100000 100000 200
    flags=(--config fit.yaml --strategy "$strategy" --threads 1 --global-search off
           --profile-intervals)
    expect_exit 0 "results in" "$bin_dir/homodyne" "${flags[@]}" --output-dir single
    grep -q '"interval_method": "profile"' single/nlsq/parameters.json ||
      { echo "FAIL: no profile intervals"; failures=$((failures + 1)); }
    total=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
      single/nlsq/convergence_metrics.json)
    # The trail of profile points (what the checkpoints keep) has as many points on any rank
    # count, resumed or not: none recorded twice.
    single_points=$(grep -Eo "profile points: [0-9]+" <<<"$last_output")
    [ -n "$single_points" ] || { echo "FAIL: no profile points line"; failures=$((failures + 1)); }
    same_points() {
      [ "$(grep -Eo "profile points: [0-9]+" <<<"$last_output")" = "$single_points" ] ||
        { echo "FAIL ($1): $(grep -Eo "profile points: [0-9]+" <<<"$last_output"), the single process $single_points"; failures=$((failures + 1)); }
    }
    expect_exit 0 "results in" "$bin_dir/homodyne" --config fit.yaml --strategy "$strategy" \
      --threads 1 --global-search off --output-dir plain
    plain=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
      plain/nlsq/convergence_metrics.json)
    for k in 2 3; do
      expect_exit 0 "results in" ranks "$k" "$bin_dir/homodyne" "${flags[@]}" --output-dir "ranks$k"
      same_results single "ranks$k"
      same_points "$k ranks"
      # Every rank counts the batches of every end (rank 0's are in the results): the single
      # process's count.
      batches=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
        "ranks$k/nlsq/convergence_metrics.json")
      [ "$batches" = "$total" ] ||
        { echo "FAIL: $k ranks counted $batches batches, the single process $total"; failures=$((failures + 1)); }
      spread=0
      grep -q "interval ends spread over $k ranks" <<<"$last_output" && spread=1
      if [ "$strategy" = streaming ] && [ "$spread" = 1 ]; then
        echo "FAIL: streaming spread the interval ends"; failures=$((failures + 1))
      elif [ "$strategy" != streaming ] && [ "$spread" = 0 ]; then
        echo "FAIL: $k ranks did not spread the interval ends"; failures=$((failures + 1))
      fi
    done
    rm -rf checkpoints
    # SIGTERM on rank 1 only, a quarter into the single process's profile batches (rank 1 counts
    # every rank's points at each round's end and its own points between: the signal comes
    # between two points of its end, standard). Every rank stops at the next agreement on a
    # signal, after its point in progress (the chunk, streaming); the resumed jobs take the saved
    # profile points from the checkpoint.
    interrupt_rank_1_after $((plain + (total - plain) / 4))
    grep -q "iteration" <<<"$last_output" && ! grep -q "results in" <<<"$last_output" ||
      { echo "FAIL: not stopped among the intervals"; failures=$((failures + 1)); }
    resume_on_3_ranks_and_one_process single
    grep -Eq "profile points: [0-9]+ \(the profile check's and intervals'\), [1-9][0-9]* of them from the checkpoint" \
      <<<"$last_output" ||
      { echo "FAIL: the resumed run took no profile point from the checkpoint"; failures=$((failures + 1)); }
    same_points "resumed by one process"
    grep -Eo "profile points: [0-9]+" <<<"$resumed3_output" >/dev/null &&
      last_output=$resumed3_output && same_points "resumed on 3 ranks"
    ;;
  check_signal)
    # The profile check of a two_component fit (docs/results.md, What the uncertainties mean; the
    # mode's default) and the intervals of what it names, refitted in lock step: SIGTERM on rank 1
    # a tenth into their batches (in the check) stops every rank with exit 3 and one checkpoint,
    # which 3 ranks and one process resume bitwise.
    write_config laminar_flow 100000 100000 150
    sed -i 's/^analysis_mode: laminar_flow/analysis_mode: two_component/
      s/^  parameter_names: .*/  parameter_names: [D0_ref, alpha_ref, D_offset_ref, D0_sample, alpha_sample, D_offset_sample, v0, v_beta, v_offset, f0, f1, f2, f3, phi0_het]/
      s/^  values: .*/  values: [1050, -0.32, 11, 21000, -0.48, 0.5, 21, 0.52, 1.1, 0.31, 0.012, 0.5, 0.21, 2.2]\n  fixed_parameters: [f2]/
      s/^  parameters: {D0: .*/  parameters: {D0_ref: 1000, alpha_ref: -0.3, D_offset_ref: 10, D0_sample: 20000, alpha_sample: -0.5, D_offset_sample: 0, v0: 20, v_beta: 0.5, v_offset: 1, f0: 0.3, f1: 0.01, f2: 0.5, f3: 0.2, phi0_het: 2}/
      /^               gamma_dot_t_offset: 0, phi0: 0}/d' fit.yaml
    "$bin_dir/homodyne-simulate" --config fit.yaml > /dev/null || { echo "FAIL: simulate"; exit 1; }
    flags=(--config fit.yaml --strategy standard --threads 1 --global-search off)
    expect_exit 0 "results in" "$bin_dir/homodyne" "${flags[@]}" --output-dir single
    grep -q "standard errors from the result" <<<"$last_output" ||
      { echo "FAIL: the profile check named no parameter"; failures=$((failures + 1)); }
    total=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
      single/nlsq/convergence_metrics.json)
    sed 's/^    max_iterations: 40$/&\n    profile_check: false/' fit.yaml > plain.yaml
    expect_exit 0 "results in" "$bin_dir/homodyne" --config plain.yaml --strategy standard \
      --threads 1 --global-search off --output-dir plain
    plain=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['batch_statistics']['batches'])" \
      plain/nlsq/convergence_metrics.json)
    [ "$total" -gt $((plain + 8)) ] ||
      { echo "FAIL: the check and its intervals took $((total - plain)) batches, too few to interrupt"; failures=$((failures + 1)); }
    rm -rf checkpoints
    interrupt_rank_1_after $((plain + (total - plain) / 10))
    grep -q "standard errors from the result" <<<"$last_output" &&
      { echo "FAIL: not stopped in the check"; failures=$((failures + 1)); }
    resume_on_3_ranks_and_one_process single
    ;;
  profile_faults)
    # The failure paths of the spread interval ends (docs/design.md section 5b), on rank 1 alone:
    # a rank that cannot hold all the data (its copy's allocation fails) makes every rank refit in
    # lock step instead, bitwise the single process; a profile fit that fails on rank 1 ends the
    # job on every rank with an error naming the rank, never a wait in a gather.
    write_config laminar_flow 100000 100000 200
    flags=(--config fit.yaml --strategy standard --threads 1 --global-search off
           --profile-intervals)
    expect_exit 0 "results in" "$bin_dir/homodyne" "${flags[@]}" --output-dir single
    fail_on_rank_1() {
      ranks 2 bash -c '
        [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" = 1 ] &&
          export HOMODYNE_TEST_FAIL_ALLOCATION="$0"
        exec "$@"' "$@"
    }
    expect_exit 0 "MPI rank 1 could not hold all the data: the interval ends are computed by all the ranks together" \
      fail_on_rank_1 whole_data "$faults_program" "${flags[@]}" --output-dir lockstep
    grep -q "interval ends spread over" <<<"$last_output" &&
      { echo "FAIL: the ends were spread without rank 1's copy"; failures=$((failures + 1)); }
    same_results single lockstep
    start=$(date +%s)
    expect_exit 1 "a profile fit failed on MPI rank 1" \
      fail_on_rank_1 profile_fit "$faults_program" "${flags[@]}" --output-dir failed
    echo "ok: the job with a failed profile fit ended after $(( $(date +%s) - start )) s"
    [ ! -e failed/nlsq/parameters.json ] ||
      { echo "FAIL: the failed job wrote results"; failures=$((failures + 1)); }
    ;;
  rank_killed)
    write_config laminar_flow 100000
    flags=(--config fit.yaml --strategy streaming --threads 1 --global-search off
           --no-variable-projection)
    start=$(date +%s)
    signal_rank_1 30:9 "$faults_program" "${flags[@]}" --output-dir killed > killed.log 2>&1
    code=$?
    seconds=$(( $(date +%s) - start ))
    if [ "$code" -eq 0 ] || [ "$code" -eq 124 ]; then
      echo "FAIL: a job with a killed rank exited $code after $seconds s"; cat killed.log
      failures=$((failures + 1))
    else
      echo "ok: a job with a killed rank ended with exit $code after $seconds s"
    fi
    ;;
  unreadable_rows)
    write_config laminar_flow 100000
    flags=(--config fit.yaml --strategy streaming --threads 1 --global-search off)
    # Batch 6 lies in rank 1's share of the first chunk (batches 0 to 7, 2 ranks): only rank 1
    # fails to read it.
    expect_exit 1 "\[rank 1\] homodyne: error: .*batch 6" ranks 2 bash -c '
      [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" = 1 ] &&
        export HOMODYNE_TEST_FAIL_READ_AT_BATCH=6
      exec "$@"' rank "$faults_program" "${flags[@]}" --output-dir unreadable
    ;;
  bad_input)
    write_config laminar_flow 100000
    sed -i 's/max_iterations: 40/max_iterations: -3/' fit.yaml
    expect_exit 1 "max_iterations" ranks 2 "$bin_dir/homodyne" --config fit.yaml --output-dir bad
    count=$(grep -c "homodyne: error" <<<"$last_output")
    [ "$count" -eq 1 ] || { echo "FAIL: the error was reported $count times"; failures=$((failures + 1)); }
    ;;
  *)
    echo "FAIL: unknown case $case_name"; exit 1 ;;
esac

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
