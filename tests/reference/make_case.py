#!/usr/bin/python3
"""Write a random test case for tests/reference/llama_ref.py (and flexsp): DIR/weights.h5 and
DIR/batch.h5.

  /usr/bin/python3 tests/reference/make_case.py --out DIR [--hidden 64] [--layers 2]
      [--heads 4] [--kv-heads 2] [--ffn 176] [--vocab 300] [--seqlens 5,17,1,33] [--tie]
      [--seed 0] [--theta 10000] [--eps 1e-5] [--std 0.02]
      [--rope-scaling linear,FACTOR | llama3,FACTOR,LOW,HIGH,ORIGINAL]

weights.h5: /model/<HF name> float32, full shape; attributes of /model: hidden, layers, heads,
  kv_heads, ffn, vocab, tie_embeddings (int64) and rope_theta, norm_eps (float64) -- the
  checkpoint layout of docs/checkpoints.md; with --rope-scaling also rope_scaling (string)
  and rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor,
  rope_original_max_position. Matrices ~ N(0, std^2); norm weights 1 + N(0, 0.1^2).
batch.h5: /tokens int32 [T] uniform in [0, vocab), /cu_seqlens int64 [n+1] (prefix sums of
  --seqlens, starting at 0).
"""
import argparse
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import param_shapes  # noqa: E402


def make_case(out, hidden=64, layers=2, heads=4, kv_heads=2, ffn=176, vocab=300,
              seqlens=(5, 17, 1, 33), tie=False, seed=0, theta=10000.0, eps=1e-5, std=0.02,
              rope_scaling=None):
    assert hidden % heads == 0 and heads % kv_heads == 0 and (hidden // heads) % 2 == 0
    cfg = dict(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, ffn=ffn,
               vocab=vocab, tie_embeddings=int(tie))
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    with h5py.File(os.path.join(out, "weights.h5"), "w") as f:
        g = f.create_group("model")
        for k, v in cfg.items():
            g.attrs[k] = np.int64(v)
        g.attrs["rope_theta"] = np.float64(theta)
        g.attrs["norm_eps"] = np.float64(eps)
        if rope_scaling:
            kind, *v = rope_scaling.split(",")
            v = [float(x) for x in v] + [1.0, 4.0, 8192.0][len(v) - 1:]
            g.attrs["rope_scaling"] = kind
            for k, x in zip(("rope_scaling_factor", "rope_low_freq_factor",
                             "rope_high_freq_factor"), v):
                g.attrs[k] = np.float64(x)
            g.attrs["rope_original_max_position"] = np.int64(v[3])
        for name, shape in param_shapes(cfg).items():
            if len(shape) == 1:
                w = 1.0 + 0.1 * rng.standard_normal(shape)
            else:
                w = std * rng.standard_normal(shape)
            g.create_dataset(name, data=w.astype(np.float32))
    cu = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int64)
    with h5py.File(os.path.join(out, "batch.h5"), "w") as f:
        f.create_dataset("tokens", data=rng.integers(0, vocab, int(cu[-1])).astype(np.int32))
        f.create_dataset("cu_seqlens", data=cu)
    return os.path.join(out, "weights.h5"), os.path.join(out, "batch.h5")


def main(argv=None):
    ap = argparse.ArgumentParser(description="write a random flexsp reference test case")
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=176)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--seqlens", default="5,17,1,33")
    ap.add_argument("--tie", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--theta", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--rope-scaling", help="linear,FACTOR or llama3,FACTOR,LOW,HIGH,ORIGINAL")
    a = ap.parse_args(argv)
    w, b = make_case(a.out, a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab,
                     [int(s) for s in a.seqlens.split(",")], a.tie, a.seed, a.theta,
                     a.eps, a.std, a.rope_scaling)
    print(f"wrote {w} and {b}")


if __name__ == "__main__":
    main()
