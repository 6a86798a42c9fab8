#!/usr/bin/env bash
# Predicted against measured in flexsp report: fit a cost model with flexsp profile (4
# ranks, 2 emulated nodes, the small model), train 8 flexsp steps with it and a report
# dir, and check the report's prediction line and --json fields: the step-time error
# distribution over the 7 steps after the first, and the peak memory, where the memory
# model must bound the allocator's count from above (to 2%): the planner relies on that.
# How close either prediction comes depends on the machine (the plans follow the fitted
# profile, and the measured peak the group sizes the plans used): those figures and their
# targets are bench/bench_prediction.sh's, not this test's.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
pack_small_corpus "$work/data.h5"
"$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" profile --model small --ranks-per-node 2 \
  --seq-lens 128,256,512 --repeats 1 --out "$work/cm.ini" >"$work/profile.txt" ||
  { cat "$work/profile.txt"; fail "profile"; }
"$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train --data.path="$work/data.h5" --model.preset=small \
  --data.max_seq_len=1024 --train.global_batch_tokens=8192 --train.steps=8 --train.backend=cpu \
  --train.micro_batch_tokens=2048 --parallel.sp_mode=flexsp --planner.cost_model="$work/cm.ini" \
  --ranks-per-node 2 --report.dir="$work/run" --report.peak_tflops=0.2 >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; fail "train"; }

"$FLEXSP" report "$work/run" >"$work/report.txt"
cat "$work/report.txt"
grep -qE "run: step time: median [-+][0-9.]+%, p10 .* over 7 steps; peak memory: predicted .* GB, measured .* GB" \
  "$work/report.txt" || fail "no prediction line"
"$FLEXSP" report "$work/run" --json >"$work/report.json"
$PY - "$work/report.json" <<'PYEOF'
import json, math, sys
p = json.load(open(sys.argv[1]))["runs"][0]["prediction"]
assert p["steps"] == 7, p
for k in ["step_time_error_median", "step_time_error_p10", "step_time_error_p90",
          "step_time_error_max_abs", "peak_mem_error"]:
    assert k in p and math.isfinite(p[k]), (k, p)
assert p["step_time_error_p10"] <= p["step_time_error_median"] <= p["step_time_error_p90"], p
assert p["step_time_error_max_abs"] >= abs(p["step_time_error_median"]), p
assert p["step_time_error_median"] > -1, p  # a prediction, not zero
assert p["peak_mem_error"] >= -0.02, p  # predicted / measured - 1: never below the measured peak
print("ok: prediction over 7 steps (step time error median %+.1f%%, not judged here), "
      "peak memory bounded from above (%+.2f%%)" % (100 * p["step_time_error_median"], 100 * p["peak_mem_error"]))
PYEOF
