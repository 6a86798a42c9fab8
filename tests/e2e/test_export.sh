# flexsp export (docs/commands.md, docs/model.md): a weights file / checkpoint -> HF
# config.json + model.safetensors, read back by a small independent reader here (Python json
# + numpy: the 8-byte header length, the JSON header, the raw tensors) and compared with
# /model of the source file read by h5py: bit-exact for fp32, within 2^-8 relative for bf16
# (and equal to numpy's own round-to-nearest-even of the fp32 values). If the `safetensors`
# package happens to be importable, it must read the files too. Also: tied embeddings
# (no lm_head.weight), config.json fields, refusing a non-empty --out without --force,
# and errors naming the file or option.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
REF="$FLEXSP_SOURCE_DIR/tests/reference"
pack_small_corpus "$work/data.h5"
"$FLEXSP" train --data.path="$work/data.h5" --model.preset=tiny --data.max_seq_len=128 \
  --train.global_batch_tokens=2048 --train.steps=3 --train.backend=cpu \
  --dump-weights="$work/w.h5" >"$work/train.log"
$PY "$REF/make_case.py" --out "$work/tied" --tie --kv-heads 1 --theta 500000 --eps 1e-6 >/dev/null
# A file with a stored run config, as checkpoints carry: max_position_embeddings from it.
cp "$work/w.h5" "$work/ck.h5"
$PY -c 'import h5py,sys; f=h5py.File(sys.argv[1],"a"); f.attrs["schema"]="flexsp.checkpoint"; f.attrs["config"]="[data]\nmax_seq_len = 128\n"' "$work/ck.h5"

check() {  # source.h5 out_dir dtype max_position_embeddings
  $PY - "$@" <<'PYEOF'
import json, os, struct, sys
import h5py, numpy as np
src, out, dtype, max_pos = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
path = os.path.join(out, "model.safetensors")
blob = open(path, "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
assert n % 8 == 0, f"header length {n} not a multiple of 8"
header = json.loads(blob[8:8 + n].decode("utf-8"))
meta = header.pop("__metadata__")
assert meta.get("format") == "pt", meta
data = blob[8 + n:]
with h5py.File(src, "r") as f:
    g = f["model"]
    ref = {k: np.asarray(g[k][...]) for k in g.keys()}
    attrs = {k: g.attrs[k] for k in g.attrs}
assert set(header) == set(ref), f"tensor names differ: {sorted(set(header) ^ set(ref))}"
# Offsets tile the data exactly (no holes, no overlap).
spans = sorted(tuple(v["data_offsets"]) for v in header.values())
assert spans[0][0] == 0 and spans[-1][1] == len(data), (spans[0], spans[-1], len(data))
assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "holes or overlaps"
worst = 0.0
for name, h in header.items():
    a = ref[name].astype(np.float32)
    assert tuple(h["shape"]) == a.shape, (name, h["shape"], a.shape)
    raw = data[h["data_offsets"][0]:h["data_offsets"][1]]
    if dtype == "fp32":
        assert h["dtype"] == "F32", h
        b = np.frombuffer(raw, dtype="<f4").reshape(a.shape)
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), f"{name}: not bit-exact"
    else:
        assert h["dtype"] == "BF16", h
        bits = np.frombuffer(raw, dtype="<u2").reshape(a.shape)
        b = (bits.astype(np.uint32) << 16).view(np.float32)
        err = np.abs(b - a)
        assert np.all(err <= np.abs(a) * 2.0 ** -8), f"{name}: bf16 error above 2^-8 relative"
        # Round to nearest even, computed independently with numpy integers.
        u = a.view(np.uint32).astype(np.uint64)
        rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        assert np.array_equal(rne, bits), f"{name}: not round-to-nearest-even"
        worst = max(worst, float((err / np.maximum(np.abs(a), 1e-30)).max()))
cfg = json.load(open(os.path.join(out, "config.json")))
want = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": int(attrs["hidden"]), "intermediate_size": int(attrs["ffn"]),
        "num_hidden_layers": int(attrs["layers"]), "num_attention_heads": int(attrs["heads"]),
        "num_key_value_heads": int(attrs["kv_heads"]), "vocab_size": int(attrs["vocab"]),
        "tie_word_embeddings": bool(attrs["tie_embeddings"]), "max_position_embeddings": max_pos,
        "torch_dtype": "bfloat16" if dtype == "bf16" else "float32"}
for k, v in want.items():
    assert cfg.get(k) == v, f"config.json {k}: {cfg.get(k)!r}, expected {v!r}"
assert cfg["rms_norm_eps"] == float(attrs["norm_eps"]) and cfg["rope_theta"] == float(attrs["rope_theta"])
assert ("lm_head.weight" in header) == (not cfg["tie_word_embeddings"])
try:
    from safetensors.numpy import load_file
except ImportError:
    load_file = None
if load_file is not None and dtype == "fp32":
    t = load_file(path)
    assert set(t) == set(ref) and all(np.array_equal(t[k], ref[k]) for k in t)
    print("also read by the safetensors package")
print(f"ok: {out}: {len(header)} tensors, {dtype}, max bf16 relative error {worst:.2e}")
PYEOF
}

"$FLEXSP" export --checkpoint "$work/w.h5" --out "$work/bf16" >"$work/x.log"
grep -q 'model.safetensors' "$work/x.log" || fail "no export message"
check "$work/w.h5" "$work/bf16" bf16 4096
"$FLEXSP" export --checkpoint "$work/ck.h5" --out "$work/fp32" --dtype fp32 >/dev/null
check "$work/ck.h5" "$work/fp32" fp32 128
"$FLEXSP_MPIRUN" -np 2 "$FLEXSP" export --checkpoint "$work/tied/weights.h5" --out "$work/tied_bf16" --max-seq-len 512 >/dev/null
check "$work/tied/weights.h5" "$work/tied_bf16" bf16 512
"$FLEXSP" export --checkpoint "$work/tied/weights.h5" --out "$work/tied_fp32" --dtype fp32 --max-seq-len 512 >/dev/null
check "$work/tied/weights.h5" "$work/tied_fp32" fp32 512

# An existing non-empty directory is refused (nothing changes), --force overwrites.
before=$(md5sum "$work/bf16/model.safetensors")
expect_error "not empty" "$FLEXSP" export --checkpoint "$work/w.h5" --out "$work/bf16" --dtype fp32
[[ "$(md5sum "$work/bf16/model.safetensors")" == "$before" ]] || fail "refused export changed the file"
mkdir "$work/empty"
"$FLEXSP" export --checkpoint "$work/w.h5" --out "$work/empty" --dtype fp32 >/dev/null
"$FLEXSP" export --checkpoint "$work/w.h5" --out "$work/bf16" --dtype fp32 --force >/dev/null
check "$work/w.h5" "$work/bf16" fp32 4096
echo "ok: a non-empty --out is refused without --force and overwritten with it"

expect_error "$work/nope.h5" "$FLEXSP" export --checkpoint "$work/nope.h5" --out "$work/o1"
expect_error "$work/data.h5" "$FLEXSP_MPIRUN" -np 2 "$FLEXSP" export --checkpoint "$work/data.h5" --out "$work/o2"
expect_error "--dtype" "$FLEXSP" export --checkpoint "$work/w.h5" --out "$work/o3" --dtype fp16
expect_error "--out" "$FLEXSP" export --checkpoint "$work/w.h5"
[[ ! -e "$work/o1" && ! -e "$work/o3" ]] || fail "a failed export created its directory"
echo "export: all checks passed"
