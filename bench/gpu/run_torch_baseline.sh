#!/usr/bin/env bash
# The PyTorch baselines of issue 9 on the GPU machine, within a hard time limit: attention,
# training step and longest sequence (bench/gpu/torch_baseline.py), most wanted first.
# JSON lines go to $OUT/torch_baseline.jsonl (./out/gpu without $OUT), the tables to stdout;
# the progress log stays in a temporary file and only its tail is shown when a mode fails
# (the device tool returns at most 8 files from $OUT, and run_gpu_suite.sh uses 7).
#   bash bench/gpu/run_torch_baseline.sh [TOTAL_S]     (default 390: every mode included)
# FLEXSP_TORCH_MODES=attention,train (say) runs only those modes, sharing the time as below;
# FLEXSP_TORCH_ATTENTION_ARGS adds options to the attention mode (e.g. --configs 128:32:8).
# Called by scripts/gpu/run_gpu_suite.sh with the time its call has left; alone on a fresh
# machine it needs no build and no carried files.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${OUT:-$repo/out/gpu}
total=${1:-390}
mkdir -p "$out"
jsonl=$out/torch_baseline.jsonl
: >"$jsonl"

# run_gpu_suite.sh puts the carried Debian libraries first on PATH and LD_LIBRARY_PATH for
# the build; the machine's own PyTorch must not load them.
strip_deps() {
  local IFS=: p kept=()
  for p in $1; do [[ -n ${FLEXSP_DEPS_ROOT:-} && $p == "$FLEXSP_DEPS_ROOT"/* ]] || kept+=("$p"); done
  echo "${kept[*]}"
}
PATH=$(strip_deps "$PATH")
LD_LIBRARY_PATH=$(strip_deps "${LD_LIBRARY_PATH:-}")
export PATH LD_LIBRARY_PATH
export PYTHONUNBUFFERED=1
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "torch baselines: python3 has no torch with CUDA here; nothing run"
  exit 1
fi

# Budgets: 20 s of grace per mode (import, CUDA start-up, a last measurement running over),
# the rest shared 30/50/20 between attention, train and longest.
spend=$((total - 60))
if [ "$spend" -lt 60 ]; then
  echo "torch baselines: ${total} s is too little; nothing run"
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
specs=()
for spec in attention:30 train:50 longest:20; do
  [[ ,${FLEXSP_TORCH_MODES:-attention,train,longest}, == *,${spec%%:*},* ]] && specs+=("$spec")
done
shares=0
for spec in "${specs[@]}"; do shares=$((shares + ${spec#*:})); done
for spec in "${specs[@]}"; do
  mode=${spec%%:*}
  budget=$((spend * ${spec#*:} / shares))
  timeout --signal=TERM --kill-after=10 $((budget + 20)) \
    python3 "$here/torch_baseline.py" "$mode" --budget-s "$budget" --jsonl "$jsonl" \
    $([ "$mode" = attention ] && echo "${FLEXSP_TORCH_ATTENTION_ARGS:-}") 2>"$log"
  r=$?
  if [ $r -ne 0 ]; then
    rc=1
    echo "torch baselines: $mode FAILED (exit $r$([ $r = 124 ] && echo ", over its $((budget + 20)) s"))"
    tail -15 "$log"
  fi
done
echo "torch baselines: $(grep -c '"status": "ok"' "$jsonl") measurements in $jsonl"
exit $rc
