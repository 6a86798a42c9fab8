#!/usr/bin/python3
"""Independent PyTorch reference for flexsp's model math (forward, backward, one AdamW step).

Written from the model's specification (now docs/model.md, docs/batches.md,
docs/checkpoints.md) and HuggingFace LlamaForCausalLM conventions only -- NOT derived from
the C++/CUDA code in lib/ or kernels/ -- so that it can serve as an independent oracle for
the C++ implementation. Plain torch ops, autograd backward.

Conventions:
  * Parameters use HF names and [out, in] shapes; y = x @ W^T; no biases.
  * RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight   (eps inside the sqrt).
  * RoPE, HF "rotate half": inv_freq[i] = theta^(-2i/hd), i < hd/2; angle = pos * inv_freq;
    cos/sin = cat(angle, angle) over hd; q' = q*cos + rotate_half(q)*sin,
    rotate_half(x) = cat(-x[hd/2:], x[:hd/2]). Angles are computed in float64, then cast.
    Positions restart at 0 in every packed sequence.
  * RoPE scaling (attributes rope_scaling, rope_scaling_factor, rope_low_freq_factor,
    rope_high_freq_factor, rope_original_max_position of /model; absent: none), as
    transformers defines rope_scaling: "linear" divides every inv_freq by factor; "llama3"
    keeps the frequencies whose wavelength 2 pi / inv_freq is shorter than
    original / high_freq_factor, divides by factor those longer than original /
    low_freq_factor, and in between blends linearly in original / wavelength.
  * GQA: query head h uses kv head h // (heads/kv_heads) (HF repeat_kv order).
  * Attention: softmax(q k^T / sqrt(hd)) with a causal mask inside each sequence only.
  * Loss: inside each sequence position i predicts token i+1; mean CE over all predictions
    of the packed batch (sum / count).
  * AdamW: torch.optim.AdamW, one step, weight decay on 2-D tensors only (norms excluded).
  * Tied embeddings: lm_head is model.embed_tokens.weight (no lm_head.weight anywhere).

Output file (--out): /loss float64 scalar, /num_predictions int64 scalar, /logits float32
[T, vocab], /rope_inv_freq float64 [hd/2], /grad/<HF name> float32; with --adamw also /adamw/<HF name> (weights after the
step) and /optimizer/exp_avg/<HF name>, /optimizer/exp_avg_sq/<HF name> (moments after the
step, checkpoint layout); with --per-seq-loss /seq_loss float64 [n] (sum of CE per sequence).

CLI:
  /usr/bin/python3 tests/reference/llama_ref.py --weights W.h5 --batch B.h5 --out O.h5
      [--dtype float32|float64] [--adamw lr,beta1,beta2,eps,weight_decay] [--per-seq-loss]
"""
import argparse
import math
import sys
from collections import OrderedDict

import h5py
import numpy as np
import torch
import torch.nn.functional as F

CFG_INT = ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "tie_embeddings")
CFG_FLOAT = ("rope_theta", "norm_eps")
CFG_ROPE = ("rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor",
            "rope_original_max_position")


def param_shapes(cfg):
    """Ordered {HF name: shape} of every trainable parameter of the model."""
    h, f, v = cfg["hidden"], cfg["ffn"], cfg["vocab"]
    hd = h // cfg["heads"]
    s = OrderedDict([("model.embed_tokens.weight", (v, h))])
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (h,)
        s[p + "self_attn.q_proj.weight"] = (cfg["heads"] * hd, h)
        s[p + "self_attn.k_proj.weight"] = (cfg["kv_heads"] * hd, h)
        s[p + "self_attn.v_proj.weight"] = (cfg["kv_heads"] * hd, h)
        s[p + "self_attn.o_proj.weight"] = (h, cfg["heads"] * hd)
        s[p + "post_attention_layernorm.weight"] = (h,)
        s[p + "mlp.gate_proj.weight"] = (f, h)
        s[p + "mlp.up_proj.weight"] = (f, h)
        s[p + "mlp.down_proj.weight"] = (h, f)
    s["model.norm.weight"] = (h,)
    if not cfg["tie_embeddings"]:
        s["lm_head.weight"] = (v, h)
    return s


def load_weights(path, dtype=torch.float32):
    """Read /model/<HF name> datasets and the config attributes of /model."""
    with h5py.File(path, "r") as f:
        g = f["model"]
        cfg = {k: int(g.attrs[k]) for k in CFG_INT}
        cfg.update({k: float(g.attrs[k]) for k in CFG_FLOAT})
        if "rope_scaling" in g.attrs:
            cfg["rope_scaling"] = g.attrs["rope_scaling"]
            cfg["rope_scaling"] = cfg["rope_scaling"].decode() if isinstance(cfg["rope_scaling"], bytes) \
                else str(cfg["rope_scaling"])
            cfg.update({k: float(g.attrs[k]) for k in CFG_ROPE})
        assert cfg["hidden"] % cfg["heads"] == 0 and cfg["heads"] % cfg["kv_heads"] == 0
        params = OrderedDict()
        for name, shape in param_shapes(cfg).items():
            a = np.asarray(g[name][...])
            assert a.shape == shape, f"{name}: shape {a.shape}, expected {shape}"
            params[name] = torch.tensor(a, dtype=dtype, requires_grad=True)
    return cfg, params


def load_batch(path):
    with h5py.File(path, "r") as f:
        tokens = torch.tensor(np.asarray(f["tokens"][...]).astype(np.int64))
        cu = torch.tensor(np.asarray(f["cu_seqlens"][...]).astype(np.int64))
    assert cu[0] == 0 and cu[-1] == tokens.numel() and bool((cu[1:] >= cu[:-1]).all())
    return tokens, cu


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_inv_freq(cfg, hd):
    """[hd/2] float64: theta^(-2i/hd), then the RoPE scaling of cfg (see the docstring)."""
    inv_freq = cfg["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    kind, factor = cfg.get("rope_scaling", "none"), cfg.get("rope_scaling_factor", 1.0)
    if kind == "linear":
        return inv_freq / factor
    if kind == "llama3":
        orig = cfg["rope_original_max_position"]
        lo, hi = cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (orig / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        out = torch.where(wavelen > orig / lo, inv_freq / factor, inv_freq)
        middle = (wavelen >= orig / hi) & (wavelen <= orig / lo)
        return torch.where(middle, blended, out)
    assert kind == "none", f"unknown rope_scaling {kind}"
    return inv_freq


def rope_cos_sin(positions, inv_freq, dtype):
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]          # [T, hd/2]
    ang = torch.cat([ang, ang], dim=-1)                                     # [T, hd]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):   # x [T, heads, hd]; cos/sin [T, hd]
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


def positions_of(cu):
    return torch.cat([torch.arange(int(cu[i + 1] - cu[i])) for i in range(len(cu) - 1)]
                     + [torch.zeros(0, dtype=torch.int64)])


def attention(q, k, v, cu):
    """q [T, H, hd], k/v [T, KV, hd]; causal attention within each sequence of cu."""
    H, KV, hd = q.shape[1], k.shape[1], q.shape[2]
    k = k.repeat_interleave(H // KV, dim=1)   # query head h <- kv head h // (H/KV)
    v = v.repeat_interleave(H // KV, dim=1)
    out = []
    for i in range(len(cu) - 1):
        a, b = int(cu[i]), int(cu[i + 1])
        if b == a:
            continue
        qs, ks, vs = (t[a:b].transpose(0, 1) for t in (q, k, v))          # [H, L, hd]
        s = torch.matmul(qs, ks.transpose(1, 2)) / math.sqrt(hd)           # [H, L, L]
        mask = torch.ones(b - a, b - a, dtype=torch.bool).triu(1)
        s = s.masked_fill(mask, float("-inf"))
        out.append(torch.matmul(torch.softmax(s, dim=-1), vs).transpose(0, 1))
    return torch.cat(out, dim=0)


def forward(cfg, p, tokens, cu):
    """Logits [T, vocab] of the packed batch."""
    H, KV = cfg["heads"], cfg["kv_heads"]
    hd = cfg["hidden"] // H
    eps = cfg["norm_eps"]
    T = tokens.numel()
    emb = p["model.embed_tokens.weight"]
    x = emb[tokens]
    cos, sin = rope_cos_sin(positions_of(cu), rope_inv_freq(cfg, hd), x.dtype)
    for i in range(cfg["layers"]):
        pre = f"model.layers.{i}."
        w = lambda n: p[pre + n]
        h = rms_norm(x, w("input_layernorm.weight"), eps)
        q = apply_rope(F.linear(h, w("self_attn.q_proj.weight")).view(T, H, hd), cos, sin)
        k = apply_rope(F.linear(h, w("self_attn.k_proj.weight")).view(T, KV, hd), cos, sin)
        v = F.linear(h, w("self_attn.v_proj.weight")).view(T, KV, hd)
        x = x + F.linear(attention(q, k, v, cu).reshape(T, H * hd), w("self_attn.o_proj.weight"))
        h = rms_norm(x, w("post_attention_layernorm.weight"), eps)
        m = F.silu(F.linear(h, w("mlp.gate_proj.weight"))) * F.linear(h, w("mlp.up_proj.weight"))
        x = x + F.linear(m, w("mlp.down_proj.weight"))
    x = rms_norm(x, p["model.norm.weight"], eps)
    return F.linear(x, emb if cfg["tie_embeddings"] else p["lm_head.weight"])


def prediction_index(cu):
    """Token indices that have a target (every position but the last of each sequence)."""
    idx = [torch.arange(int(cu[i]), int(cu[i + 1]) - 1) for i in range(len(cu) - 1)
           if cu[i + 1] - cu[i] > 1]
    return torch.cat(idx) if idx else torch.zeros(0, dtype=torch.int64)


def loss_terms(logits, tokens, cu):
    """Per-prediction cross-entropies (in prediction order) and their token indices."""
    idx = prediction_index(cu)
    ce = F.cross_entropy(logits[idx], tokens[idx + 1], reduction="none")
    return ce, idx


def seq_losses(ce, idx, cu):
    """Sum of CE per sequence, float64 [n]."""
    seq_of = torch.bucketize(idx, cu[1:], right=True)   # sequence of each prediction
    out = torch.zeros(len(cu) - 1, dtype=torch.float64)
    return out.index_add_(0, seq_of, ce.detach().to(torch.float64))


def adamw_step(params, lr, beta1, beta2, eps, wd):
    """One torch.optim.AdamW step on copies of params (whose .grad must be set).
    Returns (new weights, exp_avg, exp_avg_sq), dicts keyed by HF name."""
    copies = OrderedDict()
    for n, t in params.items():
        c = t.detach().clone().requires_grad_(True)
        c.grad = t.grad.detach().clone()
        copies[n] = c
    groups = [{"params": [c for c in copies.values() if c.ndim >= 2], "weight_decay": wd},
              {"params": [c for c in copies.values() if c.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps)
    opt.step()
    st = {n: opt.state[c] for n, c in copies.items()}
    return ({n: c.detach() for n, c in copies.items()},
            {n: st[n]["exp_avg"] for n in copies}, {n: st[n]["exp_avg_sq"] for n in copies})


def run(cfg, params, tokens, cu, adamw=None):
    """Forward + backward (+ optional AdamW). Returns a dict of output arrays."""
    assert int(tokens.max()) < cfg["vocab"] and int(tokens.min()) >= 0, "token out of range"
    for t in params.values():
        t.grad = None
    logits = forward(cfg, params, tokens, cu)
    ce, idx = loss_terms(logits, tokens, cu)
    n = idx.numel()
    if n == 0:
        raise SystemExit("batch has no predictions (every sequence has length <= 1)")
    loss = ce.sum() / n
    loss.backward()
    res = {"loss": float(loss.item()), "num_predictions": n, "logits": logits.detach(),
           "rope_inv_freq": rope_inv_freq(cfg, cfg["hidden"] // cfg["heads"]),
           "grad": OrderedDict((k, t.grad.detach()) for k, t in params.items()),
           "seq_loss": seq_losses(ce, idx, cu)}
    if adamw is not None:
        res["adamw"], res["exp_avg"], res["exp_avg_sq"] = adamw_step(params, *adamw)
    return res


def write_out(path, res, per_seq_loss=False):
    f32 = lambda t: t.to(torch.float32).numpy()
    with h5py.File(path, "w") as f:
        f.create_dataset("loss", data=np.float64(res["loss"]))
        f.create_dataset("num_predictions", data=np.int64(res["num_predictions"]))
        f.create_dataset("logits", data=f32(res["logits"]))
        if "rope_inv_freq" in res:
            f.create_dataset("rope_inv_freq", data=res["rope_inv_freq"].numpy())
        for k, t in res["grad"].items():
            f.create_dataset("grad/" + k, data=f32(t))
        if "adamw" in res:
            for k in res["adamw"]:
                f.create_dataset("adamw/" + k, data=f32(res["adamw"][k]))
                f.create_dataset("optimizer/exp_avg/" + k, data=f32(res["exp_avg"][k]))
                f.create_dataset("optimizer/exp_avg_sq/" + k, data=f32(res["exp_avg_sq"][k]))
        if per_seq_loss:
            f.create_dataset("seq_loss", data=res["seq_loss"].numpy())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    ap.add_argument("--adamw", help="lr,beta1,beta2,eps,weight_decay")
    ap.add_argument("--per-seq-loss", action="store_true")
    a = ap.parse_args(argv)
    adamw = None
    if a.adamw:
        adamw = [float(x) for x in a.adamw.split(",")]
        if len(adamw) != 5:
            ap.error("--adamw needs lr,beta1,beta2,eps,weight_decay")
    torch.manual_seed(0)
    cfg, params = load_weights(a.weights, getattr(torch, a.dtype))
    tokens, cu = load_batch(a.batch)
    res = run(cfg, params, tokens, cu, adamw)
    write_out(a.out, res, a.per_seq_loss)
    print(f"loss {res['loss']:.10f} over {res['num_predictions']} predictions "
          f"({len(cu) - 1} sequences, {tokens.numel()} tokens, {a.dtype}) -> {a.out}")


if __name__ == "__main__":
    main()
