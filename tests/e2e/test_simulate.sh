#!/usr/bin/env bash
# flexsp simulate: the table, --json rows (required keys, the reference size
# reproduces flexsp plan's fixed cost, weak batches grow), the PNG (or the plot reported as
# skipped without matplotlib), determinism with --time-limit-ms 0, and bad options: one
# error line and a non-zero exit.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3

seq 2 3000 | awk '{print ($1 * 7919) % 20000 + 2}' >"$work/lengths.txt"
common=(--lengths "$work/lengths.txt" --max-seq-len 16384 --steps 2 --time-limit-ms 0)

"$FLEXSP" simulate "${common[@]}" --nodes 1,2,4,8 >"$work/table.txt"
cat "$work/table.txt"
grep -q "^weak scaling (64 sequences at 1 node" "$work/table.txt" || fail "no weak table"
grep -q "^strong scaling (64 sequences at every node count" "$work/table.txt" || fail "no strong table"
rows=$(grep -cE '^ +(1|2|4|8) +(8|16|32|64) ' "$work/table.txt")
[[ $rows -eq 8 ]] || fail "expected 4 rows in each of 2 tables, got $rows"

"$FLEXSP" simulate "${common[@]}" --nodes 1,2,4,8 --json --plot "$work/sim.png" >"$work/out.json" 2>"$work/err"
$PY - "$work/out.json" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["nodes"] for r in rows] == [1, 2, 4, 8] and [r["gpus"] for r in rows] == [8, 16, 32, 64]
req = ["nodes", "gpus", "flexsp_step_ms", "static_step_ms", "batch_adaptive_step_ms", "speedup_vs_static",
       "speedup_vs_batch_adaptive", "tokens_per_s", "mfu", "weak_scaling_efficiency"]
for r in rows:
    for k in req + ["strong_scaling_efficiency"]:
        assert k in r, k
    assert r["flexsp_step_ms"] > 0 and 0 < r["mfu"] < 1
    assert abs(r["speedup_vs_static"] - r["static_step_ms"] / r["flexsp_step_ms"]) < 1e-9
    assert abs(r["tokens_per_s"] - r["global_batch_tokens"] / r["flexsp_step_ms"] * 1e3) < 1e-6 * r["tokens_per_s"]
    assert r["global_batch_seqs"] == 64 * r["nodes"] and r["strong"]["global_batch_seqs"] == 64
    b = rows[0]
    eff = (r["tokens_per_s"] / r["gpus"]) / (b["tokens_per_s"] / b["gpus"])
    assert abs(r["weak_scaling_efficiency"] - eff) < 1e-9
assert rows[0]["weak_scaling_efficiency"] == 1 and rows[0]["strong_scaling_efficiency"] == 1
# 64 GPUs with ZeRO-3 is where the published fixed cost was measured: it comes back unchanged.
assert abs(rows[3]["fixed_ms_per_micro_batch"] - 629.36) < 1e-6, rows[3]
print("ok: json rows")
PYEOF
if $PY -c 'import matplotlib' 2>/dev/null; then
  [[ "$(head -c 8 "$work/sim.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] || fail "sim.png is not a PNG"
  grep -q "^plot: $work/sim.png" "$work/err" || fail "plot not named"
  echo "ok: sim.png is a PNG ($(stat -c %s "$work/sim.png") bytes)"
  plot_reads_as_scaling "$work/sim.csv"
else
  grep -q '^plot skipped: .*matplotlib' "$work/err" || fail "missing matplotlib not reported"
fi
head -1 "$work/sim.csv" | grep -q '^ranks,nodes,sp_mode,' || fail "plot CSV header"

# Strong only: weak_scaling_efficiency is null; other stages and fabric overrides run.
"$FLEXSP" simulate "${common[@]}" --nodes 2,4 --scaling strong --zero 1 --bw-inter-gbs 25 --json >"$work/strong.json"
$PY - "$work/strong.json" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))
assert all(r["weak_scaling_efficiency"] is None and r["scaling"] == "strong" for r in rows), rows
assert all(r["grad_sync_ms"] > 0 and "strong" not in r for r in rows)
print("ok: strong scaling, ZeRO-1")
PYEOF

# Greedy planning is deterministic.
"$FLEXSP" simulate "${common[@]}" --nodes 1,4 --json >"$work/a.json"
"$FLEXSP" simulate "${common[@]}" --nodes 1,4 --json >"$work/b.json"
cmp -s "$work/a.json" "$work/b.json" || fail "identical runs differ"

# A pipeline and rings: every row planned for one stage (gpus / pp) and priced with the bubble.
"$FLEXSP" simulate "${common[@]}" --nodes 1,2 --scaling weak --json >"$work/pp1.json"
"$FLEXSP" simulate "${common[@]}" --nodes 1,2 --scaling weak --pp 2 --pp-schedule seq1f1b --seq-chunks 2 \
  --cp-mode auto --json >"$work/pp2.json"
$PY - "$work/pp1.json" "$work/pp2.json" <<'PYEOF'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for r, q in zip(a, b):
    assert "infeasible" not in q and q["flexsp_step_ms"] > 0, q
    assert q["flexsp_step_ms"] != r["flexsp_step_ms"], (r, q)
    assert q["grad_sync_ms"] <= r["grad_sync_ms"] + 1e-9  # a stage syncs its share
print("ok: simulate --pp 2 seq1f1b x2, cp auto:", [round(q["flexsp_step_ms"]) for q in b],
      "vs", [round(r["flexsp_step_ms"]) for r in a])
PYEOF
expect_error "--cp-mode: 'zigzag'" "$FLEXSP" simulate "${common[@]}" --cp-mode zigzag
expect_error "--pp: must be positive" "$FLEXSP" simulate "${common[@]}" --pp 0
expect_error "--pp-schedule: 'gpipe'" "$FLEXSP" simulate "${common[@]}" --pp-schedule gpipe
expect_error "--seq-chunks: 2 chunks need --pp-schedule seq1f1b" "$FLEXSP" simulate "${common[@]}" --seq-chunks 2
expect_error "--nodes: '0'" "$FLEXSP" simulate "${common[@]}" --nodes 0
expect_error "--nodes: 'abc'" "$FLEXSP" simulate "${common[@]}" --nodes 1,abc
expect_error "must ascend" "$FLEXSP" simulate "${common[@]}" --nodes 4,2
expect_error "--lengths: cannot open" "$FLEXSP" simulate --lengths "$work/missing.txt"
expect_error "--data FILE or --lengths FILE" "$FLEXSP" simulate --nodes 1,2
expect_error "--scaling: 'sideways'" "$FLEXSP" simulate "${common[@]}" --scaling sideways
expect_error "--zero" "$FLEXSP" simulate "${common[@]}" --zero 5
expect_error "--plot: directory" "$FLEXSP" simulate "${common[@]}" --plot "$work/nodir/x.png"
# A node count that cannot hold the batch is a row saying why; the others are computed and
# their efficiencies are against the first computed row. No node count fits: an error.
tight=(--lengths "$work/lengths.txt" --max-seq-len 200000 --steps 1 --time-limit-ms 0 --mem-per-gpu-gb 20)
"$FLEXSP" simulate "${tight[@]}" --nodes 1,2,4 >"$work/tight.txt" || fail "a sweep with one infeasible row failed"
[[ $(grep -cE '^ +1 +8  does not fit: .*sequence 0 has 12022 tokens' "$work/tight.txt") -eq 2 ]] \
  || fail "the 1-node rows do not say what does not fit"
[[ $(grep -cE '^ +(2|4) +(16|32) +[0-9]' "$work/tight.txt") -eq 4 ]] || fail "the 2- and 4-node rows are missing"
"$FLEXSP" simulate "${tight[@]}" --nodes 1,2,4 --json >"$work/tight.json"
$PY - "$work/tight.json" <<'PYEOF'
import json, sys
rows = json.load(open(sys.argv[1]))
assert "12022 tokens" in rows[0]["infeasible"] and rows[0]["flexsp_step_ms"] is None, rows[0]
assert all("infeasible" not in r and r["flexsp_step_ms"] > 0 for r in rows[1:]), rows
assert rows[1]["weak_scaling_efficiency"] == 1 and rows[1]["strong_scaling_efficiency"] == 1
print("ok: infeasible row kept, the others computed")
PYEOF
expect_error "no node count holds the batch; 1 node (8 GPUs)" "$FLEXSP" simulate "${tight[@]}" --nodes 1
expect_error "simulate: unrecognised option" "$FLEXSP" simulate --bogus 2
echo "ok: simulate"
