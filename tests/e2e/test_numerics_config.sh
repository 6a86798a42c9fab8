# Configuration that changes numerics is configuration: train.tf32 and
# train.cuda_attention are config keys, listed by `flexsp train --help`; the environment
# variables FLEXSP_CUDA_TF32 / FLEXSP_CUDA_ATTENTION override them; the effective values
# are printed on the run's model: line and recorded in the checkpoint's and report.h5's
# config and in summary.json. Bad values are one error naming the key or the variable.
# On the CPU backend the keys change nothing else (the loss is the same whatever they say).
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
pack_small_corpus "$work/data.h5"

"$FLEXSP" train --help >"$work/help.txt"
grep -q 'train.tf32' "$work/help.txt" || fail "train --help does not list train.tf32"
grep -q 'train.cuda_attention' "$work/help.txt" || fail "train --help does not list train.cuda_attention"

run() {  # name args...: one rank, 2 steps, a report and a checkpoint
  local name=$1; shift
  "$FLEXSP" train --data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=128 \
    --train.global_batch_tokens=1024 --train.steps=2 --train.backend=cpu \
    --report.dir="$work/$name.report" --checkpoint.dir="$work/$name.ckpt" "$@" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "$name: run failed"; }
}

# recorded name tf32 attention: the model line, report.h5, summary.json and the checkpoint
# all say tf32 (true/false) and attention.
recorded() {
  local name=$1 tf32=$2 attn=$3 onoff=off
  [[ $tf32 == true ]] && onoff=on
  grep -q "tf32 $onoff; cuda_attention $attn;" "$work/$name.log" ||
    { grep 'model:' "$work/$name.log"; fail "$name: the model line does not say tf32 $onoff, $attn"; }
  $PY - "$work/$name" "$tf32" "$attn" <<'PYEOF' || fail "$name: not recorded"
import json, sys, h5py
d, tf32, attn = sys.argv[1], sys.argv[2], sys.argv[3]
want = [f"tf32 = {tf32}", f"cuda_attention = {attn}"]
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
  echo "ok: $name: tf32 $tf32, cuda_attention $attn, in the log, report.h5, summary.json, checkpoint"
}

run defaults
recorded defaults false auto
run keys --train.tf32=true --train.cuda_attention=simple
recorded keys true simple
FLEXSP_CUDA_TF32=1 FLEXSP_CUDA_ATTENTION=tc run env_over_defaults
recorded env_over_defaults true tc
FLEXSP_CUDA_TF32=0 FLEXSP_CUDA_ATTENTION=auto run env_over_keys --train.tf32=true --train.cuda_attention=simple
recorded env_over_keys false auto
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
expect_error "FLEXSP_CUDA_GEMM: 'cutlass' is not cublas or lt" \
  env FLEXSP_CUDA_GEMM=cutlass "$FLEXSP" train "${common[@]}"
echo "numerics config: all checks passed"
