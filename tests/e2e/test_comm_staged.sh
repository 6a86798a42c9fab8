# Training through the staged communicators (parallel.comm = mpi-staged: every backend
# buffer copied to host memory and back around each MPI call, the path a GPU backend takes
# under an MPI that is not CUDA-aware) is bit-identical to plain MPI on the CPU backend:
# Ulysses all-to-alls in heterogeneous plans, ZeRO-3 gathers and reduce-scatters over node
# and cross-node groups, ZeRO-2 over the world. Also: the run names its communicator, and
# parallel.comm = nccl is refused with one clear line on the CPU backend.
source "$(dirname "$0")/lib.sh"
pack_varied_corpus "$work/data.h5"

common=(--data.path="$work/data.h5" --model.preset=tiny --model.heads=8 --model.kv_heads=2
        --data.max_seq_len=512 --train.global_batch_tokens=3000 --train.steps=5
        --optim.lr=1e-3 --optim.warmup_steps=2 --train.backend=cpu --planner.time_limit_ms=0)

run() {  # name np args...
  local name=$1 np=$2; shift 2
  train_run "$name" "$np" 5 "${common[@]}" "$@"
}

same() {  # a b: identical losses, gradient norms and weights
  diff "$work/$1.steps" "$work/$2.steps" || fail "$2: losses or gradient norms differ from $1"
  h5diff "$work/$1.h5" "$work/$2.h5" || fail "$2: weights differ from $1"
  echo "ok: $2 = $1 bit for bit (loss $(head -1 "$work/$1.loss") -> $(tail -1 "$work/$1.loss"))"
}

z3=(--parallel.zero=3 --ranks-per-node 2 --parallel.zero_param_group=node
    --parallel.sp_mode=flexsp --train.micro_batch_tokens=300)
run z3_mpi 4 "${z3[@]}" --parallel.comm=mpi
grep -q 'comm mpi;' "$work/z3_mpi.log" || fail "the run does not name its communicator (mpi)"
run z3_staged 4 "${z3[@]}" --parallel.comm=mpi-staged --print-plans
grep -q 'comm mpi-staged;' "$work/z3_staged.log" || fail "the run does not name its communicator (mpi-staged)"
grep -qE 'd=(2|4) ' "$work/z3_staged.log" || fail "z3_staged: expected SP groups (Ulysses all-to-alls)"
same z3_mpi z3_staged

z2=(--parallel.zero=2 --parallel.sp_mode=static --parallel.sp_size=2)
run z2_mpi 4 "${z2[@]}" --parallel.comm=auto
run z2_staged 4 "${z2[@]}" --parallel.comm=mpi-staged
same z2_mpi z2_staged

expect_error "parallel.comm: 'nccl' needs train.backend = cuda" \
  "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}" --parallel.comm=nccl
expect_error "parallel.comm" "$FLEXSP" train "${common[@]}" --parallel.comm=gloo
