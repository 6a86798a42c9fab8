# Ring attention and USP inside pipeline stages (docs/parallel.md): 1F1B stages run SP
# groups with a ring (r > 1) as the plain executor does, and train the same model as one
# process (fp32, 1e-5 after 10 steps; lr 5e-4 as test_ring_equivalence.sh, whose zigzag
# layout sums weight gradients in another order). Cases: pp 2 x ring d = 2 on a 2-head
# model (also with tp 2), pp 2 x USP u = 2, r = 2 (nodes of 2 ranks keep u inside a
# node) on 8 ranks, and flexsp plans under cp_mode auto on the 2-head model, whose groups
# of 4 must be Ulysses x ring. (Seq1F1B stages with a ring: test_pipeline_seq_ring.sh.)
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=512
      --train.global_batch_tokens=3000 --train.steps=10 --optim.lr=5e-4 --optim.warmup_steps=2
      --train.backend=cpu --model.layers=4)
h2=("${base[@]}" --model.heads=2 --model.kv_heads=2)
h8=("${base[@]}" --model.heads=8 --model.kv_heads=2)

train_run single_h2 1 10 "${h2[@]}"
train_run pp2_ring_d2 4 10 "${h2[@]}" --parallel.pp_size=2 --parallel.sp_mode=static --train.micro_batch_tokens=600 \
  --parallel.sp_size=2 --parallel.cp_mode=ring
trains_like single_h2 pp2_ring_d2 1e-5 1e-5
# With tp 2 inside: the ring's positions are padded to u * tp tokens, not the stream.
train_run pp2_tp2_ring_d2 8 10 "${h2[@]}" --parallel.pp_size=2 --parallel.tp_size=2 \
  --parallel.sp_mode=static --parallel.sp_size=2 --parallel.cp_mode=ring --train.micro_batch_tokens=600
trains_like single_h2 pp2_tp2_ring_d2 1e-5 1e-5

train_run single_h8 1 10 "${h8[@]}"
train_run pp2_usp_u2r2 8 10 "${h8[@]}" --parallel.pp_size=2 --parallel.sp_mode=static --train.micro_batch_tokens=600 \
  --parallel.sp_size=4 --parallel.cp_mode=usp --ranks-per-node 2
trains_like single_h8 pp2_usp_u2r2 1e-5 1e-5

# 2 heads: a group of 4 devices is u = 2 x r = 2 under auto.
train_run pp2_flexsp_auto_h2 8 10 "${h2[@]}" --parallel.pp_size=2 --parallel.sp_mode=flexsp \
  --train.micro_batch_tokens=200 --print-plans \
  --planner.cost_model="$FLEXSP_SOURCE_DIR/tests/data/cost_sp_costly.ini"
grep -qE '^  mb.* d=4 ' "$work/pp2_flexsp_auto_h2.log" ||
  fail "pp2_flexsp_auto_h2: expected groups of 4 devices (wider than the 2 heads)"
trains_like single_h2 pp2_flexsp_auto_h2 1e-5 1e-5

echo "ok: ring attention and USP inside pipeline stages"
