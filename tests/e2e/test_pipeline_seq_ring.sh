# Ring attention and USP inside Seq1F1B stages (docs/parallel.md, lib/runtime/ring_chunks.h):
# each chunk of a micro-batch is zigzag-split over the ring and its queries see the earlier
# chunks' keys/values, which the ring carries along. Trains the same model as one process
# (fp32, 1e-5 after 10 steps) on a corpus of mostly 1-3 byte documents (2-4 tokens: shorter
# than 2r and than the chunk count) and a few headers: ring d = 2 on a 2-head model with 2
# and 4 chunks, ZeRO 0, 1 and 3, with tp 2; USP u = 2 x r = 2 on 8 heads; flexsp plans under
# cp_mode auto whose groups of 4 on 2 heads are Ulysses x ring; activation checkpointing;
# a ring run stopped at step 5 resumes (on another layout) and continues as if it had not;
# micro-batches of one tiny document (chunks of one token, ring positions with none).
source "$(dirname "$0")/lib.sh"
mkdir "$work/docs"
for i in $(seq 1 120); do head -c $((i % 4)) /dev/zero | tr '\0' x >"$work/docs/t$i.txt"; done
ls -S /usr/include/linux/netfilter/*.h | tail -40 | head -10 | xargs -I{} cp {} "$work/docs/"
"$FLEXSP" pack --glob '*' --out "$work/data.h5" "$work/docs" >/dev/null

common=(--model.preset=tiny --train.steps=10 --optim.lr=5e-4 --optim.warmup_steps=2 --train.backend=cpu
        --model.layers=4)
base=(--data.path="$work/data.h5" --data.max_seq_len=256 --train.global_batch_tokens=1000 "${common[@]}")
pipe=(--parallel.pp_size=2 --parallel.pp_schedule=seq1f1b)
h2=(--model.heads=2 --model.kv_heads=2)
h8=(--model.heads=8 --model.kv_heads=2)
run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 10 "${base[@]}" "${pipe[@]}" "$@"
}
single() {  # name args...: one process, no pipeline
  local name=$1; shift
  train_run "$name" 1 10 "${base[@]}" "$@"
}
ring2=(--parallel.sp_mode=static --parallel.sp_size=2 --parallel.cp_mode=ring --train.micro_batch_tokens=300)

single single_h2 "${h2[@]}"
run seq_ring_c2 4 "${h2[@]}" "${ring2[@]}" --parallel.seq_chunks=2
trains_like single_h2 seq_ring_c2 1e-5 1e-5
run seq_ring_c4_zero1 4 "${h2[@]}" "${ring2[@]}" --parallel.seq_chunks=4 --parallel.zero=1
trains_like single_h2 seq_ring_c4_zero1 1e-5 1e-5
# ZeRO 3 within the stage: its units gathered per chunk around the ring chunks.
run seq_ring_c2_zero3 4 "${h2[@]}" "${ring2[@]}" --parallel.seq_chunks=2 --parallel.zero=3
trains_like single_h2 seq_ring_c2_zero3 1e-5 1e-5
# tp 2 inside: the ring's positions are padded to u * tp tokens, per chunk.
run seq_tp2_ring_c2 8 "${h2[@]}" "${ring2[@]}" --parallel.seq_chunks=2 --parallel.tp_size=2
trains_like single_h2 seq_tp2_ring_c2 1e-5 1e-5

single single_h8 "${h8[@]}"
run seq_usp_c4_zero1 8 "${h8[@]}" --parallel.sp_mode=static --parallel.sp_size=4 \
  --parallel.cp_mode=usp --ranks-per-node 2 --train.micro_batch_tokens=300 --parallel.seq_chunks=4 --parallel.zero=1
trains_like single_h8 seq_usp_c4_zero1 1e-5 1e-5

# 2 heads: a group of 4 devices is u = 2 x r = 2 under auto, beside groups of 1 and 2.
run seq_flexsp_auto_c2 8 "${h2[@]}" --parallel.sp_mode=flexsp --parallel.seq_chunks=2 \
  --train.micro_batch_tokens=100 --print-plans \
  --planner.cost_model="$FLEXSP_SOURCE_DIR/tests/data/cost_sp_costly.ini"
grep -qE '^  mb.* d=4 ' "$work/seq_flexsp_auto_c2.log" ||
  fail "seq_flexsp_auto_c2: expected groups of 4 devices (wider than the 2 heads)"
trains_like single_h2 seq_flexsp_auto_c2 1e-5 1e-5

# Activation checkpointing re-runs a layer's forward, ring included, before its backward.
single single_h2_ckpt "${h2[@]}" --model.checkpoint_activations=true
run seq_ring_c2_ckpt 4 "${h2[@]}" "${ring2[@]}" --parallel.seq_chunks=2 \
  --model.checkpoint_activations=true --checkpoint.dir="$work/ck" --checkpoint.every=5
trains_like single_h2_ckpt seq_ring_c2_ckpt 1e-5 1e-5
# Resume its step 5 with 4 chunks and ZeRO 1: nothing of the ring layout is saved.
rm -f "$work/ck/step_00000010.h5"
echo step_00000005.h5 >"$work/ck/latest"
"$FLEXSP_MPIRUN" -np 4 --oversubscribe "$FLEXSP" train "${base[@]}" "${pipe[@]}" "${h2[@]}" "${ring2[@]}" \
  --parallel.seq_chunks=4 --parallel.zero=1 --model.checkpoint_activations=true \
  --checkpoint.dir="$work/ck" --resume auto --dump-weights="$work/resumed.h5" \
  >"$work/resumed.log" 2>&1 || { cat "$work/resumed.log"; fail "resume failed"; }
progress "$work/resumed.log" >"$work/resumed.steps"
tail -5 "$work/single_h2_ckpt.steps" >"$work/single_tail.steps"
cp "$work/single_h2_ckpt.h5" "$work/single_tail.h5"
trains_like single_tail resumed 1e-5 1e-5

# Micro-batches of one or two 2-5 token documents cut into 4 chunks: chunks of one token,
# ring positions with none. Losses and gradient norms to 1e-5; the weights are not compared
# (their q/k gradients nearly cancel on such documents, so AdamW turns summation-order
# noise into ~3e-5 weight differences -- Ulysses groups show the same).
mkdir "$work/tiny"
for i in $(seq 1 80); do head -c $((i % 4 + 1)) /dev/zero | tr '\0' x >"$work/tiny/t$i.txt"; done
"$FLEXSP" pack --glob '*' --out "$work/tiny.h5" "$work/tiny" >/dev/null
tiny=("${common[@]}" "${h2[@]}" --data.path="$work/tiny.h5" --data.max_seq_len=8 --train.global_batch_tokens=48)
train_run tiny_single 1 10 "${tiny[@]}"
train_run seq_ring_c4_tiny 4 10 "${tiny[@]}" "${pipe[@]}" --parallel.seq_chunks=4 --parallel.sp_mode=static \
  --parallel.sp_size=2 --parallel.cp_mode=ring --train.micro_batch_tokens=3
losses_close tiny_single seq_ring_c4_tiny 1e-5
grad_norms_close tiny_single seq_ring_c4_tiny 1e-5
echo "ok: seq_ring_c4_tiny: losses and gradient norms like tiny_single (largest relative difference $close_max)"

echo "ok: ring attention and USP inside Seq1F1B stages"
