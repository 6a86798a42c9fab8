#!/usr/bin/env bash
# flexsp profile on 4 ranks in 2 emulated nodes (tiny model, short lengths): compute for
# d = 1, 2, 4 (Ulysses; single sequences and packed micro-batches), all-to-alls within
# and across nodes and the per-step ZeRO all-reduce and optimizer; then flexsp plan with
# the cost-model file it wrote; the same in bf16 (the CPU backend's emulation: all-to-alls
# of 2-byte activations); a bad option is one clear error on every rank.
source "$(dirname "$0")/lib.sh"

"$FLEXSP_MPIRUN" -np 4 "$FLEXSP" profile --model tiny --ranks-per-node 2 \
  --seq-lens 32,64,128,256 --repeats 2 --micro-batch-tokens 128 --out "$work/cm.ini" >"$work/out.txt"
cat "$work/out.txt"
grep -q "relative RMS error" "$work/out.txt" || fail "no fit error printed"
for d in 1 2 4; do  # compute timed for every group size, sequence-parallel ones included
  grep -qE "^compute  s=256 +d=$d " "$work/out.txt" || fail "no compute point for d=$d"
done
grep -q "^bw_intra_2 = " "$work/cm.ini" || fail "no intra-node bandwidth for d=2"
grep -q "^bw_tp_2 = " "$work/cm.ini" || fail "no tensor-parallel bandwidth for tp=2"
grep -q "^bw_tp_4 = " "$work/cm.ini" && fail "tp=4 measured across 2-rank nodes"
grep -q "^bw_inter_4 = " "$work/cm.ini" || fail "no inter-node bandwidth for d=4"
grep -q "^a2_ms = " "$work/cm.ini" || fail "no a2"
for d in 1 2 4; do  # packed micro-batches: what tells fixed_ms from per_sequence_ms
  grep -qE "^compute  s=8x32 +d=$d " "$work/out.txt" || fail "no packed compute point for d=$d"
done
grep -qE "^per_sequence_ms = [0-9.e+-]+$" "$work/cm.ini" || fail "no per_sequence_ms"
# --micro-batch-tokens 128: a full micro-batch of 4 x 128 tokens on d = 4 (none below:
# d x 128 / 256 < 2 sequences)
grep -qE "^compute  s=2x256 +d=4 " "$work/out.txt" || fail "no full micro-batch point for d=4"
grep -qE "^compute  s=[0-9]+x256 +d=[12] " "$work/out.txt" && fail "a full micro-batch point below d=4"
grep -q "^point-to-point intra" "$work/out.txt" || fail "no intra-node point-to-point measurement"
grep -q "^point-to-point inter" "$work/out.txt" || fail "no inter-node point-to-point measurement"
grep -qE "^bw_p2p_intra = [0-9.e+-]+$" "$work/cm.ini" || fail "no bw_p2p_intra"
grep -qE "^bw_p2p_inter = [0-9.e+-]+$" "$work/cm.ini" || fail "no bw_p2p_inter"
grep -q "^per step: ZeRO all-reduce" "$work/out.txt" || fail "no per-step measurement"
for k in bw_zero_intra bw_zero_inter optimizer_ns_per_param bw_h2d; do  # measured: positive
  grep -qE "^$k = [0-9.]*[1-9][0-9.e+-]*$" "$work/cm.ini" || fail "no measured $k"
done
grep -q "^bytes_per_element = 4$" "$work/cm.ini" || fail "fp32: expected 4 bytes per element"
grep -q "cpu backend, f32 activations" "$work/cm.ini" || fail "the header names backend and precision"

"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" profile --model tiny --precision bf16 \
  --seq-lens 32,64,128 --repeats 1 --out "$work/cm_bf16.ini" >"$work/out_bf16.txt" ||
  { cat "$work/out_bf16.txt"; fail "profile in bf16"; }
grep -q "^bytes_per_element = 2$" "$work/cm_bf16.ini" || fail "bf16: expected 2 bytes per element"
grep -q "(bf16 activations), comm mpi" "$work/out_bf16.txt" || fail "bf16: start-up line"
echo "ok: profile in bf16"

seq 2 500 | awk '{print ($1 * 131) % 600 + 2}' >"$work/lengths.txt"
"$FLEXSP" plan --lengths "$work/lengths.txt" --model tiny --cost-model "$work/cm.ini" \
  --gpus 4 --gpus-per-node 2 --mem-per-gpu-gb 0.1 --global-batch-seqs 32 --steps 2 \
  --max-seq-len 512 --time-limit-ms 100 >"$work/plan.txt"
grep -q "summary over 2 steps" "$work/plan.txt" || fail "plan with the profiled cost model"
"$FLEXSP" plan --lengths "$work/lengths.txt" --model tiny --cost-model "$work/cm.ini" \
  --gpus 4 --gpus-per-node 2 --mem-per-gpu-gb 0.1 --global-batch-seqs 32 --steps 2 \
  --max-seq-len 512 --time-limit-ms 100 --cp-mode ring --pp 2 >"$work/plan_ring.txt"
grep -q "summary over 2 steps" "$work/plan_ring.txt" || fail "ring + pipeline plan with the profiled cost model"
echo "ok: profile -> plan"
expect_error "--precision" "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" profile \
  --precision fp8 --out "$work/x.ini"
expect_error "profile: --out FILE is required" "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" profile
expect_error "--micro-batch-tokens: must be >= 0" "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" profile \
  --micro-batch-tokens -1 --out "$work/x.ini"
