# shellcheck shell=bash
# The body of train.sbatch and train_cpu.sbatch (sourced by them; see jobscripts/README.md).
#
# Design:
#  - One stable run directory per run name, whatever the job id: checkpoints in
#    RUN_DIR/checkpoints (so that `--resume auto` finds them after a requeue or in the
#    next job of a chain), and per job attempt a log (RUN_DIR/logs/JOBID[.rN].log) and a
#    timing report (RUN_DIR/reports/JOBID[.rN]/), N being SLURM_RESTART_COUNT.
#  - A job whose target step is already checkpointed does nothing and exits 0.
#  - The launcher (srun --mpi=pmix, or mpirun) runs in the background and the shell waits
#    for it: bash runs a trap only between commands, and `wait` is the one command a trap
#    interrupts. `--signal=B:USR1@T` (and `scancel --batch --signal=USR1`) reach only this
#    shell; its trap sends SIGUSR1 to the launcher, which forwards it to every rank
#    (srun and mpirun both do), so all ranks finish the step, checkpoint and exit 0. A
#    SIGTERM to the shell (scancel, preemption) is forwarded the same way. flexsp notes
#    the signals from the first line of main (it then stops after its first step), but a
#    rank not yet there (srun still starting it) would die of one, so a signal that comes
#    before the log shows the first step is held back until it does.
#  - After a stop on SIGUSR1 (the time-limit warning) or train.max_minutes short of the
#    target, the job requeues itself (`scontrol requeue`: same job id; FLEXSP_REQUEUE=1,
#    needs --requeue) if this attempt made progress; the next attempt resumes. Preemption
#    with PreemptMode=REQUEUE needs nothing from us: the ranks get SIGTERM, checkpoint,
#    and Slurm requeues the job.
#  - The output goes to the job's output file and the log through a `tee` that ignores
#    SIGTERM, so that the launcher never dies of a broken pipe while the ranks write their
#    checkpoint after a cancel.

job_say() { echo "flexsp job: $*"; }
job_die() { echo "flexsp job: error: $*" >&2; exit 1; }

# job_latest_step CKPT_DIR: the step of the checkpoint `latest` names (0: none).
job_latest_step() {
  local name
  name=$(cat "$1/latest" 2>/dev/null) || { echo 0; return; }
  [[ $name =~ ^step_0*([0-9]+)\.h5$ ]] || job_die "$1/latest names '$name', not a checkpoint"
  echo "${BASH_REMATCH[1]}"
}

# job_target_steps ARGS...: train.steps from FLEXSP_STEPS, else the arguments, else the
# [train] section of the --config file; empty when none of them says.
job_target_steps() {
  local steps=${FLEXSP_STEPS:-} config=${FLEXSP_CONFIG:-} prev=""
  local a
  for a in "$@"; do
    case $a in
      --train.steps=*) [[ -n ${FLEXSP_STEPS:-} ]] || steps=${a#*=} ;;
      --config=*) config=${a#*=} ;;
    esac
    [[ $prev == --train.steps && -z ${FLEXSP_STEPS:-} ]] && steps=$a
    [[ $prev == --config ]] && config=$a
    prev=$a
  done
  if [[ -z $steps && -n $config && -f $config ]]; then
    steps=$(awk -F= '/^[[:space:]]*\[/ { sec = $0; gsub(/[][[:space:]]/, "", sec) }
                     sec == "train" && $1 ~ /^[[:space:]]*steps[[:space:]]*$/ {
                       v = $2; sub(/[;#].*/, "", v); gsub(/[[:space:]]/, "", v); s = v }
                     END { print s }' "$config")
  fi
  [[ -z $steps || $steps =~ ^[0-9]+$ ]] || job_die "train.steps must be a number, got '$steps'"
  echo "$steps"
}

# The launcher command for this allocation (one rank per task, node by node).
job_launcher() {
  case ${FLEXSP_LAUNCHER:-srun} in
    srun)
      launcher=(srun --mpi=pmix --kill-on-bad-exit=1 --distribution=block)
      # Slurm's PMIx fence without data (the barrier that ends Open MPI's MPI_Init) takes
      # the tree algorithm by default, which releases a node before the others have
      # arrived: a rank then sends to one still inside MPI_Init, and over TCP that rank
      # dies at start-up (about 1 start in 20 on the test cluster, docs/cluster.md). The
      # ring, which Slurm already takes for the modex, is a barrier.
      export SLURM_PMIX_FENCE=${SLURM_PMIX_FENCE:-ring}
      # Since Slurm 22.05 srun does not inherit --cpus-per-task from the job.
      [[ -z ${SLURM_CPUS_PER_TASK:-} ]] || launcher+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
      # shellcheck disable=SC2206  # extra options, split on blanks on purpose
      launcher+=(${FLEXSP_SRUN_ARGS:-})
      ;;
    mpirun)
      launcher=(mpirun -np "${SLURM_NTASKS:?SLURM_NTASKS is not set: request tasks (-n or --ntasks-per-node)}")
      # shellcheck disable=SC2206
      launcher+=(${FLEXSP_MPIRUN_ARGS:-})
      ;;
    *) job_die "FLEXSP_LAUNCHER must be srun or mpirun, got '${FLEXSP_LAUNCHER}'" ;;
  esac
}

job_stop_signal=""   # the signal the shell got (USR1 or TERM); empty: none
job_traps=0          # how many times a trap ran
job_pid=""           # the launcher's pid while it runs
job_forwarded=""     # set once the stop request went (or is on its way) to the launcher
job_log=""

job_started() { grep -qE '^step [0-9]+/' "$job_log" 2>/dev/null; }

# job_forward: sends the stop request to the launcher as SIGUSR1, once, and only once
# training runs (before that, a helper waits for the first step line in the log).
job_forward() {
  [[ -n $job_pid && -z $job_forwarded ]] || return 0
  job_forwarded=1
  if job_started; then
    kill -USR1 "$job_pid" 2>/dev/null || true
    return 0
  fi
  job_say "training has not started yet: the signal waits for the first step"
  (
    trap '' TERM USR1
    while kill -0 "$job_pid" 2>/dev/null; do
      if job_started; then kill -USR1 "$job_pid" 2>/dev/null; exit 0; fi
      sleep 0.1
    done
  ) &
}

# Trap handler of SIGUSR1 and SIGTERM.
job_on_signal() {
  job_traps=$((job_traps + 1))
  [[ -n $job_stop_signal ]] && return 0
  job_stop_signal=$1
  job_say "SIG$1 received at $(date +%T): asking every rank to checkpoint and stop"
  [[ $1 != TERM ]] || job_node_failed
  job_forward
}

# job_node_failed: when Slurm ends the job because one of its nodes failed, says so: the
# ranks on the other nodes wait in a collective for the dead ones and cannot finish their
# step, so no checkpoint comes; the last complete one stands (a chain's next job resumes
# from it). Slurm's own line is "*** JOB N ON host CANCELLED ... DUE TO NODE FAILURE ***".
# With a number of seconds (the launcher failed): MPI may crash on the surviving nodes before
# Slurm notices a dead one, so the job's nodes are asked about for that long.
job_node_failed() {
  local state="" down="" wait_s=${1:-0} t0=$SECONDS
  [[ -n ${SLURM_JOB_ID:-} ]] || return 0
  while :; do
    state=$(timeout 5 scontrol show job "$SLURM_JOB_ID" 2>/dev/null | grep -oE 'JobState=[A-Z_]+ Reason=[^ ]+' | head -1) || true
    [[ $state == *NODE_FAIL* || $state == *NodeDown* ]] && break
    down=$(timeout 5 sinfo -h -N -n "${SLURM_JOB_NODELIST:-}" -t down,no_respond,fail -o %N 2>/dev/null | sort -u | paste -sd, -) || true
    [[ -n $down ]] && { state="node(s) $down not responding"; break; }
    ((SECONDS - t0 < wait_s)) || return 0
    sleep 2
  done
  job_say "a node of this job failed ($state): the job ends without a new checkpoint; the latest complete one stands"
}

# job_environment KIND: the defaults of the GPU or CPU job.
job_environment() {
  [[ -z ${SLURM_CPUS_PER_TASK:-} ]] || export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
  if [[ $1 == gpu ]]; then
    # Every rank sees all of its node's GPUs, whatever the site's default binding.
    export FLEXSP_SRUN_ARGS=${FLEXSP_SRUN_ARGS---gpu-bind=none}
    return
  fi
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  # More ranks than cores on this node (e.g. with --overcommit): idle ranks must yield the
  # core, or they spin in MPI and a step takes 10x longer (mpirun does this by itself).
  local tasks_here=${SLURM_TASKS_PER_NODE:-1}
  if ((${tasks_here%%[^0-9]*} > $(nproc))); then
    export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
  fi
}

# job_main KIND ARGS...: the whole job (KIND: gpu or cpu).
job_main() {
  local kind=$1; shift
  [[ -n ${SLURM_JOB_ID:-} ]] || job_die "not inside a Slurm job: submit with sbatch (or run inside salloc)"
  trap 'job_on_signal USR1' USR1
  trap 'job_on_signal TERM' TERM
  local a
  for a in "$@"; do
    case $a in
      --checkpoint.dir*|--report.dir*|--resume*)
        job_die "$a: the job sets it; use FLEXSP_CHECKPOINT_DIR / FLEXSP_REPORT_DIR instead" ;;
      --train.steps*)
        [[ -z ${FLEXSP_STEPS:-} ]] || job_die "$a and FLEXSP_STEPS=$FLEXSP_STEPS: give the target step once" ;;
    esac
  done
  # shellcheck source=/dev/null
  source "$FLEXSP_HOME/scripts/env.sh"
  job_environment "$kind"
  local bin=${FLEXSP_BIN:-$FLEXSP_HOME/build/flexsp}
  [[ -x $bin ]] || job_die "flexsp binary '$bin' not found: build it (scripts/build.sh) or set FLEXSP_BIN"

  local restarts=${SLURM_RESTART_COUNT:-0} attempt=$SLURM_JOB_ID
  ((restarts == 0)) || attempt+=".r$restarts"
  local run_dir=${FLEXSP_RUN_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/runs/${SLURM_JOB_NAME:-flexsp}}
  local ckpt=${FLEXSP_CHECKPOINT_DIR:-$run_dir/checkpoints}
  local report=${FLEXSP_REPORT_DIR:-$run_dir/reports/$attempt}
  job_log=$run_dir/logs/$attempt.log
  mkdir -p "$run_dir/logs" || job_die "cannot create $run_dir/logs"

  local target latest=0
  target=$(job_target_steps "$@")
  [[ $ckpt == none ]] || latest=$(job_latest_step "$ckpt")
  if [[ -n $target ]] && ((latest >= target)); then
    job_say "the target step $target is already checkpointed in $ckpt (latest: step $latest): nothing to do"
    return 0
  fi

  local cmd=("$bin" train)
  [[ -z ${FLEXSP_CONFIG:-} ]] || cmd+=(--config "$FLEXSP_CONFIG")
  cmd+=("$@")
  [[ -z ${FLEXSP_STEPS:-} ]] || cmd+=(--train.steps="$FLEXSP_STEPS")
  [[ $ckpt == none ]] || cmd+=(--checkpoint.dir="$ckpt" --resume auto)
  [[ $report == none ]] || cmd+=(--report.dir="$report")
  local launcher
  job_launcher

  job_say "job $SLURM_JOB_ID (restart $restarts, $kind): ${SLURM_JOB_NUM_NODES:-1} node(s), ${SLURM_NTASKS:-?} ranks, launcher ${FLEXSP_LAUNCHER:-srun}"
  job_say "run dir $run_dir; checkpoints $ckpt (latest: step $latest); target step ${target:-(from flexsp)}"
  job_say "log $job_log; report ${report}"
  job_say "${launcher[*]} ${cmd[*]}"

  if [[ -n $job_stop_signal ]]; then  # a signal before the launch: do not start at all
    job_say "stopped before the launch"
    return 0
  fi
  local rc tee_pid
  exec 3> >(trap '' TERM USR1; exec tee -a "$job_log")
  tee_pid=$!
  "${launcher[@]}" "${cmd[@]}" >&3 2>&1 3>&- &
  job_pid=$!
  exec 3>&-  # tee ends when the launcher does
  [[ -z $job_stop_signal ]] || job_forward  # a signal came during the launch
  while :; do
    local traps=$job_traps
    rc=0
    wait "$job_pid" || rc=$?
    # A trap interrupted the wait (bash keeps the launcher's status for the next one).
    ((rc > 128 && job_traps != traps)) || break
  done
  job_pid=""
  wait "$tee_pid" || true
  if ((rc != 0)); then
    [[ -n $job_stop_signal ]] || job_node_failed "${FLEXSP_NODE_CHECK_S:-30}"
    job_die "the launcher exited with status $rc (see $job_log)"
  fi

  local last stop now=$latest
  last=$(grep -oE '^step [0-9]+' "$job_log" | tail -n 1 || true)
  [[ $ckpt == none ]] || now=$(job_latest_step "$ckpt")
  stop=$(sed -nE 's/^stopping after step [0-9]+ \(([^)]*)\).*/\1/p' "$job_log")
  if [[ -z $stop ]]; then
    job_say "finished at ${last:-step $now}"
    return 0
  fi
  job_say "stopped after ${last:-step ?} ($stop); latest checkpoint: step $now"
  # Requeue after a time-limit stop (SIGUSR1 or train.max_minutes), never after SIGTERM.
  [[ $stop != SIGTERM && $job_stop_signal != TERM && ${FLEXSP_REQUEUE:-1} == 1 && $ckpt != none ]] || return 0
  if ((now <= latest)); then
    job_say "no progress in this attempt (step $latest before and after): not requeueing"
  elif ((restarts >= ${FLEXSP_MAX_RESTARTS:-50})); then
    job_say "restarted $restarts times already (FLEXSP_MAX_RESTARTS): not requeueing"
  else
    job_say "requeueing job $SLURM_JOB_ID to continue from step $now"
    scontrol requeue "$SLURM_JOB_ID" || job_die "scontrol requeue failed (was the job submitted with --requeue?)"
  fi
}
