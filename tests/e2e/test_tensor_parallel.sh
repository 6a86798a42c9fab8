# Tensor parallelism trains the same model as one process (docs/parallel.md): tp 1, 2 and
# 4 under static, batch_adaptive and flexsp plans (heterogeneous groups of devices), ZeRO
# 0, 1, 2 and 3, emulated nodes, activation checkpointing, fp32 to 1e-5 and bf16 like one
# bf16 process. The vocabulary is the bytes tokenizer's 257 (not a multiple of tp: padded
# shards); with 8 heads and 2 kv heads, tp 2 splits the kv heads and tp 4 replicates them.
# A tp 2 checkpoint resumes with tp 1 and tp 4 and continues as if it had not stopped (ZeRO 1
# and ZeRO 3 on both sides);
# each invalid tp setting is one clear error on every rank.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=512
      --train.global_batch_tokens=3000 --train.steps=10 --optim.lr=1e-3 --optim.warmup_steps=2
      --train.backend=cpu)
common=("${base[@]}" --model.heads=8 --model.kv_heads=2)

run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 10 "${common[@]}" "$@"
}
check() { trains_like single "$1" 1e-5 1e-5; }

run single 1
run tp2_np2 2 --parallel.tp_size=2
grep -q 'device   0  tp 1' "$work/tp2_np2.log" || fail "tp2_np2: the grid does not print tp coordinates"
check tp2_np2
run tp4_np4_ckpt 4 --parallel.tp_size=4 --model.checkpoint_activations=true
check tp4_np4_ckpt
run tp2_np4_static_d2_zero1 4 --parallel.tp_size=2 --parallel.sp_mode=static --parallel.sp_size=2 \
  --parallel.zero=1
check tp2_np4_static_d2_zero1
run tp2_np8_flexsp_zero3 8 --parallel.tp_size=2 --parallel.sp_mode=flexsp --ranks-per-node 4 \
  --parallel.zero=3 --train.micro_batch_tokens=400 --print-plans \
  --planner.cost_model="$FLEXSP_SOURCE_DIR/tests/data/cost_sp_costly.ini" --report.dir="$work/report"
grep -qE '^  mb.* d=1 ' "$work/tp2_np8_flexsp_zero3.log" && grep -qE '^  mb.* d=(2|4) ' "$work/tp2_np8_flexsp_zero3.log" ||
  fail "tp2_np8_flexsp_zero3: expected groups of one device and of several"
check tp2_np8_flexsp_zero3
head -1 "$work/report/steps.csv" | grep -q 'tp_comm' || fail "steps.csv has no tp_comm phase"
grep -qE '^  tp_comm +[0-9.]+ +[0-9.]+ +[0-9.]+' "$work/tp2_np8_flexsp_zero3.log" || fail "no tp_comm row"
run tp4_np8_adaptive_zero2 8 --parallel.tp_size=4 --parallel.sp_mode=batch_adaptive --ranks-per-node 4 \
  --parallel.zero=2 --parallel.zero_grad_group=node --parallel.zero_optim_group=node \
  --train.micro_batch_tokens=300
check tp4_np8_adaptive_zero2
run tp2_np4_zero3_node 4 --parallel.tp_size=2 --parallel.zero=3 --parallel.zero_param_group=node \
  --ranks-per-node 2
check tp2_np4_zero3_node

# bf16 (the CPU emulation): tp 2 x d 2 like one bf16 process, to bf16 noise.
run bf16_single 1 --train.precision=bf16
run bf16_tp2_np4 4 --train.precision=bf16 --parallel.tp_size=2 --parallel.sp_mode=static --parallel.sp_size=2
trains_like bf16_single bf16_tp2_np4 1e-3 2e-2

# Checkpoints hold whole tensors: a tp 2 run stopped at step 5 resumes with tp 1 and tp 4.
run ck_tp2 2 --parallel.tp_size=2 --checkpoint.dir="$work/ck" --checkpoint.every=5 --parallel.zero=1
/usr/bin/python3 - "$work/ck/step_00000005.h5" <<'PY'
import sys, h5py
f = h5py.File(sys.argv[1], "r")
assert f["model/model.embed_tokens.weight"].shape == (257, 64), f["model/model.embed_tokens.weight"].shape
assert f["model/model.layers.0.self_attn.k_proj.weight"].shape == (16, 64)
print("ok: the checkpoint holds whole tensors")
PY
"$FLEXSP" inspect "$work/ck/step_00000005.h5" >/dev/null || fail "the tp 2 checkpoint does not verify"
for tp in 1 4; do
  rm -f "$work/ck/step_00000010.h5"
  echo step_00000005.h5 >"$work/ck/latest"
  "$FLEXSP_MPIRUN" -np "$tp" --oversubscribe "$FLEXSP" train "${common[@]}" --parallel.tp_size="$tp" \
    --checkpoint.dir="$work/ck" --resume auto --dump-weights="$work/resume_tp$tp.h5" \
    >"$work/resume_tp$tp.log" 2>&1 || { cat "$work/resume_tp$tp.log"; fail "resume with tp $tp failed"; }
  progress "$work/resume_tp$tp.log" >"$work/resume_tp$tp.steps"
  tail -5 "$work/single.steps" >"$work/single_tail.steps"
  cp "$work/single.h5" "$work/single_tail.h5"
  trains_like single_tail "resume_tp$tp" 1e-5 1e-5
done

# ZeRO 3 shards each tp rank's block over its data-parallel peers: a tp 2 x d 2 run saved
# at step 5 resumes with tp 1 on 2 ranks and tp 4 on 4 ranks, ZeRO 3 on both sides.
run ck_tp2_zero3 4 --parallel.tp_size=2 --parallel.zero=3 --checkpoint.dir="$work/ck3" --checkpoint.every=5
for layout in "2 1" "4 4"; do
  read -r np tp <<<"$layout"
  rm -f "$work/ck3/step_00000010.h5"
  echo step_00000005.h5 >"$work/ck3/latest"
  "$FLEXSP_MPIRUN" -np "$np" --oversubscribe "$FLEXSP" train "${common[@]}" --parallel.tp_size="$tp" \
    --parallel.zero=3 --checkpoint.dir="$work/ck3" --resume auto --dump-weights="$work/resume3_tp$tp.h5" \
    >"$work/resume3_tp$tp.log" 2>&1 || { cat "$work/resume3_tp$tp.log"; fail "ZeRO 3 resume with tp $tp failed"; }
  progress "$work/resume3_tp$tp.log" >"$work/resume3_tp$tp.steps"
  trains_like single_tail "resume3_tp$tp" 1e-5 1e-5
done

# Bad settings: one clear error naming the key, on every rank, no hang.
expect_error "parallel.tp_size" "$FLEXSP_MPIRUN" -np 3 --oversubscribe "$FLEXSP" train "${common[@]}" \
  --parallel.tp_size=3
expect_error "parallel.tp_size" "$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train "${common[@]}" \
  --parallel.tp_size=4 --ranks-per-node 2
expect_error "parallel.tp_size" "$FLEXSP_MPIRUN" -np 8 --oversubscribe "$FLEXSP" train "${base[@]}" \
  --parallel.tp_size=8
expect_error "parallel.tp_size" "$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train "${common[@]}" \
  --parallel.tp_size=4 --model.ffn=102
echo "ok: tensor parallelism"
