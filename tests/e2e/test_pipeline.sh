# Pipeline parallelism trains the same model as one process (docs/parallel.md): 1F1B with
# pp 2 and 4, with tp 1 and 2, static plans (one device per stage, Ulysses groups inside a
# stage) and flexsp plans (heterogeneous groups inside a stage), ZeRO 0-3, tied
# embeddings (the two copies' gradients summed), an explicit parallel.pp_layers; Seq1F1B
# with 2, 3 and 4 chunks, with tp 1 and 2, Ulysses groups and flexsp plans, activation
# checkpointing, on a corpus of mostly 2-4 token documents (shorter than the chunk count:
# empty segments, empty chunks, empty shards); fp32 to 1e-5 after 10 steps (bf16 like one
# bf16 process), with
# several micro-batches per step so that the warm-up, steady and cool-down phases all run.
# (A learning rate of 5e-4: AdamW turns summation-order noise into weight noise of about lr
# times it per step, and four layers have more of it than two.) A pp 2 checkpoint resumes
# on pp 1 and pp 4, a pp 2 ZeRO-3 one on pp 1 and pp 2 (ZeRO 3 also with node shard
# groups). Each invalid pipeline setting is one clear error.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=512
      --train.global_batch_tokens=3000 --train.steps=10 --optim.lr=5e-4 --optim.warmup_steps=2
      --train.backend=cpu --model.heads=8 --model.kv_heads=2 --model.layers=4)
run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 10 "${base[@]}" "$@"
}

run single 1
run pp2 2 --parallel.pp_size=2 --train.micro_batch_tokens=600
grep -q 'stage 1' "$work/pp2.log" || fail "pp2: the grid does not print stages"
grep -qE '^ +1 +2-3 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9.]+% +[0-9.]+ MB' "$work/pp2.log" ||
  fail "pp2: no per-stage timing and memory report"
trains_like single pp2 1e-5 1e-5
run pp4_layers 4 --parallel.pp_size=4 --parallel.pp_layers=1,1,1,1 --train.micro_batch_tokens=600
trains_like single pp4_layers 1e-5 1e-5
run pp2_tp2 4 --parallel.pp_size=2 --parallel.tp_size=2 --train.micro_batch_tokens=600 \
  --parallel.zero=1
trains_like single pp2_tp2 1e-5 1e-5
run pp2_static_d2 4 --parallel.pp_size=2 --parallel.sp_mode=static --parallel.sp_size=2 \
  --train.micro_batch_tokens=600
trains_like single pp2_static_d2 1e-5 1e-5
run pp2_tp2_flexsp_zero1 8 --parallel.pp_size=2 --parallel.tp_size=2 --parallel.sp_mode=flexsp \
  --parallel.zero=1 --train.micro_batch_tokens=400 --print-plans \
  --planner.cost_model="$FLEXSP_SOURCE_DIR/tests/data/cost_sp_costly.ini"
grep -qE '^  mb.* d=1 ' "$work/pp2_tp2_flexsp_zero1.log" && grep -qE '^  mb.* d=2 ' "$work/pp2_tp2_flexsp_zero1.log" ||
  fail "pp2_tp2_flexsp_zero1: expected groups of one device and of two"
trains_like single pp2_tp2_flexsp_zero1 1e-5 1e-5
# ZeRO 3 within the stages: the stage's units gathered one by one in the schedule's order.
run pp2_zero3 4 --parallel.pp_size=2 --parallel.zero=3 --train.micro_batch_tokens=600
trains_like single pp2_zero3 1e-5 1e-5
run pp2_tp2_zero3 8 --parallel.pp_size=2 --parallel.tp_size=2 --parallel.zero=3 \
  --train.micro_batch_tokens=600
trains_like single pp2_tp2_zero3 1e-5 1e-5

# Seq1F1B: chunks along the sequences; in SP groups of several devices the chunk attention
# runs inside Ulysses.
run seq_pp2_c2_zero1 4 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 \
  --parallel.sp_mode=static --parallel.sp_size=1 --parallel.zero=1 --train.micro_batch_tokens=600
trains_like single seq_pp2_c2_zero1 1e-5 1e-5
run seq_pp2_c2_zero3 4 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 \
  --parallel.zero=3 --train.micro_batch_tokens=600
trains_like single seq_pp2_c2_zero3 1e-5 1e-5
run seq_pp2_flexsp_c4 8 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=4 \
  --parallel.sp_mode=flexsp --train.micro_batch_tokens=400 --print-plans \
  --planner.cost_model="$FLEXSP_SOURCE_DIR/tests/data/cost_sp_costly.ini"
grep -qE '^  mb.* d=1 ' "$work/seq_pp2_flexsp_c4.log" && grep -qE '^  mb.* d=(2|4) ' "$work/seq_pp2_flexsp_c4.log" ||
  fail "seq_pp2_flexsp_c4: expected groups of one device and of several"
trains_like single seq_pp2_flexsp_c4 1e-5 1e-5
# Mostly documents of 1-3 bytes (2-4 tokens with the end of text) and a few headers.
mkdir "$work/tinydocs"
for i in $(seq 1 150); do head -c $((i % 4)) /dev/zero | tr '\0' x >"$work/tinydocs/t$i.txt"; done
ls -S /usr/include/linux/netfilter/*.h | tail -40 | head -12 | xargs -I{} cp {} "$work/tinydocs/"
"$FLEXSP" pack --glob '*' --out "$work/tiny.h5" "$work/tinydocs" >/dev/null
tiny=(--data.path="$work/tiny.h5" --model.preset=tiny --data.max_seq_len=256
      --train.global_batch_tokens=1000 "${base[@]:4}")  # base's other keys
run_tiny() { local name=$1 np=$2; shift 2; train_run "$name" "$np" 10 "${tiny[@]}" "$@"; }
run_tiny tiny_single 1
run_tiny seq_pp4_c4_tiny 4 --parallel.pp_size=4 --parallel.pp_schedule=seq1f1b \
  --parallel.seq_chunks=4 --train.micro_batch_tokens=300
trains_like tiny_single seq_pp4_c4_tiny 1e-5 1e-5
run_tiny seq_pp2_tp2_c4_tiny 4 --parallel.pp_size=2 --parallel.tp_size=2 \
  --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=4 --train.micro_batch_tokens=300
trains_like tiny_single seq_pp2_tp2_c4_tiny 1e-5 1e-5
run_tiny seq_pp2_d2_c4_tiny 4 --parallel.pp_size=2 --parallel.sp_mode=static --parallel.sp_size=2 \
  --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=4 --train.micro_batch_tokens=300
trains_like tiny_single seq_pp2_d2_c4_tiny 1e-5 1e-5
run_tiny tiny_single_ckpt 1 --model.checkpoint_activations=true
run_tiny seq_pp2_c3_ckpt_tiny 2 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b \
  --parallel.seq_chunks=3 --train.micro_batch_tokens=300 --model.checkpoint_activations=true
trains_like tiny_single_ckpt seq_pp2_c3_ckpt_tiny 1e-5 1e-5

# bf16 (the CPU emulation): Seq1F1B x Ulysses like one bf16 process, to bf16 noise.
run bf16_single 1 --train.precision=bf16
run bf16_seq_pp2_d2 4 --train.precision=bf16 --parallel.pp_size=2 --parallel.sp_mode=static \
  --parallel.sp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 --train.micro_batch_tokens=600
trains_like bf16_single bf16_seq_pp2_d2 1e-3 2e-2

# Tied embeddings: the first and the last stage each hold a copy.
run single_tied 1 --model.tie_embeddings=true
run pp4_tied 4 --parallel.pp_size=4 --model.tie_embeddings=true --train.micro_batch_tokens=600
trains_like single_tied pp4_tied 1e-5 1e-5
run pp2_tied_zero2 4 --parallel.pp_size=2 --model.tie_embeddings=true --parallel.zero=2 \
  --train.micro_batch_tokens=1200
trains_like single_tied pp2_tied_zero2 1e-5 1e-5
run pp2_tied_zero3 4 --parallel.pp_size=2 --model.tie_embeddings=true --parallel.zero=3 \
  --train.micro_batch_tokens=1200
trains_like single_tied pp2_tied_zero3 1e-5 1e-5
# ... and with node shard groups (emulated nodes of 2 ranks, 2 nodes per stage).
run pp2_tied_zero3_nodes 8 --ranks-per-node 2 --parallel.pp_size=2 --model.tie_embeddings=true \
  --parallel.zero=3 --parallel.zero_param_group=node --parallel.zero_grad_group=node \
  --parallel.zero_optim_group=world --train.micro_batch_tokens=600
trains_like single_tied pp2_tied_zero3_nodes 1e-5 1e-5

# Checkpoints hold the whole model: a pp 2 run (ZeRO 1 over 2 devices per stage, tied
# embeddings) stopped at step 5 resumes with pp 1 and pp 4 and continues as if it had not
# stopped.
run ck_pp2 4 --parallel.pp_size=2 --model.tie_embeddings=true --parallel.zero=1 \
  --train.micro_batch_tokens=1200 --checkpoint.dir="$work/ck" --checkpoint.every=5
trains_like single_tied ck_pp2 1e-5 1e-5
"$FLEXSP" inspect "$work/ck/step_00000005.h5" >/dev/null || fail "the pp 2 checkpoint does not verify"
tail -5 "$work/single_tied.steps" >"$work/single_tail.steps"
cp "$work/single_tied.h5" "$work/single_tail.h5"
resume() {  # NAME DIR PP ZERO: resumes DIR's step 5 on 4 ranks, trains like single_tail
  local name=$1 dir=$2
  rm -f "$dir/step_00000010.h5"
  echo step_00000005.h5 >"$dir/latest"
  "$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train "${base[@]}" --model.tie_embeddings=true \
    --parallel.pp_size="$3" --parallel.zero="$4" --train.micro_batch_tokens=1200 \
    --checkpoint.dir="$dir" --resume auto --dump-weights="$work/$name.h5" \
    >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name: resume with pp $3 failed"; }
  progress "$work/$name.log" >"$work/$name.steps"
  trains_like single_tail "$name" 1e-5 1e-5
}
for pp in 1 4; do resume "resume_pp$pp" "$work/ck" "$pp" 1; done

# The same with ZeRO 3 (each stage's shards, the tied embedding's restored on the last
# stage), resumed on pp 1 and on pp 2.
run ck3_pp2 4 --parallel.pp_size=2 --model.tie_embeddings=true --parallel.zero=3 \
  --train.micro_batch_tokens=1200 --checkpoint.dir="$work/ck3" --checkpoint.every=5
trains_like single_tied ck3_pp2 1e-5 1e-5
"$FLEXSP" inspect "$work/ck3/step_00000005.h5" >/dev/null || fail "the pp 2 ZeRO-3 checkpoint does not verify"
for pp in 1 2; do resume "resume3_pp$pp" "$work/ck3" "$pp" 3; done

# Bad settings: one clear error naming the key, on every rank, no hang.
np() { "$FLEXSP_MPIRUN" -np "$1" --oversubscribe "$FLEXSP" train "${base[@]}" "${@:2}"; }
expect_error "parallel.pp_size" np 3 --parallel.pp_size=2
expect_error "parallel.pp_size" np 8 --parallel.pp_size=8
expect_error "parallel.pp_layers" np 2 --parallel.pp_size=2 --parallel.pp_layers=1,2
expect_error "parallel.pp_layers" np 2 --parallel.pp_size=2 --parallel.pp_layers=4
expect_error "parallel.zero_optim_group" np 2 --parallel.pp_size=2 --parallel.zero=3 \
  --parallel.zero_param_group=world --parallel.zero_grad_group=world --parallel.zero_optim_group=node

echo "ok: pipeline parallelism"
