# flexsp import: a HuggingFace LlamaForCausalLM folder -> flexsp weights.
#  - export --dtype fp32 then import gives back every tensor bit for bit, and the RoPE
#    settings (llama3 scaling here); bf16 export then import gives the bf16 values;
#  - folders written by an independent writer (tests/reference/write_hf.py): fp16 and
#    bf16, a single file and 3 shards split by tensor with their index: the shards import
#    exactly as the single file, and the values are the fp16 / bf16 ones;
#  - the imported file is accepted by eval (and, in test_context_extension.sh, by train);
#  - every bad input ends with one error line naming the file and the key or tensor, on
#    1 and 2 ranks, and no --out is left behind.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"

$PY "$REF/make_case.py" --out "$work/case" --kv-heads 2 --theta 500000 --eps 1e-6 \
  --rope-scaling llama3,8,1,4,64 >/dev/null
$PY "$REF/make_case.py" --out "$work/tied" --kv-heads 1 --tie --rope-scaling linear,2 --seed 3 >/dev/null
src=$work/case/weights.h5

# same_model A.h5 B.h5 [f32|f16|bf16]: /model of A equals B's rounded to that type (bit for
# bit), and the model attributes are equal.
same_model() {
  $PY - "$@" <<'PYEOF'
import sys, h5py, numpy as np
a, b, kind = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "f32")
def rounded(x):
    x = np.asarray(x, np.float32)
    if kind == "f16":
        return x.astype(np.float16).astype(np.float32)
    if kind == "bf16":
        u = x.view(np.uint32).astype(np.uint64)
        return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16).view(np.float32)
    return x
with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
    ga, gb = fa["model"], fb["model"]
    assert set(ga.keys()) == set(gb.keys()), sorted(set(ga.keys()) ^ set(gb.keys()))
    for k in ga.keys():
        x, y = np.asarray(ga[k][...]), rounded(gb[k][...])
        assert x.dtype == np.float32 and x.shape == y.shape, (k, x.dtype, x.shape, y.shape)
        assert np.array_equal(x.view(np.uint32), y.view(np.uint32)), f"{k}: not bit-exact"
    for k in gb.attrs:
        va, vb = ga.attrs[k], gb.attrs[k]
        va, vb = (v.decode() if isinstance(v, bytes) else v for v in (va, vb))
        assert va == vb, f"attribute {k}: {va!r} vs {vb!r}"
    print(f"{a} = {b} ({kind}): {len(ga.keys())} tensors")
PYEOF
}

# 1. export -> import round trips.
"$FLEXSP" export --checkpoint "$src" --out "$work/hf32" --dtype fp32 >/dev/null
"$FLEXSP" import --hf "$work/hf32" --out "$work/back32.h5" >"$work/import.log"
grep -q "rope_theta 500000, llama3 (factor 8, low 1, high 4, original 64)" "$work/import.log" ||
  { cat "$work/import.log"; fail "import does not show the RoPE settings"; }
grep -q '^\[model\]' "$work/import.log" || fail "import does not print the [model] section"
same_model "$work/back32.h5" "$src" f32
echo "ok: export fp32 -> import is bit-exact, RoPE settings included"
"$FLEXSP" export --checkpoint "$src" --out "$work/hf16" >/dev/null
"$FLEXSP_MPIRUN" -np 2 "$FLEXSP" import --hf "$work/hf16" --out "$work/back16.h5" >/dev/null
same_model "$work/back16.h5" "$src" bf16
"$FLEXSP" export --checkpoint "$work/tied/weights.h5" --out "$work/hftied" --dtype fp32 >/dev/null
"$FLEXSP" import --hf "$work/hftied" --out "$work/backtied.h5" >/dev/null
same_model "$work/backtied.h5" "$work/tied/weights.h5" f32
$PY -c 'import json, sys; r = json.load(open(sys.argv[1]))["rope_scaling"]; sys.exit(r != {"type": "linear", "factor": 2.0})' \
  "$work/hftied/config.json" || fail "config.json: rope_scaling linear is not {type: linear, factor: 2}"
echo "ok: bf16 export -> import gives the bf16 values; tied embeddings"

# 2. Independently written folders: single file and shards, fp16 and bf16.
for dt in F16 BF16; do
  $PY "$REF/write_hf.py" --weights "$src" --out "$work/one_$dt" --dtype $dt
  $PY "$REF/write_hf.py" --weights "$src" --out "$work/sh_$dt" --dtype $dt --shards 3
  [[ -f "$work/sh_$dt/model-00003-of-00003.safetensors" && -f "$work/sh_$dt/model.safetensors.index.json" ]] ||
    fail "write_hf.py wrote no shards"
  "$FLEXSP" import --hf "$work/one_$dt" --out "$work/one_$dt.h5" >/dev/null
  "$FLEXSP" import --hf "$work/sh_$dt" --out "$work/sh_$dt.h5" >"$work/sh.log"
  grep -q "from 3 files" "$work/sh.log" || { cat "$work/sh.log"; fail "sharded: not 3 files"; }
  same_model "$work/sh_$dt.h5" "$work/one_$dt.h5" f32
  kind=$([[ $dt == F16 ]] && echo f16 || echo bf16)
  same_model "$work/one_$dt.h5" "$src" "$kind"
done
echo "ok: 3 shards import exactly as the single file (fp16, bf16)"

# 3. The imported file is a model eval accepts, with the same loss as the source.
pack_small_corpus "$work/data.h5"
$PY "$REF/make_case.py" --out "$work/v257" --vocab 257 --rope-scaling linear,4 >/dev/null
"$FLEXSP" export --checkpoint "$work/v257/weights.h5" --out "$work/hf257" --dtype fp32 >/dev/null
"$FLEXSP" import --hf "$work/hf257" --out "$work/w257.h5" >/dev/null
for w in "$work/v257/weights.h5" "$work/w257.h5"; do
  "$FLEXSP" eval --checkpoint "$w" --data "$work/data.h5" --max-seq-len 64 --max-docs 8 --json
done >"$work/evals.json"
[[ $(sort -u <(sed -E 's/"checkpoint":"[^"]*",//' "$work/evals.json") | wc -l) -eq 1 ]] ||
  { cat "$work/evals.json"; fail "eval of the imported file differs from the source's"; }
echo "ok: eval of the imported weights equals the source's"

# 4. Bad inputs: one line naming the file and the key or tensor; no output left behind.
good=(--weights "$src" --dtype BF16)
bad() {  # bad NAME WANT write_hf-args...: import of that folder fails naming WANT
  local name=$1 want=$2; shift 2
  $PY "$REF/write_hf.py" "${good[@]}" --out "$work/bad_$name" "$@"
  expect_error "$want" "$FLEXSP" import --hf "$work/bad_$name" --out "$work/bad_$name.h5"
  [[ ! -e "$work/bad_$name.h5" ]] || fail "$name: a failed import left its output"
}
cfg=config.json st=model.safetensors
bad arch "bad_arch/$cfg: architectures: [\"MistralForCausalLM\"]: only LlamaForCausalLM" \
  --set 'architectures=["MistralForCausalLM"]'
bad act "bad_act/$cfg: hidden_act: 'gelu' is not supported" --set 'hidden_act="gelu"'
bad attn_bias "bad_attn_bias/$cfg: attention_bias: true: biases are not supported" --set 'attention_bias=true'
bad bias "bad_bias/$st: tensor model.layers.0.self_attn.q_proj.bias: biases are not supported" \
  --add model.layers.0.self_attn.q_proj.bias:64
bad missing "bad_missing/$st: tensor model.layers.1.mlp.up_proj.weight is missing" \
  --drop model.layers.1.mlp.up_proj.weight
bad extra "bad_extra/$st: unexpected tensor model.layers.2.mlp.up_proj.weight" \
  --add model.layers.2.mlp.up_proj.weight:176x64
bad shape "bad_shape/$st: tensor model.layers.0.mlp.gate_proj.weight has shape [176, 64], but config.json implies [128, 64]" \
  --set intermediate_size=128
bad head_dim "bad_head_dim/$cfg: head_dim: 32 is not hidden_size / num_attention_heads" --set head_dim=32
bad scaling "bad_scaling/$cfg: rope_scaling: type 'yarn' is not supported" --set 'rope_scaling={"rope_type":"yarn","factor":4}'
bad llama3 "bad_llama3/$cfg: rope_scaling.low_freq_factor: missing" \
  --set 'rope_scaling={"rope_type":"llama3","factor":8,"high_freq_factor":4,"original_max_position_embeddings":8192}'
bad no_hidden "bad_no_hidden/$cfg: hidden_size: missing" --set hidden_size=null

# A truncated file: the tensor whose data is cut off is named.
$PY "$REF/write_hf.py" "${good[@]}" --out "$work/trunc"
truncate -s -100 "$work/trunc/$st"
expect_error "trunc/$st: tensor " "$FLEXSP" import --hf "$work/trunc" --out "$work/trunc.h5"
grep -q "truncated" "$work/err" || fail "truncated: the error does not say so"
truncate -s 5 "$work/trunc/$st"
expect_error "trunc/$st: truncated" "$FLEXSP_MPIRUN" -np 2 "$FLEXSP" import --hf "$work/trunc" --out "$work/trunc.h5"
# Shards: a missing shard, a tensor the index places in another shard, one it does not list.
$PY "$REF/write_hf.py" "${good[@]}" --out "$work/sh" --shards 2
cp -r "$work/sh" "$work/sh_gone" && rm "$work/sh_gone/model-00002-of-00002.safetensors"
expect_error "sh_gone/model.safetensors.index.json: names shard $work/sh_gone/model-00002-of-00002.safetensors, which does not exist" \
  "$FLEXSP" import --hf "$work/sh_gone" --out "$work/x.h5"
cp -r "$work/sh" "$work/sh_moved"
$PY - "$work/sh_moved/model.safetensors.index.json" <<'PYEOF'
import json, sys
j = json.load(open(sys.argv[1]))
j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors" \
    if j["weight_map"]["model.norm.weight"].startswith("model-00002") else "model-00002-of-00002.safetensors"
del j["weight_map"]["lm_head.weight"]
json.dump(j, open(sys.argv[1], "w"))
PYEOF
expect_error "tensor " "$FLEXSP" import --hf "$work/sh_moved" --out "$work/x.h5"
grep -qE "tensor (model.norm.weight is listed in|lm_head.weight is not listed in)" "$work/err" ||
  { cat "$work/err"; fail "sh_moved: the error names neither tensor"; }
# Not a model folder, no weights, an existing --out.
expect_error "$work/nodir: no such directory" "$FLEXSP" import --hf "$work/nodir" --out "$work/x.h5"
mkdir "$work/noweights" && cp "$work/hf32/config.json" "$work/noweights/"
expect_error "holds neither model.safetensors nor model.safetensors.index.json" \
  "$FLEXSP" import --hf "$work/noweights" --out "$work/x.h5"
expect_error "--hf DIR is required" "$FLEXSP" import --out "$work/x.h5"
expect_error "$work/back32.h5 already exists (use --force" "$FLEXSP" import --hf "$work/hf32" --out "$work/back32.h5"
"$FLEXSP" import --hf "$work/hf16" --out "$work/back32.h5" --force >/dev/null
same_model "$work/back32.h5" "$src" bf16
[[ ! -e "$work/x.h5" ]] || fail "a failed import left its output"
echo "import: all checks passed"
