#!/usr/bin/env bash
# The signal / checkpoint / requeue / resume cycle of a SLURM script against a real SLURM:
# installs Debian's slurm-wlm and munge when missing, starts munged, slurmctld and slurmd for a
# single localhost node (everything under a temporary folder, own ports, own munge socket),
# submits the script on a simulated laminar-flow data set with a time limit too short for the fit,
# lets SLURM send SIGUSR1 before the limit and the script requeue the job, and asserts that the job
# was requeued at least once, resumed from a checkpoint, and ended with bitwise the parameters of
# an uninterrupted single-process run. A machine that cannot run the daemons fails the test with
# the reason.
# Usage: slurm_requeue_test.sh BIN_DIR FAULTS_PROGRAM [cpu|mpi]
#   BIN_DIR         the folder holding homodyne and homodyne-simulate
#   FAULTS_PROGRAM  the test build homodyne_with_faults (tests/cli/homodyne_with_faults.cc): the
#                   job runs it with HOMODYNE_TEST_BATCH_DELAY_MS, so that every batch takes a
#                   fixed time longer and the fit outlasts SLURM's signal however fast the machine
#                   computes (results are unchanged; the reference is the production homodyne)
#   cpu (default)   slurm/homodyne_cpu.sbatch, one task (node-local scratch, checkpoint store)
#   mpi             slurm/homodyne_mpi.sbatch, one node, 2 MPI ranks started by srun's pmix (or
#                   pmi2) plugin; for a build with MPI (tests/CMakeLists.txt skips it otherwise)
# Needs root or passwordless sudo (apt-get, the daemons). Environment overrides:
#   HOMODYNE_SLURM_TEST_BATCH_DELAY_MS  milliseconds added to each batch (default 250): with 324
#                                 batches the fit lasts over 80 s, more than the 10-40 s of a
#                                 1-minute time limit before SLURM sends SIGUSR1
#   HOMODYNE_SLURM_TEST_TIMEOUT   seconds to wait for the job (default 900)
#   HOMODYNE_SLURM_TEST_KEEP=1    keep the temporary folder (logs, results) afterwards
set -uo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ] || [ ! -d "$1" ] || [ ! -x "$2" ] ||
  { [ $# -eq 3 ] && [ "$3" != cpu ] && [ "$3" != mpi ]; }; then
  echo "usage: $0 BIN_DIR FAULTS_PROGRAM [cpu|mpi]" >&2
  exit 2
fi
bin_dir=$(cd "$1" && pwd)
faults_program=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
variant=${3:-cpu}
repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../cli/test_lib.sh
source "$repo/tests/cli/test_lib.sh"
script=$repo/slurm/homodyne_${variant}.sbatch
script_name=homodyne_${variant}.sbatch
batch_delay_ms=${HOMODYNE_SLURM_TEST_BATCH_DELAY_MS:-250}
timeout_s=${HOMODYNE_SLURM_TEST_TIMEOUT:-900}

fail() { echo "FAIL: $*"; exit 1; }
for program in homodyne homodyne-simulate; do
  [ -x "$bin_dir/$program" ] || fail "$bin_dir/$program not found (build first)"
done
[ -f "$script" ] || fail "$script not found"

# --- privileges and packages --------------------------------------------------------------------
as_root=()
if [ "$(id -u)" -ne 0 ]; then
  sudo -n true 2>/dev/null ||
    fail "this test starts slurmctld, slurmd and munged as root: run it as root or with" \
      "passwordless sudo"
  as_root=(sudo -n)
fi
missing=()
for package in slurm-wlm munge; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get > /dev/null || fail "${missing[*]} missing and no apt-get to install them"
  echo "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  { "${as_root[@]}" apt-get update -qq &&
    "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"; } > /dev/null ||
    fail "apt-get install ${missing[*]} failed"
fi
for program in slurmctld slurmd munged sbatch scontrol sinfo squeue scancel; do
  command -v "$program" > /dev/null || [ -x "/usr/sbin/$program" ] ||
    fail "$program not found after installing slurm-wlm and munge"
done
export PATH=$PATH:/usr/sbin

# --- a private single-node cluster under a temporary folder -------------------------------------
top=$(mktemp -d /tmp/homodyne_slurm_test.XXXXXX)
chmod 755 "$top"
mkdir -p "$top/munge" "$top/state" "$top/spool" "$top/log" "$top/work" "$top/scratch"
chmod 755 "$top/munge"
export SLURM_CONF=$top/slurm.conf
daemon_pids=()
daemon_names=()
job_id=""
reference_pid=""
cleanup() {
  [ -n "$reference_pid" ] && kill "$reference_pid" 2>/dev/null
  [ -n "$job_id" ] && scancel "$job_id" 2>/dev/null && sleep 2
  local pid
  for pid in "${daemon_pids[@]}"; do "${as_root[@]}" kill "$pid" 2>/dev/null; done
  for pid in "${daemon_pids[@]}"; do
    for _ in $(seq 1 50); do "${as_root[@]}" kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    "${as_root[@]}" kill -9 "$pid" 2>/dev/null
  done
  if [ "${HOMODYNE_SLURM_TEST_KEEP:-0}" = 1 ]; then echo "kept $top"; else "${as_root[@]}" rm -rf "$top"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# show_logs LINES [NAME...]: the last LINES lines of the daemons' logs (of NAMEs only, if given)
# and of the job's log.
show_logs() {
  local lines=$1 file
  shift
  local files=("$top"/log/*.log "$top"/work/job.log)
  [ $# -gt 0 ] && files=("${@/#/$top/log/}")
  for file in "${files[@]}"; do
    [ -f "$file" ] || continue
    echo "----- last lines of $file"
    tail -n "$lines" "$file"
  done
}
fail() { echo "FAIL: $*"; show_logs 25; echo "FAIL: $*"; exit 1; }
# start_daemon NAME COMMAND...: runs COMMAND in the background as root, output in log/NAME.out.log.
start_daemon() {
  local name=$1
  shift
  "${as_root[@]}" "$@" > "$top/log/$name.out.log" 2>&1 &
  daemon_pids+=($!)
  daemon_names+=("$name")
}
# check_daemons: fails, with the reason from its logs, if a daemon has exited.
check_daemons() {
  local k status
  for k in "${!daemon_pids[@]}"; do
    kill -0 "${daemon_pids[k]}" 2>/dev/null && continue
    wait "${daemon_pids[k]}"
    status=$?
    echo "FAIL: ${daemon_names[k]} exited (status $status): this machine cannot run it. Its log:"
    show_logs 40 "${daemon_names[k]}.out.log" "${daemon_names[k]}.log"
    echo "FAIL: ${daemon_names[k]} exited (status $status) on this machine; see its log above"
    exit 1
  done
}

if command -v mungekey > /dev/null || [ -x /usr/sbin/mungekey ]; then
  "${as_root[@]}" mungekey --create --keyfile="$top/munge/munge.key" || fail "mungekey failed"
else
  "${as_root[@]}" dd if=/dev/urandom of="$top/munge/munge.key" bs=1024 count=1 status=none
fi
"${as_root[@]}" chmod 600 "$top/munge/munge.key"
start_daemon munged munged --foreground --force --key-file="$top/munge/munge.key" \
  --socket="$top/munge/munge.socket" --pid-file="$top/munge/munged.pid" \
  --seed-file="$top/munge/munged.seed" --log-file="$top/log/munged.log"
for _ in $(seq 1 50); do [ -S "$top/munge/munge.socket" ] && break; sleep 0.1; done
check_daemons
munge -S "$top/munge/munge.socket" -n 2>/dev/null | unmunge -S "$top/munge/munge.socket" > /dev/null ||
  fail "munged does not work (see its log)"

# Two free TCP ports for slurmctld and slurmd, so that a SLURM already on this machine is untouched.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
sockets = [socket.socket() for _ in range(2)]
for s in sockets: s.bind(("", 0))
print(*(s.getsockname()[1] for s in sockets))')
host=$(hostname -s)
# The node exactly as slurmd sees it (CPUs, sockets, cores, threads, RealMemory).
node_line=$(slurmd -C 2>/dev/null | grep '^NodeName=') || fail "slurmd -C failed"
[ "${node_line#NodeName="$host" }" != "$node_line" ] ||
  fail "slurmd -C names the node differently from hostname -s ($host): $node_line"
cat > "$SLURM_CONF" <<EOF
ClusterName=homodynetest
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$top/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$top/state
SlurmdSpoolDir=$top/spool
SlurmctldPidFile=$top/slurmctld.pid
SlurmdPidFile=$top/slurmd.pid
SlurmctldLogFile=$top/log/slurmctld.log
SlurmdLogFile=$top/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=30
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$top/log/jobcomp.txt
$node_line State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
start_daemon slurmctld env SLURM_CONF="$SLURM_CONF" slurmctld -D -i -f "$SLURM_CONF"
start_daemon slurmd env SLURM_CONF="$SLURM_CONF" slurmd -D -f "$SLURM_CONF"
state=""
for _ in $(seq 1 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  check_daemons
  sleep 1
done
[ "$state" = idle ] || fail "the node is '$state', not idle, 60 s after starting slurmctld and slurmd"
echo "ok: slurmctld and slurmd run; node $host is idle"
[ "$(timeout 60 srun -N1 -n1 -t 1 hostname 2>&1)" = "$host" ] || fail "srun hostname failed"
echo "ok: srun hostname"

# --- the data set and the uninterrupted reference ----------------------------------------------
cd "$top/work" || fail "cannot enter $top/work"
# 1.5 million points in batches of 250000, LZF-compressed so that every streaming pass
# decompresses them again; the tolerances are out of reach, so the fit runs until the LM core can
# make no step (53 iterations, 324 batches: 8 s of computing on one core, over 80 s with the job's
# batch delay), deterministic, with a checkpoint every 10 batches. The global phase is off (its
# many small batches would make the per-batch delay uneven; faults.*.global_sigterm covers its
# resume).
cat > fit.yaml <<YAML
analysis_mode: laminar_flow
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
  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
  values: [1300, -0.4, 12, 0.00025, 0.1, 0, 1]
optimization:
  nlsq: {max_iterations: 120, tolerance: 1.0e-300, xtol: 1.0e-300, gtol: 1.0e-300}
  streaming:
    batch_size: 250000
    checkpoint_frequency: 10
    keep_last_checkpoints: 3
simulation:
  output: ./sim.h5
  format: aps_u
  frames: 1000
  phi_angles: [0, 45, 90]
  parameters: {D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.0002, beta: 0,
               gamma_dot_t_offset: 0, phi0: 0}
  contrast: [0.3, 0.28, 0.25]
  offset: 1.0
  noise_sigma: 0.01
  seed: 7
  dtype: float32
  compression: lzf
YAML
"$bin_dir/homodyne-simulate" --config fit.yaml > simulate.log 2>&1 || fail "homodyne-simulate: $(cat simulate.log)"
# The cpu job gets 1 CPU and 2000 MB: --threads 1 and --memory-limit-gb 0.8 * 2000 / 1024 = 1.56.
# The mpi job gets 2 ranks of 1 CPU each on the node, sharing the 2000 MB.
# The reference (one process, the production homodyne) runs with the same arguments, at the same
# time as the job: the results are bitwise the same for any rank count (docs/design.md section 5b).
job_args=(--strategy streaming --global-search off)
reference_start=$SECONDS
(
  "$bin_dir/homodyne" --config fit.yaml --threads 1 --memory-limit-gb 1.56 "${job_args[@]}" \
    --output-dir reference --checkpoint-dir reference_checkpoints > reference.log 2>&1
  echo "$? $((SECONDS - reference_start))" > reference.status
) &
reference_pid=$!

# --- the job: 1-minute limit, SIGUSR1 50 s before it (overrides the script's #SBATCH lines) ------
# The script's settings travel in the environment (sbatch exports it). cpu: SCRATCH_DIR stands for
# node-local scratch, the checkpoint store is the default one under the submit folder. mpi: the
# checkpoint folder is the default one under the submit folder, shared by the ranks; srun starts
# the ranks with the pmix plugin (pmi2 where pmix is missing).
job_shape=(--ntasks=1 --cpus-per-task=1)
if [ "$variant" = mpi ]; then
  plugins=$(srun --mpi=list 2>&1)
  srun_mpi=""
  for plugin in pmix pmi2; do
    grep -qw "$plugin" <<<"$plugins" && { srun_mpi=$plugin; break; }
  done
  [ -n "$srun_mpi" ] || fail "srun offers neither pmix nor pmi2 to start MPI ranks: $plugins"
  echo "ok: srun starts MPI ranks with --mpi=$srun_mpi"
  job_shape=(--nodes=1 --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1)
fi
job_id=$(CONFIG=fit.yaml HOMODYNE="$faults_program" OUTPUT_DIR="$top/work/results" \
  SCRATCH_DIR="$top/scratch" CHECKPOINT_SYNC_SECONDS=5 SRUN_MPI="${srun_mpi:-}" \
  HOMODYNE_TEST_BATCH_DELAY_MS="$batch_delay_ms" \
  sbatch --parsable --export=ALL --job-name=homodyne_requeue_test --time=0:01:00 \
  --signal=B:USR1@50 "${job_shape[@]}" --mem=2000 --output="$top/work/job.log" \
  "$script" "${job_args[@]}") || fail "sbatch failed"
echo "submitted job $job_id"
job_field() { scontrol show job "$job_id" 2>/dev/null | grep -o "\b$1=[^ ]*" | head -1 | cut -d= -f2; }
final=""
last=""
held_since=""
misses=0
deadline=$((SECONDS + timeout_s))
while [ $SECONDS -lt $deadline ]; do
  state=$(job_field JobState)
  reason=$(job_field Reason)
  if [ "$state $reason" != "$last" ]; then
    echo "  $((SECONDS - reference_start)) s: job $job_id $state ($reason), restarts $(job_field Restarts)"
    last="$state $reason"
  fi
  case $state in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
      final=$state; break ;;
    PENDING)
      # SLURM holds a requeued job for about two minutes; release it sooner to keep the test short,
      # but not at once: a start released while slurmd still tears down the previous one fails
      # ("Job N already killed, do not launch batch job") and the job ends FAILED.
      if [ "$reason" = BeginTime ]; then
        [ -n "$held_since" ] || held_since=$SECONDS
        if [ $((SECONDS - held_since)) -ge 10 ]; then
          scontrol update JobId="$job_id" StartTime=now 2>/dev/null
          held_since=""
        fi
      fi ;;
    "")
      misses=$((misses + 1))
      [ "$misses" -lt 10 ] || fail "slurmctld no longer answers for job $job_id" ;;
  esac
  [ -n "$state" ] && misses=0
  sleep 2
done
[ -n "$final" ] || fail "job $job_id not finished after $timeout_s s (state $(job_field JobState))"
wait "$reference_pid"
reference_pid=""
read -r reference_code reference_seconds < reference.status || reference_code=unknown
restarts=$(job_field Restarts)
exit_code=$(job_field ExitCode)
job_id_done=$job_id
job_id=""

# --- checks ---------------------------------------------------------------------------------------
failures=0
check() {  # check DESCRIPTION COMMAND...
  local description=$1
  shift
  if "$@"; then echo "ok: $description"; else echo "FAIL: $description"; failures=$((failures + 1)); fi
}
echo "----- job log (without homodyne's iteration lines)"
grep -v '^\[info\] iteration' job.log
echo "-----"
[ "$reference_code" = 0 ] || { tail -n 20 reference.log; fail "the reference fit exited $reference_code"; }
echo "the uninterrupted reference fit took $reference_seconds s"
check "job $job_id_done COMPLETED with exit code 0:0 (was $final, $exit_code)" \
  test "$final $exit_code" = "COMPLETED 0:0"
if [ "${restarts:-0}" -eq 0 ] && ! grep -q "received SIGUSR1" job.log; then
  fail "the fit finished before SLURM's SIGUSR1 (the reference took $reference_seconds s);" \
    "raise HOMODYNE_SLURM_TEST_BATCH_DELAY_MS (now $batch_delay_ms) so that the fit needs over a minute"
fi
check "SLURM sent SIGUSR1 and the script forwarded it" grep -q "received SIGUSR1, forwarding it" job.log
check "homodyne saved a checkpoint and exited 3" grep -q "homodyne exited with code 3" job.log
check "the job requeued itself (SLURM Restarts=$restarts)" test "${restarts:-0}" -ge 1
check "each start is logged ($(grep -c "$script_name.*: start [0-9]* of job" job.log) starts)" \
  test "$(grep -c "$script_name.*: start [0-9]* of job" job.log)" -eq $((restarts + 1))
if [ "$variant" = cpu ]; then
  check "the checkpoints went through the persistent store" \
    grep -q "copied [0-9]* checkpoint(s) from $top/work/checkpoints/$job_id_done" job.log
  check "scratch folder removed" test ! -e "$top/scratch/homodyne_$job_id_done"
else
  # One "resumed" line per resumed start: rank 0 alone logs (docs/design.md section 5b).
  check "srun started 2 ranks" grep -q "running: srun --mpi=$srun_mpi" job.log
  check "one resume line per requeue (rank 0 alone logs)" \
    test "$(grep -c "resumed from the checkpoint" job.log)" -eq "${restarts:-0}"
fi
check "homodyne resumed from a checkpoint" grep -q "resumed from the checkpoint" job.log
check "the last start finished the fit" grep -q "homodyne exited with code 0" job.log
check "results written to OUTPUT_DIR" test -s results/nlsq/parameters.json
check "checkpoints removed after success" test ! -e "checkpoints/$job_id_done"
# The requeued job's parameters are bitwise those of the uninterrupted run.
same_results reference results
if [ "$failures" -ne 0 ]; then show_logs 25; echo "slurm requeue: $failures check(s) failed"; exit 1; fi
echo "slurm requeue: all checks passed ($restarts requeue(s))"
