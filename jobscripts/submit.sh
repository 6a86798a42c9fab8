# shellcheck shell=bash
# shellcheck disable=SC2034  # the variables are read by chain.sh and scaling.sh
# Shared by chain.sh and scaling.sh (sourced): where flexsp is, the options both take, and
# sbatch. These scripts run where you submit jobs (a login node), not inside a job, so
# they find the checkout from their own path and export it (FLEXSP_HOME, FLEXSP_BIN) to
# the jobs they submit.
FLEXSP_HOME=${FLEXSP_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
FLEXSP_BIN=${FLEXSP_BIN:-$FLEXSP_HOME/build/flexsp}
export FLEXSP_HOME FLEXSP_BIN

submit_die() { echo "$(basename "$0"): error: $*" >&2; exit 1; }

submit_script=$FLEXSP_HOME/jobscripts/train.sbatch  # --cpu: train_cpu.sbatch
submit_opts=()    # --sbatch OPT...: passed to every sbatch
submit_dry_run=0  # --dry-run: print the sbatch commands, submit nothing

# submit_take ARGS...: takes an option both scripts share off the front of ARGS; sets
# submit_used to how many arguments it used (0: not one of them).
submit_take() {
  submit_used=1
  case $1 in
    --cpu) submit_script=$FLEXSP_HOME/jobscripts/train_cpu.sbatch ;;
    --dry-run) submit_dry_run=1 ;;
    --sbatch) (($# >= 2)) || submit_die "--sbatch needs a value"; submit_opts+=("$2"); submit_used=2 ;;
    --sbatch=*) submit_opts+=("${1#*=}") ;;
    *) submit_used=0 ;;
  esac
}

# submit SBATCH_ARGS...: submits a job with the FLEXSP_* variables of the environment
# (prefix assignments included); prints its id (with --dry-run: the command, and "DRYRUN").
submit() {
  if ((submit_dry_run)); then
    echo "$(env | grep '^FLEXSP_' | sort | tr '\n' ' ')sbatch ${submit_opts[*]} $*" >&2
    echo DRYRUN
    return
  fi
  [[ -x $FLEXSP_BIN ]] || submit_die "flexsp binary '$FLEXSP_BIN' not found: build it (scripts/build.sh) or set FLEXSP_BIN"
  command -v sbatch >/dev/null || submit_die "sbatch not found: run this where Slurm jobs are submitted"
  local out
  out=$(sbatch --parsable --export=ALL "${submit_opts[@]}" "$@") || submit_die "sbatch failed: sbatch $*"
  echo "${out%%;*}"
}
