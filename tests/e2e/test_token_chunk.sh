#!/usr/bin/env bash
# Token-chunked layers train the model the unchunked run trains (docs/token-chunks.md):
# eight steps on a real packed corpus (sequences of tens to thousands of tokens, so chunks
# cut through them) with activation checkpointing, on 1 rank with chunks of 64 and of
# 100 tokens (not dividing the micro-batches), on 2 ranks with flexible SP (groups of 2
# run Ulysses around the chunked layers, single ranks the chunked local attention), with
# ring attention and as 2-stage pipelines (1F1B, Seq1F1B): per-step losses, gradient
# norms and final weights agree with the unchunked single process to 1e-5 relative.
# Chunking only reorders fp32 sums (a key block's softmax merged by log-sum-exp, weight
# gradients summed chunk by chunk), the same kind of noise the parallel layouts add, which
# e2e_parallel_equivalence bounds by 1e-5 over ten steps at this learning rate. A chunk
# no micro-batch exceeds runs the unchunked code: bit-identical. Settings that cannot run
# stop with one line naming train.token_chunk before the first step, and the key is in
# the report's run configuration.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

base=(--data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=512
      --train.global_batch_tokens=3000 --train.steps=8 --optim.lr=1e-3 --optim.warmup_steps=2
      --train.backend=cpu)
common=("${base[@]}" --model.checkpoint_activations=true)
run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 8 "${common[@]}" "$@"
}

run single 1
run chunk64 1 --train.token_chunk=64
grep -q "tokens per device per micro-batch, layers in chunks of 64$" "$work/chunk64.log" || fail "chunk64: no chunks in the start-up line"
trains_like single chunk64 1e-5 1e-5
run chunk100 1 --train.token_chunk=100
trains_like single chunk100 1e-5 1e-5
/usr/bin/python3 "$FLEXSP_SOURCE_DIR/tests/reference/compare.py" "$work/chunk64.h5" "$work/single.h5" \
  --keys model --rtol 0 --atol 0 >/dev/null && fail "chunk64: weights bit-identical to single (chunks not run?)"

# The whole batch in one chunk: the unchunked code, bit for bit.
run covering 1 --train.token_chunk=3000
cmp "$work/single.steps" "$work/covering.steps" || fail "covering: per-step losses differ from single"
/usr/bin/python3 "$FLEXSP_SOURCE_DIR/tests/reference/compare.py" "$work/covering.h5" "$work/single.h5" \
  --keys model --rtol 0 --atol 0 >"$work/covering.cmp" || { cat "$work/covering.cmp"; fail "covering: weights differ"; }
echo "ok: a chunk covering every micro-batch is bit-identical"

run flexsp_np2 2 --parallel.sp_mode=flexsp --train.micro_batch_tokens=600 --train.token_chunk=64 --print-plans \
  --report.dir="$work/np2_report"
grep -q "d=2 " "$work/flexsp_np2.log" || fail "flexsp_np2: expected groups of 2"
trains_like single flexsp_np2 1e-5 1e-5
run ring_np2 2 --parallel.sp_mode=static --parallel.sp_size=2 --parallel.cp_mode=ring --train.token_chunk=64
trains_like single ring_np2 1e-5 1e-5
run pp2 2 --parallel.pp_size=2 --train.token_chunk=64
trains_like single pp2 1e-5 1e-5
run seq1f1b 2 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 --train.token_chunk=64
trains_like single seq1f1b 1e-5 1e-5

bad=("${common[@]}")
expect_error "train.token_chunk" "$FLEXSP" train "${bad[@]}" --train.token_chunk=-5
expect_error "train.token_chunk: 5000 tokens is larger than a micro-batch" "$FLEXSP" train "${bad[@]}" --train.token_chunk=5000
expect_error "train.token_chunk: 700 tokens is larger than a micro-batch" \
  "$FLEXSP" train "${bad[@]}" --train.micro_batch_tokens=600 --train.token_chunk=700
expect_error "model.checkpoint_activations" "$FLEXSP" train "${base[@]}" --train.token_chunk=64
expect_error "tensor parallelism" "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${bad[@]}" \
  --parallel.tp_size=2 --train.token_chunk=64
/usr/bin/python3 - "$work/np2_report/report.h5" <<'PY' || fail "the report's run configuration lacks train.token_chunk"
import sys, h5py
c = h5py.File(sys.argv[1], "r").attrs["config"]
c = c.decode() if isinstance(c, bytes) else c
assert "\ntoken_chunk = 64\n" in c.split("[train]")[1], c
PY
echo "ok: token chunks"
