#!/usr/bin/env bash
# Planner benchmark: predicted speedups, solve time and the gap to the
# lower bound, from `flexsp plan --json`. Usage: bench/bench_planner.sh BUILD_DIR [LENGTHS]
# Cases: wikipedia lengths, GPT-7B figures, 80 GB, max length 192K: 64 GPUs (8 nodes) x 512
# sequences x 20 steps, and 1024 GPUs (128 nodes) x 8192 sequences x 5 steps; plus a
# long-tail synthetic distribution (lognormal mu = 8, sigma = 1.6 tokens, clipped to
# [2, 1M], 200000 documents, python seed 1) on 64 GPUs, and a second heavy tail (Pareto,
# alpha 1.1, scale 1500 tokens, clipped to [2, 1M], 200000 documents, python seed 2). The
# 3-step row with --exact-milp and a 60 s limit is the reference: CBC's best plan with the
# exact slot model.
set -euo pipefail
build=${1:?usage: bench_planner.sh BUILD_DIR [LENGTHS]}
wiki=${2:-$(dirname "$0")/../../shared/data/wikipedia_lengths.txt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 -c 'import random; random.seed(1); print("\n".join(str(min(10**6, max(2, int(random.lognormvariate(8, 1.6))))) for _ in range(200000)))' >"$tmp/longtail.txt"
python3 -c 'import random; random.seed(2); print("\n".join(str(min(10**6, max(2, int(random.paretovariate(1.1) * 1500)))) for _ in range(200000)))' >"$tmp/pareto.txt"
row() {  # name lengths gpus seqs steps limit [flexsp plan options...]
  local name=$1 lengths=$2 gpus=$3 seqs=$4 steps=$5 limit=$6
  shift 6
  "$build/flexsp" plan --lengths "$lengths" --gpus "$gpus" --gpus-per-node 8 --mem-per-gpu-gb 80 \
    --max-seq-len 196608 --global-batch-seqs "$seqs" --steps "$steps" --time-limit-ms "$limit" "$@" --json |
  python3 -c '
import json, sys
j = json.load(sys.stdin); s = j["summary"]; st = j["steps"]
gap = sorted(x["flexsp_ms"] / x["lower_bound_ms"] - 1 for x in st)[len(st) // 2]
print("| %s | %s | %d | %.0f | %.0f | %.0f | %.3fx / %.3fx | %.3fx / %.3fx | %.3fx / %.3fx | %.1f | %.1f | %.2f%% |" % (
  sys.argv[1], sys.argv[2], len(st), s["flexsp_ms"], s["static_ms"], s["batch_adaptive_ms"],
  s["speedup_vs_static"], s["run_speedup_vs_static"],
  s["speedup_vs_batch_adaptive"], s["run_speedup_vs_batch_adaptive"],
  s["static_over_lower_bound"], s["batch_adaptive_over_lower_bound"],
  s["solve_ms"], max(x["solve_ms"] for x in st), 100 * gap))' "$name" "$gpus GPUs, $seqs seqs, limit $limit ms${*:+, $*}"
}
echo "| case | shape | steps | flexsp ms | static ms | batch_adaptive ms | vs static (median / run) | vs batch_adaptive (median / run) | ceiling: static / batch_adaptive over LB (median) | median solve ms | max solve ms | gap to LB (median) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
row wikipedia "$wiki" 64 512 20 1000
row wikipedia "$wiki" 1024 8192 5 2000
row long-tail "$tmp/longtail.txt" 64 512 20 1000
row pareto "$tmp/pareto.txt" 64 512 20 1000

# The reference: the first 3 steps again with the exact slot MILP after the class MILP,
# warm-started from its plan, 60 s per step; CBC's best plan against ours, per step.
plan3() { "$build/flexsp" plan --lengths "$wiki" --gpus 64 --gpus-per-node 8 --mem-per-gpu-gb 80 \
  --max-seq-len 196608 --global-batch-seqs 512 --steps 3 --json "$@"; }
plan3 --time-limit-ms 1000 >"$tmp/ours.json"
plan3 --time-limit-ms 60000 --exact-milp >"$tmp/cbc.json"
python3 - "$tmp/ours.json" "$tmp/cbc.json" <<'PY'
import json, sys
ours, cbc = (json.load(open(f))["steps"] for f in sys.argv[1:3])
print()
print("| step | ours ms | CBC 60 s (exact slot MILP) ms | ours above CBC | CBC solve s | lower bound ms |")
print("|---|---|---|---|---|---|")
for a, b in zip(ours, cbc):
    print("| %d | %.1f | %.1f | %+.2f%% | %.1f | %.1f |" % (a["step"], a["flexsp_ms"], b["flexsp_ms"],
          100 * (a["flexsp_ms"] / b["flexsp_ms"] - 1), b["solve_ms"] / 1000, a["lower_bound_ms"]))
PY
