#!/usr/bin/env bash
# flexsp profile on 4 ranks in 2 emulated nodes (tiny model, short lengths): compute for
# d = 1, 2, 4 (Ulysses) and all-to-alls within and across nodes; then flexsp plan with
# the cost-model file it wrote; a bad option is one clear error on every rank.
source "$(dirname "$0")/lib.sh"

"$FLEXSP_MPIRUN" -np 4 "$FLEXSP" profile --model tiny --ranks-per-node 2 \
  --seq-lens 32,64,128,256 --repeats 2 --out "$work/cm.ini" >"$work/out.txt"
cat "$work/out.txt"
grep -q "relative RMS error" "$work/out.txt" || fail "no fit error printed"
for d in 1 2 4; do  # compute timed for every group size, sequence-parallel ones included
  grep -qE "^compute  s=256 +d=$d " "$work/out.txt" || fail "no compute point for d=$d"
done
grep -q "^bw_intra_2 = " "$work/cm.ini" || fail "no intra-node bandwidth for d=2"
grep -q "^bw_inter_4 = " "$work/cm.ini" || fail "no inter-node bandwidth for d=4"
grep -q "^a2_ms = " "$work/cm.ini" || fail "no a2"

seq 2 500 | awk '{print ($1 * 131) % 600 + 2}' >"$work/lengths.txt"
"$FLEXSP" plan --lengths "$work/lengths.txt" --model tiny --cost-model "$work/cm.ini" \
  --gpus 4 --gpus-per-node 2 --mem-per-gpu-gb 0.1 --global-batch-seqs 32 --steps 2 \
  --max-seq-len 512 --time-limit-ms 100 >"$work/plan.txt"
grep -q "summary over 2 steps" "$work/plan.txt" || fail "plan with the profiled cost model"
echo "ok: profile -> plan"
expect_error "profile: --out FILE is required" "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" profile
