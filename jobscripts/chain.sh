#!/usr/bin/env bash
# chain.sh: K dependent training jobs that carry one run to a target step, for clusters
# whose time limit is shorter than the run.
#
#   jobscripts/chain.sh --steps T [-n K] [--name NAME] [--run-dir DIR] [--cpu]
#                       [--sbatch OPT]... [--dry-run] [--] [FLEXSP TRAIN OPTIONS]
#
# Design: K submissions of train.sbatch (train_cpu.sbatch with --cpu), each with
# --dependency=afterany on the one before, so the next starts however the last one ended
# (finished, stopped at its time limit by --signal, cancelled, failed). All share one run
# directory, so each resumes from the latest checkpoint; they are not requeued, neither by
# themselves (FLEXSP_REQUEUE=0) nor by Slurm (--no-requeue): the next link continues
# instead. Slurm would requeue a job whose node failed, and a requeued job keeps the task
# count of its first start, so with a node gone it would wait for ever and the chain with
# it; the next link instead starts on the nodes there are (give a range: --nodes=3-4).
# A job that finds step T already checkpointed exits at once, so K can be generous.
#   --steps T       the target step (train.steps), required
#   -n K            the number of jobs (default 4)
#   --name NAME     the job name (default flexsp-chain)
#   --run-dir DIR   the run directory (default ./runs/NAME); Slurm's output goes there too
#   --cpu           train_cpu.sbatch instead of train.sbatch
#   --sbatch OPT    an sbatch option for every job (repeat it), e.g. --sbatch --time=2:00:00
#   --dry-run       print the sbatch commands instead of submitting
# The remaining arguments go to flexsp train; FLEXSP_* variables (see train.sbatch) pass
# through. Prints one line per job: "chain: job ID (k/K)".
set -euo pipefail
# shellcheck source=jobscripts/submit.sh
source "$(dirname "${BASH_SOURCE[0]}")/submit.sh"

steps="" jobs=4 name=flexsp-chain run_dir=""
while (($#)); do
  submit_take "$@"
  if ((submit_used)); then shift "$submit_used"; continue; fi
  case $1 in
    --steps|-n|--name|--run-dir)
      (($# >= 2)) || submit_die "$1 needs a value"
      case $1 in --steps) steps=$2 ;; -n) jobs=$2 ;; --name) name=$2 ;; *) run_dir=$2 ;; esac
      shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || submit_die "--steps T (the target step, a positive number) is required"
[[ $jobs =~ ^[1-9][0-9]*$ ]] || submit_die "-n K must be a positive number, got '$jobs'"
[[ -n $name ]] || submit_die "--name must not be empty"
for a in "$@"; do [[ $a != --train.steps* ]] || submit_die "$a: give the target step as --steps"; done
run_dir=$(realpath -m "${run_dir:-runs/$name}")
((submit_dry_run)) || mkdir -p "$run_dir"

export FLEXSP_STEPS=$steps FLEXSP_RUN_DIR=$run_dir FLEXSP_REQUEUE=0
prev=""
for ((k = 1; k <= jobs; ++k)); do
  dep=()
  [[ -z $prev ]] || dep=(--dependency="afterany:$prev")
  prev=$(submit --job-name="$name" --output="$run_dir/slurm-%j.out" --no-requeue "${dep[@]}" "$submit_script" "$@")
  echo "chain: job $prev ($k/$jobs)"
done
echo "chain: $name: $jobs jobs to step $steps; run directory $run_dir"
