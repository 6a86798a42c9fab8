#!/usr/bin/env bash
# scaling.sh: a scaling study as Slurm jobs: one training job per (kind, sp_mode, node
# count), then one job after all of them that aggregates their timing reports with
# `flexsp report` into a table, a CSV and a plot per kind.
#
#   jobscripts/scaling.sh --batch-tokens B [--nodes 1,2,4,8] [--kinds weak,strong]
#       [--modes flexsp,static] [--steps S] [--gpus-per-node G | --cpu [--ranks-per-node R]
#       [--emulate]] [--shared] [--serial] [--name NAME] [--out DIR] [--sbatch OPT]... [--dry-run]
#       [--] [FLEXSP TRAIN OPTIONS]
#   jobscripts/scaling.sh --aggregate DIR     (what the final job runs; also by hand)
#
# Design: weak scaling grows the global batch with the nodes (B x N / smallest N tokens),
# strong scaling keeps it at B. Every run has its own directory DIR/KIND-MODE-nN with its
# timing report in report/ and Slurm's output; no checkpoints (a fresh start each), no
# requeue. Runs get whole nodes (--exclusive) so that they do not time each other, unless
# --shared. The final job depends on all of them with afterany, so a failed run leaves a
# table of the others (and the final job fails, naming it); DIR/runs.txt lists the jobs.
#   --batch-tokens B     train.global_batch_tokens of the smallest run (required)
#   --nodes LIST         node counts (default 1,2,4,8)
#   --kinds LIST         weak and/or strong (default both)
#   --modes LIST         parallel.sp_mode values (default flexsp,static)
#   --steps S            train.steps of each run (default 20)
#   --gpus-per-node G    GPU runs: G ranks and G GPUs per node (default 8)
#   --cpu                CPU runs (train_cpu.sbatch), R ranks per node (--ranks-per-node,
#                        default 2)
#   --emulate            with --cpu: all "nodes" on one Slurm node, N x R ranks with
#                        flexsp's --ranks-per-node R (for one-node clusters and tests)
#   --shared             do not ask for --exclusive nodes
#   --serial             one run at a time (each after the one before, afterany), so that
#                        runs on different nodes do not time each other either (shared
#                        storage or network; the test cluster's nodes share one machine)
#   --name NAME          job name prefix (default scaling)
#   --out DIR            the study directory (default ./runs/NAME)
#   --sbatch OPT         an sbatch option for every job (repeat it), e.g. --sbatch --partition=gpu
#   --dry-run            print the sbatch commands instead of submitting
# The remaining arguments go to flexsp train (e.g. --config run.ini --data.path=d.h5).
set -euo pipefail
# shellcheck source=jobscripts/submit.sh
source "$(dirname "${BASH_SOURCE[0]}")/submit.sh"

# aggregate DIR: flexsp report over the runs of each kind that left a report.
aggregate() {
  local out=$1 kind missing=0
  [[ -f $out/runs.txt ]] || submit_die "$out/runs.txt not found: not a scaling.sh study"
  for kind in weak strong; do
    local dirs=() job k mode n dir
    while read -r job k mode n dir; do
      [[ $k == "$kind" ]] || continue
      if [[ -f $dir/report/report.h5 ]]; then
        dirs+=("$dir/report")
      else
        echo "scaling: $kind $mode on $n node(s): no report in $dir (job $job; see its slurm-$job.out)" >&2
        missing=1
      fi
    done < <(grep -v '^#' "$out/runs.txt")
    ((${#dirs[@]})) || continue
    mkdir -p "$out/report/$kind"
    echo "== $kind scaling"
    "$FLEXSP_BIN" report "${dirs[@]}" --out "$out/report/$kind" | tee "$out/report/$kind/table.txt"
  done
  ((missing == 0)) || submit_die "some runs left no report"
}

if [[ ${1:-} == --aggregate ]]; then
  (($# == 2)) || submit_die "usage: scaling.sh --aggregate DIR"
  aggregate "$2"
  exit 0
fi

batch="" nodes=1,2,4,8 kinds=weak,strong modes=flexsp,static steps=20 gpus=8 rpn=2
cpu=0 emulate=0 exclusive=(--exclusive) serial=0 name=scaling out=""
while (($#)); do
  submit_take "$@"
  if ((submit_used)); then
    [[ $1 != --cpu ]] || cpu=1
    shift "$submit_used"
    continue
  fi
  case $1 in
    --batch-tokens|--nodes|--kinds|--modes|--steps|--gpus-per-node|--ranks-per-node|--name|--out)
      (($# >= 2)) || submit_die "$1 needs a value"
      case $1 in
        --batch-tokens) batch=$2 ;; --nodes) nodes=$2 ;; --kinds) kinds=$2 ;;
        --modes) modes=$2 ;; --steps) steps=$2 ;; --gpus-per-node) gpus=$2 ;;
        --ranks-per-node) rpn=$2 ;; --name) name=$2 ;; *) out=$2 ;;
      esac
      shift 2 ;;
    --emulate) emulate=1; shift ;;
    --shared) exclusive=(); shift ;;
    --serial) serial=1; shift ;;
    -h|--help) sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
number='^[1-9][0-9]*$'
[[ $batch =~ $number ]] || submit_die "--batch-tokens B (the global batch of the smallest run, in tokens) is required"
[[ $steps =~ $number && $gpus =~ $number && $rpn =~ $number ]] ||
  submit_die "--steps, --gpus-per-node and --ranks-per-node take positive numbers"
((emulate == 0 || cpu == 1)) || submit_die "--emulate needs --cpu"
IFS=, read -r -a node_list <<<"$nodes"
IFS=, read -r -a kind_list <<<"$kinds"
IFS=, read -r -a mode_list <<<"$modes"
min_nodes=""
for n in "${node_list[@]}"; do
  [[ $n =~ $number ]] || submit_die "--nodes: '$n' is not a node count"
  if [[ -z $min_nodes ]] || ((n < min_nodes)); then min_nodes=$n; fi
done
for k in "${kind_list[@]}"; do
  [[ $k == weak || $k == strong ]] || submit_die "--kinds: '$k' is neither weak nor strong"
done
((${#mode_list[@]})) || submit_die "--modes is empty"
for a in "$@"; do
  case $a in
    --parallel.sp_mode*|--train.global_batch_tokens*|--train.steps*|--ranks-per-node*|--parallel.ranks_per_node*)
      submit_die "$a: scaling.sh sets it (see --modes, --batch-tokens, --steps, --ranks-per-node)" ;;
  esac
done
out=$(realpath -m "${out:-runs/$name}")
[[ ! -e $out/runs.txt ]] || submit_die "$out already holds a study (runs.txt); choose another --out"

ids=()
if ((!submit_dry_run)); then
  mkdir -p "$out"
  echo "# job kind sp_mode nodes dir" >"$out/runs.txt"
fi
for kind in "${kind_list[@]}"; do
  for mode in "${mode_list[@]}"; do
    for n in "${node_list[@]}"; do
      run=$kind-$mode-n$n
      dir=$out/$run
      tokens=$batch
      [[ $kind == strong ]] || tokens=$((batch * n / min_nodes))
      shape=(--nodes="$n" --ntasks=$((n * gpus)) --ntasks-per-node="$gpus" --gpus-per-node="$gpus")
      extra=()
      if ((emulate)); then
        shape=(--nodes=1 --ntasks=$((n * rpn)))
        extra=(--ranks-per-node "$rpn")
      elif ((cpu)); then
        shape=(--nodes="$n" --ntasks=$((n * rpn)) --ntasks-per-node="$rpn")
      fi
      ((submit_dry_run)) || mkdir -p "$dir"
      after=()
      ((serial == 0 || ${#ids[@]} == 0)) || after=(--dependency="afterany:${ids[-1]}")
      id=$(FLEXSP_RUN_DIR=$dir FLEXSP_REPORT_DIR=$dir/report FLEXSP_CHECKPOINT_DIR=none \
           FLEXSP_STEPS=$steps FLEXSP_REQUEUE=0 \
           submit --job-name="$name-$run" --output="$dir/slurm-%j.out" "${shape[@]}" "${exclusive[@]}" \
             "${after[@]}" "$submit_script" "$@" "${extra[@]}" \
             --parallel.sp_mode="$mode" --train.global_batch_tokens="$tokens")
      ids+=("$id")
      ((submit_dry_run)) || echo "$id $kind $mode $n $dir" >>"$out/runs.txt"
      echo "scaling: job $id: $kind, $mode, $n node(s), $tokens tokens per step"
    done
  done
done
deps=$(IFS=:; echo "${ids[*]}")
id=$(submit --job-name="$name-report" --output="$out/report-%j.out" --ntasks=1 \
       --dependency="afterany:$deps" \
       --wrap="bash $(printf %q "$FLEXSP_HOME/jobscripts/scaling.sh") --aggregate $(printf %q "$out")")
echo "scaling: job $id aggregates them into $out/report/{weak,strong}/ (table.txt, scaling.csv, scaling.png)"
