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
# --zero (as parallel.zero): ZeRO-1 keeps whole parameters and gradients per GPU, so its model
# states are larger and its devices hold fewer tokens than ZeRO-3's (the default); the
# header line says which stage was priced.
zero_plan() {  # stage -> "tokens-per-device model-state-gb"
  "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --gpus-per-node 8 --zero "$1" --steps 1 \
    --global-batch-seqs 64 --time-limit-ms 0 --json |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["tokens_per_device"], j["model_state_gb"])'
}
read -r e3 g3 < <(zero_plan 3)
read -r e1z g1z < <(zero_plan 1)
awk -v e3="$e3" -v e1="$e1z" -v g3="$g3" -v g1="$g1z" 'BEGIN { exit !(e1 < e3 && g1 > g3) }' ||
  fail "--zero 1: expected fewer tokens per device ($e1z vs $e3) and larger states ($g1z vs $g3 GB)"
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --zero 2 --steps 1 --time-limit-ms 0 | grep -q 'ZeRO-2)' ||
  fail "the header does not name ZeRO-2"
echo "ok: plan --zero 1: $e1z tokens per device, $g1z GB of states (ZeRO-3: $e3, $g3 GB)"
# The strong and box bounds (--strong-bound-ms, --box-bound-ms): between the memory-aware
# bound and the plan.
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --gpus-per-node 8 --steps 1 --global-batch-seqs 64 \
  --max-seq-len 32768 --mem-per-gpu-gb 24 --time-limit-ms 0 --strong-bound-ms 2000 --box-bound-ms 2000 \
  --json >"$work/strong.json"
python3 - "$work/strong.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["steps"][0]
for b in ("strong", "box"):
    assert s["memory_lower_bound_ms"] * (1 - 1e-9) <= s[b + "_lower_bound_ms"] <= s["flexsp_ms"] * (1 + 1e-9), s
    assert s["flexsp_over_%s_lower_bound" % b] >= 1 - 1e-9
assert s["strong_lower_bound_runs"] and s["box_lower_bound_counts"] and s["box_lower_bound_boxes"] >= 1
print("ok: strong bound", s["strong_lower_bound_ms"], "box bound", s["box_lower_bound_ms"], "memory-aware",
      s["memory_lower_bound_ms"], "plan", s["flexsp_ms"])
PY
expect_error "--strong-bound-ms: must be >= 0" "$FLEXSP" plan --lengths "$work/lengths.txt" --strong-bound-ms -1
expect_error "--box-bound-ms: must be >= 0" "$FLEXSP" plan --lengths "$work/lengths.txt" --box-bound-ms -1
expect_error "--strong-bound-long-fraction: must be >= 0" "$FLEXSP" plan --lengths "$work/lengths.txt" \
  --strong-bound-ms 100 --strong-bound-long-fraction -1
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
  # Ring/USP (cp_mode auto) at 1M with 8 kv heads: the long documents of wikipedia in one
  # step (every piece once); groups wider than the heads (ring) appear, with
  # --ring-groups needed only for the pieces a heads-wide group cannot hold, and the
  # default (any) predicts no slower; ulysses cannot plan it.
  awk '$1 > 30000' "$wiki" >"$work/wiki_long.txt"
  pieces=$(awk '{n += int(($1 - 2) / 1048576) + 1} END {print n}' "$work/wiki_long.txt")
  ring_args=(--lengths "$work/wiki_long.txt" --gpus 64 --gpus-per-node 8 --kv-heads 8 --max-seq-len 1048576
    --global-batch-seqs "$pieces" --steps 1 --time-limit-ms 0)
  "$FLEXSP" plan "${ring_args[@]}" --cp-mode auto --ring-groups needed --json >"$work/ring.json"
  "$FLEXSP" plan "${ring_args[@]}" --cp-mode auto --json >"$work/ring_any.json"
  python3 - "$work/ring.json" "$work/ring_any.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
heads_wide = j["tokens_per_device"] * j["ulysses_max_devices"]
assert j["ulysses_max_devices"] == 32 and j["max_group_devices"] == 64, j
wide = [g for mb in j["steps"][0]["plan"]["micro_batches"] for g in mb["groups"] if g["size"] > 32]
assert wide, "no group wider than the heads"
for g in wide:
    assert all(l > heads_wide for l in g["lengths"]), ("a short piece on a wide group", g["lengths"], heads_wide)
longest = max(l for mb in j["steps"][0]["plan"]["micro_batches"] for g in mb["groups"] for l in g["lengths"])
assert longest == 1048577, longest
print("ok: ring groups only for", sorted(l for g in wide for l in g["lengths"]), "> heads-wide", heads_wide)
needed = j["steps"][0]["flexsp_ms"]
any_ms = json.load(open(sys.argv[2]))["steps"][0]["flexsp_ms"]
assert any_ms <= needed * (1 + 1e-9), (any_ms, needed)
print("ok: --ring-groups any", any_ms, "ms, needed", needed, "ms")
PY
  expect_error "parallel.cp_mode ulysses" "$FLEXSP" plan "${ring_args[@]}" --cp-mode ulysses
else
  echo "skip: $wiki not present"
fi

# Pipelines: the plan of one stage, priced with the bubble; Seq1F1B's chunks shrink it.
pp_ms() {  # extra args -> flexsp_ms of the one step
  "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --gpus-per-node 8 --steps 1 \
    --global-batch-seqs 256 --time-limit-ms 0 --json "$@" |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["stage_devices"], j["steps"][0]["micro_batches"], j["steps"][0]["flexsp_ms"])'
}
read -r dev1 mb1 t1 < <(pp_ms --pp 1)
read -r dev4 mb4 t4 < <(pp_ms --pp 4)
read -r devs mbs ts < <(pp_ms --pp 4 --pp-schedule seq1f1b --seq-chunks 4)
[[ $dev1 == 16 && $dev4 == 4 && $devs == 4 ]] || fail "stage devices: pp 1 $dev1, pp 4 $dev4 (expected 16, 4)"
awk -v a="$mb4" 'BEGIN { exit !(a >= 4) }' || fail "pp 4: $mb4 micro-batches (the bubble wants more)"
echo "ok: pp 4 plans $dev4 devices per stage: 1f1b $t4 ms ($mb4 mb), seq1f1b x4 $ts ms ($mbs mb), no pp $t1 ms"
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --steps 1 --global-batch-seqs 64 --time-limit-ms 0 \
  --pp 2 --cp-mode usp >"$work/pp.txt" 2>"$work/pp.err"
grep -q "^pipeline: pp 2 1f1b; the plan is one stage's (8 devices)" "$work/pp.txt" || fail "no pipeline line"
grep -q "^cp_mode usp" "$work/pp.txt" || fail "no cp_mode line"
# ZeRO-3 states with a pipeline and ring/USP groups in Seq1F1B stages: train runs them, so
# no note.
if grep -q "priced only: the runtime" "$work/pp.err"; then cat "$work/pp.err"; fail "a priced-only note for pp x ZeRO-3"; fi
"$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --steps 1 --global-batch-seqs 64 --time-limit-ms 0 \
  --pp 2 --pp-schedule seq1f1b --seq-chunks 2 --cp-mode usp >/dev/null 2>"$work/pp_seq.err"
if grep -q "priced only: the runtime" "$work/pp_seq.err"; then cat "$work/pp_seq.err"; fail "a priced-only note for usp x seq1f1b"; fi
# Seq1F1B with cp_mode auto where a heads-wide group (4 devices of the tiny model) cannot
# hold the 30000-token documents: groups of 8 (Ulysses 4 x ring 2) appear.
{ seq 1 40 | awk '{print ($1 * 37) % 500 + 2}'; printf '30000\n%.0s' 1 2 3 4; } >"$work/long.txt"
"$FLEXSP" plan --lengths "$work/long.txt" --model tiny --gpus 16 --gpus-per-node 8 --max-seq-len 32768 --steps 1 \
  --global-batch-seqs 44 --time-limit-ms 0 --mem-per-gpu-gb 0.08 --pp 2 --pp-schedule seq1f1b --seq-chunks 2 \
  --cp-mode auto --json >"$work/pp_seq_ring.json" 2>"$work/pp_seq_ring.err"
if grep -q "priced only: the runtime" "$work/pp_seq_ring.err"; then cat "$work/pp_seq_ring.err"; fail "a priced-only note for auto x seq1f1b"; fi
python3 - "$work/pp_seq_ring.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["pp_schedule"] == "seq1f1b" and j["ulysses_max_devices"] == 4, j
sizes = {g["size"] for mb in j["steps"][0]["plan"]["micro_batches"] for g in mb["groups"]}
assert 8 in sizes, sizes
print("ok: seq1f1b x cp_mode auto plans groups of", sorted(sizes), "(heads-wide: 4)")
PY
# Every bad value of the new flags is one clear error.
expect_error "--cp-mode: 'zigzag' is not one of" "$FLEXSP" plan --lengths "$work/lengths.txt" --cp-mode zigzag
expect_error "--ring-groups: 'some' is not needed or any" "$FLEXSP" plan --lengths "$work/lengths.txt" --ring-groups some
expect_error "--pp: must be positive" "$FLEXSP" plan --lengths "$work/lengths.txt" --pp 0
expect_error "--pp: 3 stages of tp 1 do not divide the 16 GPUs" "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 16 --pp 3
expect_error "--pp: 64 stages for a model of 32 layers" "$FLEXSP" plan --lengths "$work/lengths.txt" --gpus 64 --pp 64
expect_error "--pp-schedule: 'gpipe' is not one of" "$FLEXSP" plan --lengths "$work/lengths.txt" --pp-schedule gpipe
expect_error "--seq-chunks: must be positive" "$FLEXSP" plan --lengths "$work/lengths.txt" --seq-chunks 0
expect_error "--seq-chunks: 4 chunks need --pp-schedule seq1f1b" "$FLEXSP" plan --lengths "$work/lengths.txt" --seq-chunks 4
expect_error "model.kv_heads: 5 does not divide" "$FLEXSP" plan --lengths "$work/lengths.txt" --kv-heads 5
expect_error "--zero: stage must be 0-3, got 4" "$FLEXSP" plan --lengths "$work/lengths.txt" --zero 4
expect_error "--micro-batch-tokens: must be >= 0" "$FLEXSP" plan --lengths "$work/lengths.txt" --micro-batch-tokens -1
expect_error "--kv-heads: must be positive" "$FLEXSP" plan --lengths "$work/lengths.txt" --kv-heads -1
expect_error "--time-step-share: must be in [0, 1]" "$FLEXSP" plan --lengths "$work/lengths.txt" --time-step-share -0.1
echo "ok: plan"
