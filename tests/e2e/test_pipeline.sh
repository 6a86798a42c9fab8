# Pipeline parallelism trains the same model as one process (docs/parallel.md): 1F1B with
# pp 2 and 4, with tp 1 and 2, static plans (one device per stage, Ulysses groups inside a
# stage) and flexsp plans (heterogeneous groups inside a stage), ZeRO 0 and 1, tied
# embeddings (the two copies' gradients summed), an explicit parallel.pp_layers; fp32 to
# 1e-5 after 10 steps, with several micro-batches per step so that the warm-up, steady
# and cool-down phases all run. Each invalid pipeline setting is one clear error.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=512
      --train.global_batch_tokens=3000 --train.steps=10 --optim.lr=1e-3 --optim.warmup_steps=2
      --train.backend=cpu --model.heads=8 --model.kv_heads=2 --model.layers=4)
run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 10 "${base[@]}" "$@"
}

run single 1
run pp2 2 --parallel.pp_size=2 --train.micro_batch_tokens=600
grep -q 'stage 1' "$work/pp2.log" || fail "pp2: the grid does not print stages"
trains_like single pp2 1e-5 1e-5
run pp4_layers 4 --parallel.pp_size=4 --parallel.pp_layers=1,1,1,1 --train.micro_batch_tokens=600
trains_like single pp4_layers 1e-5 1e-5
run pp2_tp2 4 --parallel.pp_size=2 --parallel.tp_size=2 --train.micro_batch_tokens=600 \
  --parallel.zero=1
trains_like single pp2_tp2 1e-5 2e-5
run pp2_static_d2 4 --parallel.pp_size=2 --parallel.sp_mode=static --parallel.sp_size=2 \
  --train.micro_batch_tokens=600
trains_like single pp2_static_d2 1e-5 1e-5
run pp2_tp2_flexsp_zero1 8 --parallel.pp_size=2 --parallel.tp_size=2 --parallel.sp_mode=flexsp \
  --parallel.zero=1 --train.micro_batch_tokens=400 --print-plans \
  --planner.cost_model="$FLEXSP_SOURCE_DIR/tests/data/cost_sp_costly.ini"
grep -qE '^  mb.* d=1 ' "$work/pp2_tp2_flexsp_zero1.log" && grep -qE '^  mb.* d=2 ' "$work/pp2_tp2_flexsp_zero1.log" ||
  fail "pp2_tp2_flexsp_zero1: expected groups of one device and of two"
trains_like single pp2_tp2_flexsp_zero1 1e-5 2e-5

# Tied embeddings: the first and the last stage each hold a copy.
run single_tied 1 --model.tie_embeddings=true
run pp4_tied 4 --parallel.pp_size=4 --model.tie_embeddings=true --train.micro_batch_tokens=600
trains_like single_tied pp4_tied 1e-5 1e-5

# Checkpoints hold the whole model: a pp 2 run (ZeRO 1 over 2 devices per stage, tied
# embeddings) stopped at step 5 resumes with pp 1 and pp 4 and continues as if it had not
# stopped.
run ck_pp2 4 --parallel.pp_size=2 --model.tie_embeddings=true --parallel.zero=1 \
  --train.micro_batch_tokens=1200 --checkpoint.dir="$work/ck" --checkpoint.every=5
trains_like single_tied ck_pp2 1e-5 1e-5
"$FLEXSP" inspect "$work/ck/step_00000005.h5" >/dev/null || fail "the pp 2 checkpoint does not verify"
tail -5 "$work/single_tied.steps" >"$work/single_tail.steps"
cp "$work/single_tied.h5" "$work/single_tail.h5"
for pp in 1 4; do
  rm -f "$work/ck/step_00000010.h5"
  echo step_00000005.h5 >"$work/ck/latest"
  "$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train "${base[@]}" --model.tie_embeddings=true \
    --parallel.pp_size="$pp" --parallel.zero=1 --train.micro_batch_tokens=1200 \
    --checkpoint.dir="$work/ck" --resume auto --dump-weights="$work/resume_pp$pp.h5" \
    >"$work/resume_pp$pp.log" 2>&1 || { cat "$work/resume_pp$pp.log"; fail "resume with pp $pp failed"; }
  progress "$work/resume_pp$pp.log" >"$work/resume_pp$pp.steps"
  trains_like single_tail "resume_pp$pp" 1e-5 1e-5
done

# Bad settings: one clear error naming the key, on every rank, no hang.
np() { "$FLEXSP_MPIRUN" -np "$1" --oversubscribe "$FLEXSP" train "${base[@]}" "${@:2}"; }
expect_error "parallel.pp_size" np 3 --parallel.pp_size=2
expect_error "parallel.pp_size" np 8 --parallel.pp_size=8
expect_error "parallel.pp_layers" np 2 --parallel.pp_size=2 --parallel.pp_layers=1,2
expect_error "parallel.pp_layers" np 2 --parallel.pp_size=2 --parallel.pp_layers=4
expect_error "parallel.zero" np 2 --parallel.pp_size=2 --parallel.zero=3
echo "ok: pipeline parallelism"
