#!/usr/bin/env bash
# Checkpoint write and load bandwidth against dd (bench_checkpoint.cpp): the 350m and
# 1.3b presets (initialised, no training) on 1, 2 and 4 ranks at ZeRO 0 and 3, written
# into DIR (the disk to measure). Prints a markdown table, one row per repetition.
#   bench/bench_checkpoint.sh BUILD_DIR DIR [PRESETS (default "350m 1.3b")] [RANKS ("1 2 4")] [REPS (1)]
set -euo pipefail
build=${1:?usage: bench_checkpoint.sh BUILD_DIR DIR [PRESETS] [RANKS] [REPS]}
dir=${2:?usage: bench_checkpoint.sh BUILD_DIR DIR [PRESETS] [RANKS] [REPS]}
presets=${3:-350m 1.3b}
ranks=${4:-1 2 4}
reps=${5:-1}
mpirun=${FLEXSP_MPIRUN:-mpirun}
mkdir -p "$dir"
echo "# $(date -u +%F) $(hostname), $(nproc) cores, $(df -hT "$dir" | awk 'NR == 2 { print $2 " on " $1 }')"
echo "| preset | ranks | ZeRO | GB | write s | write MB/s | dd write MB/s | of dd | dd direct MB/s | of dd direct | load s | load MB/s | dd read MB/s | of dd | dd direct read MB/s | of dd direct |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for p in $presets; do
  for n in $ranks; do
    for z in 0 3; do
      "$mpirun" -np "$n" --oversubscribe "$build/bench/bench_checkpoint" --preset "$p" --zero "$z" \
        --dir "$dir" --reps "$reps"
    done
  done
done
