# Configuration that changes numerics is configuration: train.tf32, train.cuda_attention
# and train.cuda_gemm are config keys, listed by `flexsp train --help`; the environment
# variables FLEXSP_CUDA_TF32 / FLEXSP_CUDA_ATTENTION / FLEXSP_CUDA_GEMM override them; the
# effective values are printed on the run's model: line and recorded in the checkpoint's
# and report.h5's config (tf32 and cuda_attention in summary.json too). Bad values are one
# error naming the key or the variable. On the CPU backend the keys change nothing else
# (the loss is the same whatever they say), and the model: line names the CPU kernels'
# instruction set (avx2+fma where the CPU has it, portable under FLEXSP_CPU_PORTABLE=1).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
pack_small_corpus "$work/data.h5"

"$FLEXSP" train --help >"$work/help.txt"
grep -q 'train.tf32' "$work/help.txt" || fail "train --help does not list train.tf32"
grep -q 'train.cuda_attention' "$work/help.txt" || fail "train --help does not list train.cuda_attention"
grep -q 'train.cuda_gemm' "$work/help.txt" || fail "train --help does not list train.cuda_gemm"

run() {  # name args...: one rank, 2 steps, a report and a checkpoint
  local name=$1; shift
  "$FLEXSP" train --data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=128 \
    --train.global_batch_tokens=1024 --train.steps=2 --train.backend=cpu \
    --report.dir="$work/$name.report" --checkpoint.dir="$work/$name.ckpt" "$@" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "$name: run failed"; }
}

# recorded name tf32 attention gemm: the model line, report.h5, summary.json and the
# checkpoint all say tf32 (true/false), attention and gemm (summary.json: the first two).
recorded() {
  local name=$1 tf32=$2 attn=$3 gemm=$4 onoff=off
  [[ $tf32 == true ]] && onoff=on
  grep -q "tf32 $onoff; cuda_attention $attn; cuda_gemm $gemm;" "$work/$name.log" ||
    { grep 'model:' "$work/$name.log"; fail "$name: the model line does not say tf32 $onoff, $attn, $gemm"; }
  $PY - "$work/$name" "$tf32" "$attn" "$gemm" <<'PYEOF' || fail "$name: not recorded"
import json, sys, h5py
d, tf32, attn, gemm = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
want = [f"tf32 = {tf32}", f"cuda_attention = {attn}", f"cuda_gemm = {gemm}"]
with h5py.File(d + ".report/report.h5", "r") as f:
    ini = f.attrs["config"]
    ini = ini.decode() if isinstance(ini, bytes) else ini
    assert all(w in ini.splitlines() for w in want), ini
    assert f.attrs["tf32"] == (tf32 == "true") and f.attrs["cuda_attention"] in (attn, attn.encode())
with h5py.File(d + ".ckpt/step_00000002.h5", "r") as f:
    ini = f.attrs["config"]
    ini = ini.decode() if isinstance(ini, bytes) else ini
    assert all(w in ini.splitlines() for w in want), ini
s = json.load(open(d + ".report/summary.json"))
assert s["tf32"] == (tf32 == "true") and s["cuda_attention"] == attn, s
PYEOF
  echo "ok: $name: tf32 $tf32, cuda_attention $attn, cuda_gemm $gemm, in the log, report.h5, summary.json, checkpoint"
}

run defaults
recorded defaults false auto auto
run keys --train.tf32=true --train.cuda_attention=simple --train.cuda_gemm=lt
recorded keys true simple lt
FLEXSP_CUDA_TF32=1 FLEXSP_CUDA_ATTENTION=tc FLEXSP_CUDA_GEMM=lt run env_over_defaults
recorded env_over_defaults true tc lt
FLEXSP_CUDA_TF32=0 FLEXSP_CUDA_ATTENTION=auto FLEXSP_CUDA_GEMM=cublas run env_over_keys \
  --train.tf32=true --train.cuda_attention=simple --train.cuda_gemm=lt
recorded env_over_keys false auto cublas

# The CPU kernels' instruction set on the model: line: what the CPU has, or portable when
# forced.
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then isa=avx2+fma; else isa=portable; fi
grep -q "(f32 activations); cpu kernels $isa; comm" "$work/defaults.log" ||
  { grep 'model:' "$work/defaults.log"; fail "the model line does not say cpu kernels $isa"; }
FLEXSP_CPU_PORTABLE=1 run portable
grep -q "; cpu kernels portable; comm" "$work/portable.log" ||
  { grep 'model:' "$work/portable.log"; fail "FLEXSP_CPU_PORTABLE=1: the model line does not say portable"; }
echo "ok: the model line says cpu kernels $isa (portable when forced)"
loss() { grep -E '^step 2/' "$work/$1.log" | sed -E 's/.*loss ([0-9.]+).*/\1/'; }
[[ $(loss defaults) == "$(loss keys)" && $(loss defaults) == "$(loss env_over_defaults)" ]] ||
  fail "the CUDA keys changed the CPU backend's loss"

common=(--data.path="$work/data.h5" --model.preset=tiny --train.steps=1 --train.backend=cpu)
expect_error "train.cuda_attention: 'fast' is not one of auto, cudnn, tc, simple" \
  "$FLEXSP" train "${common[@]}" --train.cuda_attention=fast
expect_error "FLEXSP_CUDA_TF32: 'yes' is not 0, 1, false or true" \
  env FLEXSP_CUDA_TF32=yes "$FLEXSP" train "${common[@]}"
expect_error "FLEXSP_CUDA_ATTENTION: 'wmma' is not auto, cudnn, tc or simple" \
  env FLEXSP_CUDA_ATTENTION=wmma "$FLEXSP_MPIRUN" -np 2 --oversubscribe "$FLEXSP" train "${common[@]}"
expect_error "train.cuda_gemm: 'cutlass' is not one of auto, cublas, lt" \
  "$FLEXSP" train "${common[@]}" --train.cuda_gemm=cutlass
expect_error "FLEXSP_CUDA_GEMM: 'cutlass' is not auto, cublas or lt" \
  env FLEXSP_CUDA_GEMM=cutlass "$FLEXSP" train "${common[@]}"
echo "numerics config: all checks passed"
