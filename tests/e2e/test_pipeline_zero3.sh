# ZeRO 3 inside pipeline stages (docs/parallel.md, lib/runtime/zero.h): each stage's units
# gathered before each forward and backward of a pipeline unit, in the schedule's order,
# and each unit's gradient reduce-scattered after its backward. Trains the same model as one
# process (fp32 1e-5 after 4 steps; bf16 like one bf16 process) with: pp 4 on 8 ranks under
# 1F1B and Seq1F1B x2; Seq1F1B with tied embeddings (the embedding's gradient shards summed
# between the first and the last stage); bf16 activations (the gathers move the bf16
# copy); two SP groups per stage on micro-batches of 2-5 token documents, so that one
# group's chunk is empty where the other's is not (its ranks answer the collectives with
# idle passes), with activation checkpointing (the re-forward gathers again).
# (Resuming a pp 2 ZeRO-3 checkpoint on pp 1 and pp 2: e2e_pipeline.)
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"
steps=4
base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=512
      --train.global_batch_tokens=3000 --train.steps=$steps --optim.lr=5e-4 --optim.warmup_steps=2
      --train.backend=cpu --model.heads=8 --model.kv_heads=2 --model.layers=4)
run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" "$steps" "${base[@]}" "$@"
}
z3=(--parallel.zero=3)

run single 1
run pp4_zero3 8 --parallel.pp_size=4 "${z3[@]}" --train.micro_batch_tokens=600
trains_like single pp4_zero3 1e-5 1e-5
run seq_pp4_c2_zero3 8 --parallel.pp_size=4 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 \
  "${z3[@]}" --train.micro_batch_tokens=600
trains_like single seq_pp4_c2_zero3 1e-5 1e-5

run single_tied 1 --model.tie_embeddings=true
run seq_pp2_c2_tied_zero3 4 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 \
  --model.tie_embeddings=true "${z3[@]}" --train.micro_batch_tokens=1200
trains_like single_tied seq_pp2_c2_tied_zero3 1e-5 1e-5

run bf16_single 1 --train.precision=bf16
run bf16_pp2_zero3 4 --train.precision=bf16 --parallel.pp_size=2 "${z3[@]}" --train.micro_batch_tokens=600
trains_like bf16_single bf16_pp2_zero3 1e-3 2e-2

# Micro-batches of one or two 2-5 token documents cut into 4 chunks, two groups of one
# device per stage: where one group's chunk is empty the other's is not, and the empty
# group's ranks answer the gathers and reduce-scatters with idle passes. With activation
# checkpointing. Losses and gradient norms to 1e-5; the weights are not compared (their
# q/k gradients nearly cancel on such documents: see e2e_pipeline_seq_ring).
mkdir "$work/tiny"
for i in $(seq 1 80); do head -c $((i % 4 + 1)) /dev/zero | tr '\0' x >"$work/tiny/t$i.txt"; done
"$FLEXSP" pack --glob '*' --out "$work/tiny.h5" "$work/tiny" >/dev/null
tiny=(--data.path="$work/tiny.h5" --data.max_seq_len=8 --train.global_batch_tokens=48 --model.preset=tiny
      --train.steps=$steps --optim.lr=5e-4 --optim.warmup_steps=2 --train.backend=cpu --model.layers=4
      --model.heads=2 --model.kv_heads=2 --model.checkpoint_activations=true)
train_run tiny_single_ckpt 1 "$steps" "${tiny[@]}"
train_run seq_pp2_s1_c4_ckpt_zero3_tiny 4 "$steps" "${tiny[@]}" --parallel.pp_size=2 \
  --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=4 --parallel.sp_mode=static --parallel.sp_size=1 \
  --train.micro_batch_tokens=6 "${z3[@]}"
losses_close tiny_single_ckpt seq_pp2_s1_c4_ckpt_zero3_tiny 1e-5
grad_norms_close tiny_single_ckpt seq_pp2_s1_c4_ckpt_zero3_tiny 1e-5
echo "ok: seq_pp2_s1_c4_ckpt_zero3_tiny: losses and gradient norms like tiny_single_ckpt (largest relative" \
  "difference $close_max)"

echo "ok: ZeRO 3 in pipeline stages"
