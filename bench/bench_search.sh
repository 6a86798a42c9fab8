#!/usr/bin/env bash
# The layout search's time (flexsp plan --search): the whole default space at 64 GPUs with
# the GPT-7B figures, on e2e_search's synthetic lengths (2-20K tokens) and, when present,
# the Wikipedia lengths; prints the layouts searched, the wall and CPU seconds and the
# target (60 s of wall time on an idle 2-core machine). A figure, not a test: it asserts
# nothing. Usage: bench/bench_search.sh BUILD_DIR [LENGTHS]
set -euo pipefail
build=${1:?usage: bench_search.sh BUILD_DIR [LENGTHS]}
wiki=${2:-$(dirname "$0")/../../shared/data/wikipedia_lengths.txt}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
seq 2 3000 | awk '{print ($1 * 7919) % 20000 + 2}' >"$tmp/synthetic.txt"
row() {  # name lengths
  local t0 t1 cpu
  t0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  "$build/flexsp" plan --lengths "$2" --gpus 64 --max-seq-len 196608 --steps 2 --search --json >"$tmp/out.json"
  t1=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (b - a) / hz }')
  python3 - "$tmp/out.json" "$1" "$cpu" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
ranked = sum(1 for l in j["layouts"] if "rejected" not in l)
print("| %s | %d | %d | %.1f | %s | 60 |" % (sys.argv[2], len(j["layouts"]), ranked, j["search_s"], sys.argv[3]))
PY
}
echo "| lengths | layouts | ranked | search s (wall) | CPU s | target s (idle, 2 cores) |"
echo "|---|---|---|---|---|---|"
row synthetic "$tmp/synthetic.txt"
if [[ -r $wiki ]]; then row wikipedia "$wiki"; fi
