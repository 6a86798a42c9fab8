#!/usr/bin/env bash
# Pipeline schedules on the CPU backend: per-stage activation memory (the slots' bytes,
# counted by the backend's allocator) and the bubble (receive waits / schedule time)
# against the formula (P - 1) / (units + P - 1), for 1F1B and Seq1F1B with 2 and 4 chunks
# at the same batch, model and plans. Prints flexsp train's per-stage report per run.
#   bench/bench_pipeline.sh BUILD_DIR [WORK_DIR] [STEPS] [STAGE_COUNTS (default "2 4")]
set -euo pipefail
build=${1:?usage: bench_pipeline.sh BUILD_DIR [WORK_DIR] [STEPS]}
work=${2:-$(mktemp -d)}
steps=${3:-6}
stage_counts=${4:-2 4}
flexsp="$build/flexsp"
mpirun=${FLEXSP_MPIRUN:-mpirun}
mkdir -p "$work"
[[ -f $work/data.h5 ]] || "$flexsp" pack --glob '*.h' --out "$work/data.h5" /usr/include/linux >/dev/null
common=(--data.path="$work/data.h5" --model.preset=small --model.layers=8 --data.max_seq_len=1024
        --train.global_batch_tokens=16384 --train.micro_batch_tokens=2048 --train.steps="$steps"
        --train.backend=cpu --train.seed=7)
for pp in $stage_counts; do
  for sched in 1f1b seq1f1b:2 seq1f1b:4; do
    args=(--parallel.pp_size="$pp")
    if [[ $sched == seq1f1b:* ]]; then
      args+=(--parallel.pp_schedule=seq1f1b --parallel.seq_chunks="${sched#*:}")
    fi
    echo "== pp $pp, $sched"
    "$mpirun" -np "$pp" --oversubscribe "$flexsp" train "${common[@]}" "${args[@]}" --print-plans \
      >"$work/pp$pp-$sched.log" 2>&1 || { tail -20 "$work/pp$pp-$sched.log"; exit 1; }
    echo "micro-batches per step: $(grep -cE '^  mb [0-9]+:' "$work/pp$pp-$sched.log" | awk -v s="$steps" '{printf "%.1f", $1 / s}')"
    sed -n '/^pipeline:/,$p' "$work/pp$pp-$sched.log" | grep -v '^trained'
    grep '^trained' "$work/pp$pp-$sched.log"
  done
done
