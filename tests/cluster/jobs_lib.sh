# shellcheck shell=bash
# Helpers of the tests that submit jobs to a test cluster (sourced after tests/e2e/lib.sh,
# which gives fail and $work): the two-process frame that bounds the checks and always
# stops the cluster, and what the checks ask Slurm.
#
# slurm_test_frame CLUSTER_SCRIPT BOUND START_ARGS... -- "$@": in the first process (no
# --checks argument) it skips (exit 77, one SKIP line) where the cluster cannot run,
# starts the cluster in a fresh directory with a lifetime of BOUND + 60 s, runs this same
# script with --checks under `timeout BOUND` (the cluster's directory in
# FLEXSP_SLURM_CLUSTER_DIR, the working directory $work), stops the cluster on every exit
# and exits with the checks' status. In the second process it returns, and the checks run.
# CLUSTER_SCRIPT is tests/e2e/slurm_cluster.sh (one node, the machine) or
# tests/cluster/cluster.sh (nodes in namespaces; START_ARGS are its start options).
slurm_test_frame() {
  local script=$1 bound=$2; shift 2
  local start=()
  while (($#)) && [[ $1 != -- ]]; do start+=("$1"); shift; done
  shift
  if [[ ${1:-} == --checks ]]; then
    cluster=$FLEXSP_SLURM_CLUSTER_DIR
    source "$cluster/env"  # SLURM_CONF
    cd "$work"
    # On failure: the Slurm outputs and the daemons' logs say why.
    trap 'rc=$?; if ((rc != 0)); then
            for f in "$work"/*.out "$work"/runs/*/slurm-*.out "$work"/runs/*/*/slurm-*.out "$cluster"/log/slurm*.log; do
              [[ -f $f ]] && { echo "---- $f"; tail -n 40 "$f"; }
            done >&2
          fi; rm -rf "$work"' EXIT
    trap 'exit 124' TERM  # from timeout: show the logs on the way out
    return 0
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "SKIP: the test's Slurm runs its daemons as root; run the tests as root for it"
    exit 77
  fi
  if [[ $script == */cluster.sh ]]; then
    bash "$script" check | grep '^SKIP' && exit 77
  fi
  local tool
  for tool in slurmctld slurmd sbatch munged mungekey; do
    if ! command -v "$tool" >/dev/null; then
      echo "SKIP: $tool not found: install slurm-wlm and munge (scripts/setup.sh --tests) to test the jobscripts"
      exit 77
    fi
  done
  # A short path: munge's socket path must fit in a sockaddr_un (108 bytes).
  cluster=$(mktemp -d /tmp/flexsp-slurm.XXXXXX)
  trap 'bash "$script" stop "$cluster" || true; rm -rf "$cluster" "$work"' EXIT
  if [[ $script == */cluster.sh ]]; then
    bash "$script" start "$cluster" "${start[@]}" --lifetime $((bound + 60))
  else
    bash "$script" start "$cluster" $((bound + 60))
  fi
  local rc=0 self
  self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
  (cd "$work" && FLEXSP_SLURM_CLUSTER_DIR=$cluster timeout -k 15 "$bound" bash "$self" --checks) || rc=$?
  ((rc != 124 && rc != 137)) || echo "FAIL: the Slurm checks took longer than ${bound}s" >&2
  exit "$rc"
}

# wait_for SECS what cmd...: polls cmd every 0.5 s.
wait_for() {
  local secs=$1 what=$2 i; shift 2
  for ((i = 0; i < secs * 2; ++i)); do "$@" && return 0; sleep 0.5; done
  fail "timed out after ${secs}s waiting for $what"
}
job_field() { scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
job_gone() { [[ -z $(squeue -h -j "$1" 2>/dev/null) ]]; }
job_is() { [[ $(job_field "$1" JobState) == "$2" ]]; }
has_line() { grep -qE "$1" "$2" 2>/dev/null; }
# ended ID STATE [SECS]: the job has left the queue (within SECS, default 120) in STATE,
# with exit code 0.
ended() {
  wait_for "${3:-120}" "job $1 to end" job_gone "$1"
  [[ $(job_field "$1" JobState) == "$2" ]] || fail "job $1 ended $(job_field "$1" JobState), expected $2"
  [[ $2 == CANCELLED || $(job_field "$1" ExitCode) == 0:0 ]] || fail "job $1: exit code $(job_field "$1" ExitCode)"
}
latest_step() { sed -E 's/^step_0*([0-9]+)\.h5$/\1/' "$1/latest"; }
# inspect_ok CHECKPOINT STEP: flexsp inspect validates it (every checksum) at STEP.
inspect_ok() {
  "$FLEXSP" inspect "$1" >"$work/inspect.txt" || fail "flexsp inspect $1 failed"
  grep -qE "^  step: +$2, " "$work/inspect.txt" || fail "$1: not at step $2"
  grep -qE 'checksums: +all [0-9]+ verified' "$work/inspect.txt" || fail "$1: checksums do not verify"
}

# cluster_job_env: what the jobs and sruns of tests/cluster/ share: the checkout and the
# binary for the jobscripts, waiting ranks that yield their core (the test cluster's nodes
# share this machine's cores: a spinning rank would take one from a computing rank of
# another node), and the PMIx fence jobscripts/job.sh gives srun.
cluster_job_env() {
  export FLEXSP_HOME=$FLEXSP_SOURCE_DIR FLEXSP_BIN=$FLEXSP
  export OMPI_MCA_mpi_yield_when_idle=1
  export SLURM_PMIX_FENCE=ring
}
