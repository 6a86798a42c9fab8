#!/usr/bin/env bash
# Planner benchmark (issue 5 targets): predicted speedups, solve time and the gap to the
# lower bound, from `flexsp plan --json`. Usage: bench/bench_planner.sh BUILD_DIR [LENGTHS]
# Cases: wikipedia lengths, GPT-7B figures, 80 GB, max length 192K: 64 GPUs (8 nodes) x 512
# sequences x 20 steps, and 1024 GPUs (128 nodes) x 8192 sequences x 5 steps; plus a
# long-tail synthetic distribution (lognormal mu = 8, sigma = 1.6 tokens, clipped to
# [2, 1M], 200000 documents, python seed 1) on 64 GPUs.
set -euo pipefail
build=${1:?usage: bench_planner.sh BUILD_DIR [LENGTHS]}
wiki=${2:-$(dirname "$0")/../../shared/data/wikipedia_lengths.txt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -c 'import random; random.seed(1); print("\n".join(str(min(10**6, max(2, int(random.lognormvariate(8, 1.6))))) for _ in range(200000)))' >"$tmp/longtail.txt"
row() {  # name lengths gpus seqs steps limit
  "$build/flexsp" plan --lengths "$2" --gpus "$3" --gpus-per-node 8 --mem-per-gpu-gb 80 \
    --max-seq-len 196608 --global-batch-seqs "$4" --steps "$5" --time-limit-ms "$6" --json |
  python3 -c '
import json, sys
j = json.load(sys.stdin); s = j["summary"]; st = j["steps"]
gap = sorted(x["flexsp_ms"] / x["lower_bound_ms"] - 1 for x in st)[len(st) // 2]
print("| %s | %s | %d | %.0f | %.0f | %.0f | %.3fx | %.3fx | %.1f | %.1f | %.1f%% |" % (sys.argv[1], sys.argv[2], len(st),
  s["flexsp_ms"], s["static_ms"], s["batch_adaptive_ms"], s["speedup_vs_static"], s["speedup_vs_batch_adaptive"],
  s["solve_ms"], max(x["solve_ms"] for x in st), 100 * gap))' "$1" "$3 GPUs, $4 seqs, limit $6 ms"
}
echo "| case | shape | steps | flexsp ms | static ms | batch_adaptive ms | speedup vs static | vs batch_adaptive | median solve ms | max solve ms | gap to LB (median) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row wikipedia "$wiki" 64 512 20 150
row wikipedia "$wiki" 64 512 3 60000
row wikipedia "$wiki" 1024 8192 5 1000
row long-tail "$tmp/longtail.txt" 64 512 20 150
