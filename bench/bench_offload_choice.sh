#!/usr/bin/env bash
# Activation offload in the planner, run-level against per micro-batch: `flexsp simulate`
# of GPT-7B at 64 and 1024 GPUs of 40 GB on heavy-tailed lengths, each planned without
# offload, with offload in every micro-batch (train.offload = checkpoints) and with the
# planner's choice per micro-batch (auto), at the default host-copy bandwidth and at a
# fast one. Prints one markdown row per case: the mean step (ms) and micro-batches of each,
# and auto's gain over the best run-level setting.
#
# usage: bench/bench_offload_choice.sh FLEXSP [STEPS] [DISTS]
#   DISTS: space-separated names of pareto-1.1, mix-2pct, wikipedia (default: all three)
set -euo pipefail
flexsp=${1:?usage: bench_offload_choice.sh FLEXSP [STEPS] [DISTS]}
steps=${2:-3}
want=${3:-"pareto-1.1 mix-2pct wikipedia"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data=$(cd "$(dirname "$0")/.." && pwd)/../shared/data/wikipedia_lengths.txt
# The same seeded generators as bench/bench_tails.sh.
gen() {
  python3 -c "import random; r = random.Random($2)
print('\n'.join(str(min(10**6, max(2, int($1)))) for _ in range(200000)))"
}
echo "| lengths | bw_h2d GB/s | GPUs | off ms | mb | checkpoints ms | mb | auto ms | mb | auto vs best |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for dist in $want; do
  case $dist in
    pareto-1.1) gen "r.paretovariate(1.1) * 1500" 21 >"$tmp/len.txt" ;;
    mix-2pct) gen "(r.uniform(0.85, 1.0) * 196608 if r.random() < 0.02 else r.lognormvariate(6.5, 1.0))" 32 >"$tmp/len.txt" ;;
    wikipedia) cp "$data" "$tmp/len.txt" ;;
    *) echo "bench_offload_choice: unknown lengths '$dist'" >&2; exit 2 ;;
  esac
  for bw in 25 200; do
    printf 'model = 7b\nbw_h2d = %s\n' "$bw" >"$tmp/cm.ini"
    for o in off checkpoints auto; do
      "$flexsp" simulate --lengths "$tmp/len.txt" --max-seq-len 196608 --mem-per-gpu-gb 40 --nodes 8,128 \
        --scaling weak --steps "$steps" --offload "$o" --cost-model "$tmp/cm.ini" >"$tmp/$o.out" 2>&1 ||
        { cat "$tmp/$o.out" >&2; exit 1; }
    done
    for gpus in 64 1024; do
      row() { awk -v g="$gpus" '$2 == g && $1 ~ /^[0-9]+$/ { printf "%s | %s", $8, $5 }' "$tmp/$1.out"; }
      gain=$(awk -v g="$gpus" 'FNR == 1 { f++ } $2 == g && $1 ~ /^[0-9]+$/ { t[f] = $8 }
        END { b = t[1] < t[2] ? t[1] : t[2]; printf "%.3fx", b / t[3] }' "$tmp/off.out" "$tmp/checkpoints.out" "$tmp/auto.out")
      echo "| $dist | $bw | $gpus | $(row off) | $(row checkpoints) | $(row auto) | $gain |"
    done
  done
done
