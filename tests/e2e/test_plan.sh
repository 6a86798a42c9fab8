#!/usr/bin/env bash
# flexsp plan on a length file: text and JSON output, baselines, the published cost model
# file, errors; then the wikipedia lengths of ../shared when present (skipped otherwise).
source "$(dirname "$0")/lib.sh"

seq 2 3000 | awk '{print ($1 * 7919) % 20000 + 2}' >"$work/lengths.txt"
cm="$FLEXSP_SOURCE_DIR/configs/cost_models/gpt7b_a100_flexsp.ini"
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --gpus-per-node 8 --steps 2 \
  --max-seq-len 32768 --global-batch-seqs 64 --time-limit-ms 100 --cost-model "$cm" >"$work/out.txt"
grep -q "speedup" "$work/out.txt" || fail "no speedup line"
grep -q "summary over 2 steps" "$work/out.txt" || fail "no summary"

"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --gpus-per-node 8 --steps 3 \
  --global-batch-tokens 200000 --time-limit-ms 100 --json >"$work/out.json"
python3 - "$work/out.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert len(j["steps"]) == 3
for s in j["steps"]:
    for k in ("step", "flexsp_ms", "static_ms", "batch_adaptive_ms", "speedup_vs_static",
              "speedup_vs_batch_adaptive", "solve_ms", "lower_bound_ms", "plan"):
        assert k in s, k
    assert s["flexsp_ms"] <= s["static_ms"] * (1 + 1e-9)
    assert s["flexsp_ms"] >= s["lower_bound_ms"] * (1 - 1e-9)
    seen = sorted(q for mb in s["plan"]["micro_batches"] for g in mb["groups"] for q in g["seqs"])
    assert seen == list(range(s["sequences"])), "every sequence once"
for k in ("flexsp_ms", "speedup_vs_static", "solve_ms"):
    assert k in j["summary"], k
print("ok: json")
PY

# Identical inputs, identical plans.
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --steps 3 --global-batch-tokens 200000 \
  --time-limit-ms 100 --json | python3 -c 'import json,sys; print(json.dumps([s["plan"] for s in json.load(sys.stdin)["steps"]]))' >"$work/a"
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --steps 3 --global-batch-tokens 200000 \
  --time-limit-ms 100 --json | python3 -c 'import json,sys; print(json.dumps([s["plan"] for s in json.load(sys.stdin)["steps"]]))' >"$work/b"
cmp -s "$work/a" "$work/b" || fail "plans differ between identical runs"

# Tensor parallelism: devices of tp GPUs. Each holds tp times the tokens of one GPU (the
# model states per GPU shrink), and a step of the same batch is predicted faster than on
# half as many devices of one GPU each (compute / tp).
tp_plan() {  # gpus tp -> "tokens-per-device predicted-ms"
  "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus "$1" --gpus-per-node 8 --tp "$2" --steps 1 \
    --global-batch-seqs 64 --time-limit-ms 100 --cost-model "$cm" --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["tokens_per_device"], j["steps"][0]["flexsp_ms"])'
}
read -r e1 t1 < <(tp_plan 8 1)
read -r e2 t2 < <(tp_plan 16 2)
awk -v e1="$e1" -v e2="$e2" -v t1="$t1" -v t2="$t2" 'BEGIN { exit !(e2 > e1 && t2 < t1) }' ||
  fail "--tp 2: expected more tokens per device ($e2 vs $e1) and a faster step ($t2 vs $t1 ms)"
echo "ok: plan --tp 2 on 16 GPUs: $e2 tokens per device (tp 1 on 8: $e1), $t2 ms (tp 1: $t1)"
expect_error "--tp" "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --tp 3
expect_error "--data FILE or --lengths FILE" "$FLEXSP" plan --gpus 8
expect_error "--gpus-per-node" "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 12 --gpus-per-node 8
printf 'a1_ms = 1\nfoo = 2\n' >"$work/bad.ini"
expect_error "unknown key 'foo'" "$FLEXSP" plan --lengths "$work/lengths.txt" --cost-model "$work/bad.ini"
echo 5000000 >"$work/huge.txt"
expect_error "5000000 tokens" "$FLEXSP" plan --lengths "$work/huge.txt" --gpus 8 --max-seq-len 10000000 --steps 1
expect_error "5000000 tokens" "$FLEXSP_MPIRUN" -np 2 "$FLEXSP" plan --lengths "$work/huge.txt" --gpus 8 --max-seq-len 10000000 --steps 1

wiki="$FLEXSP_SOURCE_DIR/../shared/data/wikipedia_lengths.txt"
if [[ -f "$wiki" ]]; then
  "$FLEXSP" plan --lengths "$wiki" --gpus 64 --gpus-per-node 8 --max-seq-len 196608 \
    --global-batch-seqs 512 --steps 2 --time-limit-ms 150 --json >"$work/wiki.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1]))["summary"]; assert j["speedup_vs_static"] > 1.2, j; print("ok: wikipedia", j["speedup_vs_static"])' "$work/wiki.json"
else
  echo "skip: $wiki not present"
fi
echo "ok: plan"
