# GPU training on several ranks trains the same model as one process. Ten steps
# of the tiny model with the CUDA backend, in fp32 (train.precision=fp32): one rank on the
# CPU backend (the reference), one rank on the GPU, then 2 and 4 ranks on the GPU(s) with
# Ulysses SP groups, planner plans and ZeRO 1/2/3, through the communicator parallel.comm
# picks (MPI staged through host memory when ranks share a GPU, NCCL when each has its
# own), and one rank through NCCL where it is built (bit-identical to staging: a one-rank
# all-reduce is a copy); pipelines of 2 stages (1F1B; Seq1F1B with SP groups and ZeRO 1);
# tensor parallelism (tp 2), a ring of 4 and Ulysses x ring with tp 2.
# Losses and gradient norms per step agree to 1e-4 (GEMMs on token shards of other sizes
# may round differently), and the final weights too where python3 has h5py.
# Then bf16 mixed precision (train.precision=bf16, what auto picks on cuda): one GPU rank
# against the CPU backend's bf16 emulation, and 2 and 4 GPU ranks against one, losses to
# 2e-2 and gradient norms to 5e-2 (bf16 roundings of differently shaped GEMMs drift apart over the steps), weights
# to 1e-1 (a guard against gross errors: AdamW turns small gradient differences into
# update differences of up to 2 lr); and the bf16 losses within 5e-2 of fp32's. Last, the
# small model for 50 steps on the GPU in bf16 follows the CPU's fp32 loss curve (3e-2).
# Exits 77 (skipped) without a CUDA device.
source "$(dirname "$0")/lib.sh"
if [[ -d /usr/include/linux/netfilter ]]; then
  pack_varied_corpus "$work/data.h5"
else  # a GPU machine without kernel headers: flexsp's own sources, as varied in length
  "$FLEXSP" pack --glob '*.cpp' --out "$work/data.h5" "$FLEXSP_SOURCE_DIR/lib" >/dev/null
fi

base=(--data.path="$work/data.h5" --model.preset=tiny --model.heads=8 --model.kv_heads=2
      --data.max_seq_len=512 --train.global_batch_tokens=3000
      --optim.lr=1e-3 --optim.warmup_steps=2 --planner.time_limit_ms=0)

# The grid names each rank's GPU ("gpu N") when there is one.
"$FLEXSP" train "${base[@]}" --train.steps=1 --dry-run >"$work/grid.log" 2>&1 || { cat "$work/grid.log"; fail "dry run"; }
grep -qE ' gpu [0-9]+$' "$work/grid.log" || { echo "SKIPPED: no CUDA device (or a build without CUDA)"; exit 77; }
"$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${base[@]}" --train.steps=1 --dry-run >"$work/grid2.log" 2>&1 ||
  { cat "$work/grid2.log"; fail "dry run on 2 ranks"; }
gpus=$({ grep -oE ' gpu [0-9]+$' "$work/grid2.log" || true; } | sort -u | wc -l)
echo "2 ranks see $gpus distinct GPU(s)"

run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 10 "${base[@]}" --train.steps=10 "$@"
  echo "$name: $(grep -oE 'backend [a-z]+ \([a-z0-9]+ activations\); comm [a-z-]+' "$work/$name.log" | head -1), loss $(head -1 "$work/$name.loss") -> $(tail -1 "$work/$name.loss")"
}

py=
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import h5py, numpy' 2>/dev/null; then py=$p; break; fi
done
[[ -n $py ]] || echo "note: no python3 with h5py: weights not compared, losses only"

# check REF NAME RTOL [WEIGHTS_RTOL [GRAD_NORM_RTOL]]: losses per step to RTOL, gradient
# norms per step (they catch a uniform scale on every gradient, which clipping and AdamW
# hide from the losses and weights) to GRAD_NORM_RTOL, final weights to WEIGHTS_RTOL (both
# default RTOL).
check() {
  local ref=$1 name=$2 rtol=$3 wrtol=${4:-$3} grtol=${5:-$3}
  losses_close "$ref" "$name" "$rtol"
  grad_norms_close "$ref" "$name" "$grtol"
  if [[ -n $py ]]; then
    "$py" "$FLEXSP_SOURCE_DIR/tests/reference/compare.py" "$work/$name.h5" "$work/$ref.h5" \
      --keys model --rtol "$wrtol" >"$work/$name.cmp" || { cat "$work/$name.cmp"; fail "$name: weights differ from $ref"; }
  fi
  echo "ok: $name = $ref (losses $rtol, gradient norms $grtol, weights $wrtol)"
}

activations() {  # name type: the run says its activations are of that type
  grep -qF "($2 activations)" "$work/$1.log" || { grep -F 'model:' "$work/$1.log"; fail "$1: not $2 activations"; }
}

fp32=--train.precision=fp32
bf16=--train.precision=bf16

# ---- fp32 ----------------------------------------------------------------------------------
run cpu 1 --train.backend=cpu $fp32
run gpu 1 --train.backend=cuda $fp32 --parallel.comm=mpi
activations gpu f32
check cpu gpu 1e-4
run gpu_np2_sp2 2 --train.backend=cuda $fp32 --parallel.sp_mode=static --parallel.sp_size=2 --parallel.zero=1
check gpu gpu_np2_sp2 1e-4
run gpu_np2_z3 2 --train.backend=cuda $fp32 --parallel.comm=mpi --parallel.sp_mode=flexsp \
  --train.micro_batch_tokens=300 --parallel.zero=3
check gpu gpu_np2_z3 1e-4
run gpu_np4_mixed 4 --train.backend=cuda $fp32 --parallel.sp_mode=flexsp --train.micro_batch_tokens=300 \
  --ranks-per-node 2 --parallel.zero=2 --parallel.zero_optim_group=node --parallel.zero_grad_group=node --print-plans
grep -qE 'd=(2|4) ' "$work/gpu_np4_mixed.log" || fail "gpu_np4_mixed: expected SP groups"
check gpu gpu_np4_mixed 1e-4
# Pipelines: activations between the stages over the stage link (NCCL with a GPU per rank,
# staged MPI when ranks share one), 1F1B and Seq1F1B with SP groups inside a stage.
run gpu_np2_pp2 2 --train.backend=cuda $fp32 --parallel.pp_size=2 --train.micro_batch_tokens=600
check gpu gpu_np2_pp2 1e-4
run gpu_np4_pp2_seq 4 --train.backend=cuda $fp32 --parallel.pp_size=2 --parallel.pp_schedule=seq1f1b \
  --parallel.seq_chunks=2 --parallel.sp_mode=flexsp --train.micro_batch_tokens=600 --parallel.zero=1
check gpu gpu_np4_pp2_seq 1e-4
# Tensor parallelism and context parallelism (ring, and Ulysses x ring) on ranks that
# share the GPU: the same model as one GPU process.
run gpu_np2_tp2 2 --train.backend=cuda $fp32 --parallel.tp_size=2
check gpu gpu_np2_tp2 1e-4
run gpu_np4_ring 4 --train.backend=cuda $fp32 --parallel.sp_mode=static --parallel.sp_size=4 \
  --parallel.cp_mode=ring --parallel.zero=1
check gpu gpu_np4_ring 1e-4
run gpu_np4_usp_tp2 4 --train.backend=cuda $fp32 --parallel.tp_size=2 --parallel.sp_mode=static \
  --parallel.sp_size=2 --parallel.cp_mode=usp --ranks-per-node 2
check gpu gpu_np4_usp_tp2 1e-4

# ---- bf16 mixed precision ---------------------------------------------------------------------
run cpu_bf16 1 --train.backend=cpu $bf16
activations cpu_bf16 bf16
run gpu_bf16 1 --train.backend=cuda --parallel.comm=mpi  # precision auto: bf16 on cuda
activations gpu_bf16 bf16
check cpu_bf16 gpu_bf16 2e-2 1e-1 5e-2
losses_close gpu gpu_bf16 5e-2
echo "ok: gpu_bf16 within 5e-2 of fp32's losses"
run gpu_bf16_np2_z3 2 --train.backend=cuda $bf16 --parallel.comm=mpi --parallel.sp_mode=flexsp \
  --train.micro_batch_tokens=300 --parallel.zero=3
check gpu_bf16 gpu_bf16_np2_z3 2e-2 1e-1 5e-2
run gpu_bf16_np4_mixed 4 --train.backend=cuda $bf16 --parallel.sp_mode=flexsp --train.micro_batch_tokens=300 \
  --ranks-per-node 2 --parallel.zero=2 --parallel.zero_optim_group=node --parallel.zero_grad_group=node --print-plans
grep -qE 'd=(2|4) ' "$work/gpu_bf16_np4_mixed.log" || fail "gpu_bf16_np4_mixed: expected SP groups"
check gpu_bf16 gpu_bf16_np4_mixed 2e-2 1e-1 5e-2

# NCCL: one rank (any machine), and two ranks where each has its own GPU.
# ---- NCCL (fp32) ----------------------------------------------------------------------------
if "$FLEXSP" train "${base[@]}" --train.backend=cuda $fp32 --parallel.comm=nccl --train.steps=0 \
     >"$work/nccl_probe.log" 2>&1; then
  run gpu_nccl 1 --train.backend=cuda $fp32 --parallel.comm=nccl
  grep -q 'comm nccl;' "$work/gpu_nccl.log" || fail "gpu_nccl: not on NCCL"
  diff "$work/gpu.steps" "$work/gpu_nccl.steps" || fail "gpu_nccl: one rank through NCCL differs from staging"
  echo "ok: gpu_nccl = gpu bit for bit"
  if [[ $gpus -ge 2 ]]; then
    run gpu_nccl_np2 2 --train.backend=cuda $fp32 --parallel.comm=nccl --parallel.sp_mode=static \
      --parallel.sp_size=2 --parallel.zero=3
    check gpu gpu_nccl_np2 1e-4
  else
    echo "note: one GPU: NCCL on 2 ranks not run (it needs a GPU per rank)"
  fi
else
  grep -q "not available in this build" "$work/nccl_probe.log" || { cat "$work/nccl_probe.log"; fail "NCCL probe"; }
  echo "note: built without NCCL: the NCCL runs were not made"
fi

# ---- the loss curve: the small model for 50 steps, GPU bf16 against CPU fp32 -----------------
# On the CPU the bf16 emulation stays within 1.5e-2 of fp32 at its worst step (2.5e-3 at all
# others) for this run; the GPU's bf16 kernels must do as well, with a margin.
small=(--data.path="$work/data.h5" --model.preset=small --data.max_seq_len=512
       --train.global_batch_tokens=4096 --optim.lr=1e-3 --optim.warmup_steps=5 --train.steps=50)
# One process: the CPU reference takes every core (single-threaded it outlasted a 3-minute
# budget on the H100 machine).
OMP_NUM_THREADS=$(nproc) OPENBLAS_NUM_THREADS=$(nproc) train_run small_cpu_fp32 1 50 "${small[@]}" \
  --train.backend=cpu $fp32
train_run small_gpu_bf16 1 50 "${small[@]}" --train.backend=cuda $bf16
activations small_gpu_bf16 bf16
losses_close small_cpu_fp32 small_gpu_bf16 3e-2
paste "$work/small_cpu_fp32.loss" "$work/small_gpu_bf16.loss" | awk '
  { d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > m) m = d }
  END { printf "ok: small model, 50 steps: GPU bf16 follows CPU fp32 (largest relative difference %.2e)\n", m }'
