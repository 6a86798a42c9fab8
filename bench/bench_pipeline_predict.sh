#!/usr/bin/env bash
# Train-time prediction of pipeline runs: a cost model fitted by flexsp profile
# on 2 ranks, then flexsp train of the `small` model (4 layers) on the same 2 ranks as pp 1
# (flexsp groups), pp 2 1F1B and pp 2 Seq1F1B x 2 / x 4, each with a timing report; prints
# flexsp report's predicted-against-measured line per layout (step time median over steps
# 2..N, peak memory). Valid only with one idle core per rank (a waiting stage must not
# hand its core to its neighbour): run it on a quiet machine.
#   bench/bench_pipeline_predict.sh BUILD_DIR [WORK_DIR] [STEPS (default 8)]
set -euo pipefail
build=${1:?usage: bench_pipeline_predict.sh BUILD_DIR [WORK_DIR] [STEPS]}
work=${2:-$(mktemp -d)}
steps=${3:-8}
flexsp="$build/flexsp"
mpirun=${FLEXSP_MPIRUN:-mpirun}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$work"
[[ -f $work/data.h5 ]] || "$flexsp" pack --glob '*.cpp' --out "$work/data.h5" "$root/lib" >/dev/null
[[ -f $work/cm.ini ]] || "$mpirun" -np 2 "$flexsp" profile --model small --seq-lens 128,256,512,1024 \
  --repeats 3 --out "$work/cm.ini" | tail -3
common=(--data.path="$work/data.h5" --model.preset=small --data.max_seq_len=1024
        --train.global_batch_tokens=8192 --train.micro_batch_tokens=2048 --train.steps="$steps"
        --train.backend=cpu --parallel.sp_mode=flexsp --planner.cost_model="$work/cm.ini")
for layout in pp1 1f1b seq1f1b:2 seq1f1b:4; do
  args=()
  case $layout in
    pp1) ;;
    1f1b) args=(--parallel.pp_size=2) ;;
    seq1f1b:*) args=(--parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks="${layout#*:}") ;;
  esac
  rm -rf "$work/run-$layout"
  "$mpirun" -np 2 "$flexsp" train "${common[@]}" "${args[@]}" --report.dir="$work/run-$layout" \
    >"$work/$layout.log" 2>&1 || { tail -20 "$work/$layout.log"; exit 1; }
  echo "== $layout: $("$flexsp" report "$work/run-$layout" | grep -E 'step time: median')"
done
