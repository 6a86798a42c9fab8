# flexsp report (docs/reports.md): three short training runs (1, 2, 4 ranks, flexsp) and a
# static 4-rank run, each with --report.dir; flexsp report aggregates them into a scaling
# table (rows sorted by ranks, efficiency and speedup 1 for the smallest run, flexsp/static
# on the 4-rank flexsp row), a CSV and a PNG (when python3-matplotlib is installed; without
# it the plot is said to be skipped and everything else is written). A RUN_DIR without a
# report is one clear error. A pp 2 run's report holds the per-stage pipeline figures
# (report.h5 /pipeline, summary.json "pipeline"), and flexsp report prints its stage table;
# the reports without stages have none. One rank's steps have attention time.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
pack_small_corpus "$work/data.h5"

run() {  # np dir extra...
  local np=$1 dir=$2; shift 2
  "$FLEXSP_MPIRUN" -np "$np" "$FLEXSP" train --data.path="$work/data.h5" --model.preset=tiny \
    --data.max_seq_len=128 --train.global_batch_tokens=1024 --train.steps=3 --train.backend=cpu \
    --report.dir="$dir" "$@" >"$dir.log"
}
run 1 "$work/r1"
run 2 "$work/r2"
run 4 "$work/r4" --ranks-per-node 2
run 4 "$work/r4s" --parallel.sp_mode=static --ranks-per-node 2
# The attention phase counts one device's own attention too (groups of one device, no
# Ulysses in between): on one rank every step has some.
awk -F, 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "attention_mean_ms") c = i; next }
         !(c && $c > 0) { exit 1 }' "$work/r1/steps.csv" ||
  fail "r1: a step without attention time in steps.csv"

"$FLEXSP" report "$work/r4" "$work/r1" "$work/r4s" "$work/r2" --out "$work/scaling" >"$work/table.txt"
cat "$work/table.txt"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +(flexsp|static) ' "$work/table.txt")
[[ $rows -eq 4 ]] || fail "expected 4 table rows, got $rows"
grep -qE '^ +1 +1 +flexsp +0 +3 .* 1\.000 +1\.000 +- ' "$work/table.txt" || fail "smallest run is not the baseline"
grep -qE '^ +4 +2 +flexsp .* [0-9]+\.[0-9]{3}  .*/r4$' "$work/table.txt" || fail "no flexsp/static on the 4-rank row"
[[ $(wc -l <"$work/scaling/scaling.csv") -eq 5 ]] || fail "CSV: expected a header and 4 rows"
head -1 "$work/scaling/scaling.csv" | grep -q '^run,ranks,nodes,sp_mode,zero,' || fail "CSV header"
if $PY -c 'import matplotlib' 2>/dev/null; then
  [[ "$(head -c 8 "$work/scaling/scaling.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] ||
    fail "scaling.png is not a PNG"
  grep -q "^plot: $work/scaling/scaling.png" "$work/table.txt" || fail "plot not named"
  echo "ok: scaling.png is a PNG ($(stat -c %s "$work/scaling/scaling.png") bytes)"
  plot_reads_as_scaling "$work/scaling/scaling.csv"
else
  grep -q '^plot skipped: .*matplotlib' "$work/table.txt" || fail "missing matplotlib not reported"
  echo "ok: no matplotlib here: the plot is reported as skipped"
fi

# JSON: the same figures, machine-readable.
"$FLEXSP" report "$work/r1" "$work/r2" "$work/r4" "$work/r4s" --json >"$work/report.json"
$PY - "$work/report.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
runs = j["runs"]
assert [r["ranks"] for r in runs] == [1, 2, 4, 4], runs
b = runs[0]
assert b["efficiency"] == 1 and b["speedup"] == 1
for r in runs:
    assert r["tokens_per_s"] > 0 and r["steps"] == 3
    assert abs(r["speedup"] - r["tokens_per_s"] / b["tokens_per_s"]) < 1e-9
    assert abs(r["efficiency"] - r["speedup"] / r["ranks"]) < 1e-9
f4 = [r for r in runs if r["ranks"] == 4 and r["sp_mode"] == "flexsp"][0]
s4 = [r for r in runs if r["ranks"] == 4 and r["sp_mode"] == "static"][0]
assert abs(f4["flexsp_vs_static"] - f4["tokens_per_s"] / s4["tokens_per_s"]) < 1e-9
assert s4["flexsp_vs_static"] is None and f4["nodes"] == 2
print("ok: report --json figures are consistent")
PYEOF

# One run's figures agree everywhere: the progress line's per-step tok/s and MFU are the
# steps.csv row's; summary.json and report --json give totals over totals of steps 2-3
# (tokens and FLOPs over wall time), not means of the per-step rates.
$PY - "$work/r4" "$work/r4.log" "$work/report.json" <<'PYEOF'
import csv, json, re, sys
run, log, rep = sys.argv[1:]
rows = list(csv.DictReader(open(run + "/steps.csv")))
lines = [l for l in open(log) if l.startswith("step ") and "| MFU " in l]
assert len(lines) == len(rows) == 3, (len(lines), len(rows))
for l, r in zip(lines, rows):
    tps = float(re.search(r"\| ([0-9.]+) tok/s", l).group(1))
    mfu = float(re.search(r"\| MFU ([0-9.e+-]+)%", l).group(1)) / 100
    want_tps = float(r["tokens"]) / (float(r["wall_ms"]) / 1e3)
    assert abs(tps - want_tps) <= 0.5 + 1e-9 * want_tps, (l, want_tps)
    assert abs(mfu - float(r["mfu"])) <= 5e-3 * float(r["mfu"]), (l, r["mfu"])
timed = rows[1:]
ms = sum(float(r["wall_ms"]) for r in timed)
tokens = sum(float(r["tokens"]) for r in timed)
mfu = sum(float(r["mfu"]) * float(r["wall_ms"]) for r in timed) / ms
s = json.load(open(run + "/summary.json"))
assert s["timed_steps"] == 2
for got, want in ((s["tokens_per_s"], tokens / (ms / 1e3)), (s["mfu"], mfu)):
    assert abs(got - want) <= 1e-6 * want, (got, want)
r = [x for x in json.load(open(rep))["runs"] if x["run"].endswith("/r4")][0]
assert abs(r["mfu"] - s["mfu"]) <= 1e-6 * s["mfu"] and abs(r["tokens_per_s"] - s["tokens_per_s"]) <= 1e-6 * s["tokens_per_s"], (r, s)
print("ok: progress lines, steps.csv, summary.json and report --json agree (totals over totals)")
PYEOF

# A GPU results line (bench/gpu/speed_line.py) carries the summary's figures beside the
# PyTorch baseline's record of the same preset and checkpointing.
printf '%s\n' '{"kind": "train", "status": "ok", "preset": "tiny", "ckpt": false, "tokens_per_s": 7.0, "mfu": 0.25}' \
  '{"kind": "train", "status": "ok", "preset": "tiny", "ckpt": true, "tokens_per_s": 9.0, "mfu": 0.5}' >"$work/torch.jsonl"
$PY "$FLEXSP_SOURCE_DIR/bench/gpu/speed_line.py" "$work/r4/summary.json" --device cpu-test --preset tiny \
  --torch "$work/torch.jsonl" --commit abc --out "$work/speed.jsonl" >/dev/null || fail "speed_line failed"
$PY - "$work/speed.jsonl" "$work/r4/summary.json" <<'PYEOF'
import json, sys
line, = [json.loads(l) for l in open(sys.argv[1])]
s = json.load(open(sys.argv[2]))
want = {"commit", "device", "model", "tokens_per_step", "tokens_per_s", "mfu", "torch_tokens_per_s",
        "torch_mfu", "peak_gb", "date"}
assert want <= set(line), line
assert line["mfu"] == s["mfu"] and line["tokens_per_s"] == s["tokens_per_s"], line
assert line["torch_tokens_per_s"] == 7.0 and line["torch_mfu"] == 0.25 and line["commit"] == "abc", line
print("ok: speed_line.py joins the summary and the PyTorch record")
PYEOF
echo '{"schema": "other"}' >"$work/bad.json"
$PY "$FLEXSP_SOURCE_DIR/bench/gpu/speed_line.py" "$work/bad.json" --device x --preset tiny 2>"$work/bad.err" && fail "a foreign summary was taken"
grep -q "bad.json: not a flexsp report summary" "$work/bad.err" || fail "foreign summary: $(cat "$work/bad.err")"

# Without matplotlib (hidden by a stub package that fails to import) the table and CSV
# are still written, the plot is said to be skipped, and the exit code is 0.
mkdir -p "$work/nompl/matplotlib"
echo 'raise ImportError("hidden for the test")' >"$work/nompl/matplotlib/__init__.py"
PYTHONPATH="$work/nompl" "$FLEXSP" report "$work/r1" "$work/r2" --out "$work/out2" >"$work/t2.txt" ||
  fail "report without matplotlib failed"
grep -q '^plot skipped: python3-matplotlib is not installed' "$work/t2.txt" || { cat "$work/t2.txt"; fail "skip not said"; }
[[ -s "$work/out2/scaling.csv" && ! -e "$work/out2/scaling.png" ]] || fail "without matplotlib: CSV only expected"
echo "ok: without matplotlib the table and CSV are written and the plot is skipped"

# Pipeline stages: two stages with positive times in summary.json and report.h5, and the
# stage table in flexsp report (text and --json).
run 2 "$work/rpp2" --parallel.pp_size=2 --train.micro_batch_tokens=256
"$FLEXSP" report "$work/rpp2" >"$work/pp2_table.txt" || fail "report of the pp 2 run failed"
cat "$work/pp2_table.txt"
grep -q "^$work/rpp2 pipeline: 2 stages, 1f1b" "$work/pp2_table.txt" || fail "no pipeline title in flexsp report"
for s in 0 1; do
  grep -qE "^ +$s +[0-9]+-[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+% +[0-9.]+ MB$" "$work/pp2_table.txt" ||
    fail "no stage $s line in flexsp report"
done
"$FLEXSP" inspect "$work/rpp2/report.h5" | grep -q '^  pipeline: 2 stages' || fail "flexsp inspect: no stage table"
"$FLEXSP" report "$work/rpp2" --json >"$work/pp2_report.json"
$PY - "$work/rpp2" "$work/r1" "$work/pp2_report.json" <<'PYEOF'
import json, sys, h5py
pp, plain, rep = sys.argv[1:]
p = json.load(open(pp + "/summary.json"))["pipeline"]
assert p["stages"] == 2 and p["schedule"] == "1f1b" and len(p["per_stage"]) == 2, p
for i, s in enumerate(p["per_stage"]):
    assert s["stage"] == i and s["layers"] >= 1, s
    for k in ("forward_ms", "backward_ms", "p2p_ms", "schedule_ms", "units", "activation_bytes"):
        assert s[k] > 0, (k, s)
    assert 0 <= s["bubble"] < 1 and 0 < s["bubble_formula"] < 1, s
    assert abs(s["bubble"] - s["p2p_ms"] / s["schedule_ms"]) < 1e-9, s
    f = (2 - 1) / (s["units"] + 2 - 1)
    assert abs(s["bubble_formula"] - f) < 1e-9, s
assert p["per_stage"][1]["first_layer"] == p["per_stage"][0]["layers"]
with h5py.File(pp + "/report.h5", "r") as f:
    g = f["pipeline"]
    assert g.attrs["stages"] == 2, dict(g.attrs)
    for k in ("forward_ms", "backward_ms", "p2p_ms", "bubble", "bubble_formula", "activation_bytes"):
        assert g[k].shape == (2,) and all(g[k][:] == [s[k] for s in p["per_stage"]]), k
with h5py.File(plain + "/report.h5", "r") as f:
    assert "pipeline" not in f, "a run without stages has /pipeline"
assert "pipeline" not in json.load(open(plain + "/summary.json"))
r = json.load(open(rep))["runs"][0]
assert r["pipeline"]["per_stage"] == p["per_stage"], r
print("ok: the pipeline's per-stage figures in summary.json, report.h5 and report --json")
PYEOF

mkdir "$work/empty"
expect_error "$work/empty" "$FLEXSP" report "$work/r1" "$work/empty"
expect_error "$work/nowhere" "$FLEXSP_MPIRUN" -np 2 "$FLEXSP" report "$work/nowhere"
expect_error "RUN_DIR" "$FLEXSP" report
echo "report: all checks passed"
