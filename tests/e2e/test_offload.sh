# Activation offload (train.offload, docs/offload.md) changes where a layer's saved
# tensors wait for its backward, not what the backward computes: on every layout -- one
# rank, Ulysses, a ring and USP, tensor parallelism, pipelines (1F1B and Seq1F1B), ZeRO 0-3,
# with and without activation checkpointing -- a run with offload trains bit-identically to
# the same run without (losses and gradient norms as printed, every final weight). The
# model has 8 layers (4 per pipeline stage) and offload_ahead is 1, so the device keeps 3 blocks and the others
# travel to the host and back. Then: train.offload = auto on a layout that fits without
# it and on one where the planner offloads some micro-batches of a step and not others
# (training like one process), `plan --json` marking each micro-batch's offload, and the
# bad settings -- too little
# host memory for the offload's pools, offload_ahead below 1 -- each one clear error
# before the first step.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

common=(--data.path="$work/data.h5" --model.preset=tiny --model.layers=8 --model.heads=8
        --model.kv_heads=2 --data.max_seq_len=512 --train.global_batch_tokens=2000 --train.steps=3
        --optim.lr=1e-3 --optim.warmup_steps=1 --train.backend=cpu)

# pair NAME NP ARGS...: the run without offload and the run with it, bit for bit.
pair() {
  local name=$1 np=$2; shift 2
  train_run "${name}_off" "$np" 3 "${common[@]}" "$@"
  train_run "${name}_on" "$np" 3 "${common[@]}" "$@" --train.offload=checkpoints --train.offload_ahead=1
  grep -q 'offload checkpoints (ahead 1)' "$work/${name}_on.log" || fail "$name: offload not in the start-up line"
  cmp -s "$work/${name}_off.steps" "$work/${name}_on.steps" ||
    { paste "$work/${name}_off.steps" "$work/${name}_on.steps"; fail "$name: losses or gradient norms differ"; }
  /usr/bin/python3 - "$work/${name}_off.h5" "$work/${name}_on.h5" <<'PY' || fail "$name: weights differ"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert names, "no weights"
for n in names:
    assert n in b, n
    assert np.array_equal(a[n][()], b[n][()]), n
PY
  echo "ok: $name: offload trains bit-identically ($(wc -l <"$work/${name}_on.steps") steps, loss $(tail -1 "$work/${name}_on.loss"))"
}

pair single_ckpt 1 --model.checkpoint_activations=true
pair ulysses_d2 2 --parallel.sp_mode=static --parallel.sp_size=2
pair ring_d4_zero3 4 --parallel.sp_mode=static --parallel.cp_mode=ring --parallel.sp_size=4 --parallel.zero=3 \
  --model.checkpoint_activations=true
pair usp_tp2_zero1 8 --parallel.sp_mode=static --parallel.tp_size=2 --parallel.cp_mode=usp --parallel.sp_size=4 \
  --ranks-per-node 4 --parallel.zero=1
pair pp2_1f1b_zero2 4 --parallel.pp_size=2 --parallel.zero=2 --train.micro_batch_tokens=600
pair pp2_seq1f1b 4 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b --parallel.seq_chunks=2 \
  --train.micro_batch_tokens=600 --model.checkpoint_activations=true
pair flexsp_np8_zero3 8 --parallel.sp_mode=flexsp --train.micro_batch_tokens=300 --parallel.zero=3 \
  --ranks-per-node 4

# auto: the planner's choice per micro-batch. A layout that holds every batch without
# offload builds no host pool.
train_run auto_unneeded 1 3 "${common[@]}" --train.offload=auto
grep -q 'offload auto (not needed)' "$work/auto_unneeded.log" || fail "auto: expected no offload on this layout"
echo "ok: train.offload = auto leaves a layout that fits alone"

# Where memory binds (GPUs of 25 MB, a cost model with the tiny model's activations and
# cheap copies), steps mix micro-batches with and without offload, and the run trains like
# one process.
printf '%s\n' 'model = tiny' 'model_hidden = 64' 'model_layers = 8' 'activation_mb_per_token = 0.05' \
  'activation_mb_per_token_ckpt = 0.01' 'reserve_gb = 0' 'bw_h2d = 1000' >"$work/cm.ini"
mixed=(--data.path="$work/data.h5" --model.preset=tiny --model.layers=8 --model.heads=8 --model.kv_heads=2
       --data.max_seq_len=512 --train.global_batch_tokens=3000 --train.steps=3 --optim.lr=1e-3
       --optim.warmup_steps=1 --train.backend=cpu)
train_run auto_ref 1 3 "${mixed[@]}"
train_run auto_mixed 4 3 "${mixed[@]}" --parallel.sp_mode=flexsp --train.offload=auto --train.offload_ahead=1 \
  --planner.mem_per_gpu_gb=0.025 --planner.cost_model="$work/cm.ini" --report.dir="$work/auto_report"
grep -q 'offload auto (ahead 1; per micro-batch, up to' "$work/auto_mixed.log" || fail "auto: no per-micro-batch offload"
/usr/bin/python3 - "$work/auto_report/steps.csv" <<'PY' || fail "auto: no step mixes micro-batches with and without offload"
import csv, sys
plans = [r["plan"] for r in csv.DictReader(open(sys.argv[1]))]
mixed = [p for p in plans if any(m.endswith("(offload)") for m in p.split(" | "))
         and any(not m.endswith("(offload)") for m in p.split(" | "))]
assert mixed, plans
print("ok: auto mixes micro-batches with and without offload:", mixed[0])
PY
trains_like auto_ref auto_mixed 1e-5 1e-5

# plan --json says, per micro-batch, whether it offloads; offload lifts the tokens a GPU holds.
/usr/bin/python3 -c 'import random; r = random.Random(3); print("\n".join(str(int(r.paretovariate(1.1) * 300)) for _ in range(2000)))' \
  >"$work/lengths.txt"
for o in "" --offload; do
  "$FLEXSP" plan --lengths "$work/lengths.txt" --max-seq-len 65536 --json $o >"$work/plan$o.json" ||
    fail "plan $o"
done
/usr/bin/python3 - "$work/plan.json" "$work/plan--offload.json" <<'PY' || fail "plan --json: offload per micro-batch"
import json, sys
off, on = (json.load(open(p)) for p in sys.argv[1:])
def mbs(j): return j["plan"]["micro_batches"] if "plan" in j else j["steps"][0]["plan"]["micro_batches"]
assert mbs(off) and all(m["offload"] is False for m in mbs(off)), "without --offload"
assert mbs(on) and all(m["offload"] is True for m in mbs(on)), "with --offload"
print("ok: plan --json marks every micro-batch's offload")
PY

# Host pools larger than the node's memory: 32 layers of 4096 rows for every token of a
# 4M-token micro-batch (the device budget made large enough to allow it).
expect_error "train.offload: the activation offload's host pools need" \
  "$FLEXSP" train --data.path="$work/data.h5" --model.preset=7b --model.checkpoint_activations=true \
  --data.max_seq_len=4194304 --train.global_batch_tokens=4194305 --train.steps=1 --train.backend=cpu \
  --planner.mem_per_gpu_gb=100000000 --train.offload=checkpoints
expect_error "train.offload_ahead: must be >= 1" \
  "$FLEXSP" train "${common[@]}" --train.offload=checkpoints --train.offload_ahead=0
