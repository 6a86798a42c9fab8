#!/usr/bin/python3
"""Write a HuggingFace LlamaForCausalLM folder from a flexsp weights file, for the tests of
`flexsp import`: config.json and model.safetensors, or N shards model-0000i-of-0000N.safetensors
split by tensor with model.safetensors.index.json, as transformers' save_pretrained lays
them out. The safetensors writer is written here from the format's description (8-byte
little-endian header length, a JSON header of dtype / shape / data_offsets, the raw
little-endian data), independently of flexsp's.

  /usr/bin/python3 tests/reference/write_hf.py --weights W.h5 --out DIR [--dtype F32|F16|BF16]
      [--shards N] [--set KEY=JSON]... [--drop TENSOR]... [--add TENSOR:D1xD2...]...

--set changes a config.json key (a JSON value, "null" deletes it); --drop leaves a tensor
out; --add writes an extra zero tensor of that shape: the bad inputs import must refuse.
"""
import argparse
import json
import os
import struct

import h5py
import numpy as np


def to_dtype(a, dtype):
    """(raw bytes, the values they hold as float32) of float32 array a in dtype."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype("<f4").tobytes(), a
    if dtype == "F16":
        h = a.astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    u = a.view(np.uint32).astype(np.uint64)  # bf16: round to nearest even
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, dtype):
    """tensors: [(name, float32 array)] in file order."""
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        raw, _ = to_dtype(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    return at


def hf_config(attrs):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
           "hidden_size": int(attrs["hidden"]), "intermediate_size": int(attrs["ffn"]),
           "num_hidden_layers": int(attrs["layers"]), "num_attention_heads": int(attrs["heads"]),
           "num_key_value_heads": int(attrs["kv_heads"]), "vocab_size": int(attrs["vocab"]),
           "rms_norm_eps": float(attrs["norm_eps"]), "rope_theta": float(attrs["rope_theta"]),
           "tie_word_embeddings": bool(attrs["tie_embeddings"]), "max_position_embeddings": 4096,
           "attention_bias": False, "mlp_bias": False, "rope_scaling": None}
    kind = attrs.get("rope_scaling", "none")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    if kind == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": float(attrs["rope_scaling_factor"])}
    elif kind == "llama3":
        cfg["rope_scaling"] = {
            "rope_type": "llama3", "factor": float(attrs["rope_scaling_factor"]),
            "low_freq_factor": float(attrs["rope_low_freq_factor"]),
            "high_freq_factor": float(attrs["rope_high_freq_factor"]),
            "original_max_position_embeddings": int(attrs["rope_original_max_position"])}
    return cfg


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--add", action="append", default=[])
    a = ap.parse_args()
    with h5py.File(a.weights, "r") as f:
        g = f["model"]
        attrs = {k: g.attrs[k] for k in g.attrs}
        tensors = [(k, np.asarray(g[k][...])) for k in g.keys() if k not in a.drop]
    for spec in a.add:
        name, shape = spec.split(":")
        tensors.append((name, np.zeros([int(d) for d in shape.split("x")], np.float32)))
    cfg = hf_config(attrs)
    for kv in a.set:
        k, v = kv.split("=", 1)
        cfg[k] = json.loads(v)
        if cfg[k] is None:
            del cfg[k]
    cfg["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[a.dtype]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if a.shards == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a.dtype)
        return
    weight_map, total = {}, 0
    for i in range(a.shards):
        name = f"model-{i + 1:05d}-of-{a.shards:05d}.safetensors"
        part = tensors[i::a.shards]
        total += write_safetensors(os.path.join(a.out, name), part, a.dtype)
        weight_map.update({t: name for t, _ in part})
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
