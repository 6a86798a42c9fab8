#!/usr/bin/python3
"""Self-checks of the independent reference (llama_ref.py, compare.py, make_case.py).

  /usr/bin/python3 tests/reference/test_reference.py

Plain asserts; prints one line per check and "N passed, M failed"; non-zero exit on failure.
The comparison with HuggingFace transformers' LlamaForCausalLM, which Debian's python
cannot import, is test_transformers.sh (ctest reference_transformers).
"""
import contextlib
import io
import math
import os
import subprocess
import sys
import tempfile
import traceback

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare as cmp  # noqa: E402
import llama_ref as ref  # noqa: E402
from make_case import make_case  # noqa: E402

PY = "/usr/bin/python3"
TMP = tempfile.mkdtemp(prefix="flexsp_ref_test_")
_n = [0]


def case(dtype=torch.float64, **kw):
    """Build a random case on disk and load it: (cfg, params, tokens, cu)."""
    _n[0] += 1
    w, b = make_case(os.path.join(TMP, f"c{_n[0]}"), **kw)
    cfg, p = ref.load_weights(w, dtype)
    tokens, cu = ref.load_batch(b)
    return cfg, p, tokens, cu


def rel(a, b):
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).norm() / max(float(b.norm()), 1e-300))


def loss_of(cfg, p, tokens, cu):
    ce, idx = ref.loss_terms(ref.forward(cfg, p, tokens, cu), tokens, cu)
    return ce.sum() / idx.numel()


# ---------------------------------------------------------------------------------------------
def test_packed_equals_per_sequence():
    """(a) no cross-sequence leakage: packed results == one sequence at a time."""
    cfg, p, tokens, cu = case(seqlens=(5, 17, 1, 33, 2), std=0.2)
    res = ref.run(cfg, p, tokens, cu)
    total, npred = 0.0, 0
    for i in range(len(cu) - 1):
        a, b = int(cu[i]), int(cu[i + 1])
        t1, cu1 = tokens[a:b], torch.tensor([0, b - a])
        with torch.no_grad():
            lg = ref.forward(cfg, p, t1, cu1)
            assert rel(lg, res["logits"][a:b]) < 1e-12, f"logits of sequence {i} differ"
            ce, idx = ref.loss_terms(lg, t1, cu1)
        assert abs(float(ce.sum()) - float(res["seq_loss"][i])) < 1e-10
        total += float(ce.sum())
        npred += idx.numel()
    assert npred == res["num_predictions"] == 5 + 17 + 0 + 33 + 2 - 4
    assert abs(total / npred - res["loss"]) < 1e-12


def test_block_diagonal_mask_attention():
    """(a') the per-sequence attention loop == one full attention with a block-diag causal mask."""
    torch.manual_seed(1)
    cu = torch.tensor([0, 3, 3, 10, 11, 20])
    T, H, KV, hd = 20, 4, 2, 8
    q, k, v = torch.randn(T, H, hd, dtype=torch.float64), \
        torch.randn(T, KV, hd, dtype=torch.float64), torch.randn(T, KV, hd, dtype=torch.float64)
    seq = torch.bucketize(torch.arange(T), cu[1:], right=True)
    pos = torch.arange(T)
    allowed = (seq[:, None] == seq[None, :]) & (pos[None, :] <= pos[:, None])
    out = torch.empty(T, H, hd, dtype=torch.float64)
    for h in range(H):
        kk, vv = k[:, h // (H // KV)], v[:, h // (H // KV)]
        s = (q[:, h] @ kk.T / math.sqrt(hd)).masked_fill(~allowed, float("-inf"))
        out[:, h] = torch.softmax(s, -1) @ vv
    assert rel(ref.attention(q, k, v, cu), out) < 1e-13


def test_causality():
    """changing token j changes no logits before j in its sequence nor in any other sequence."""
    cfg, p, tokens, cu = case(seqlens=(9, 12, 7), std=0.2)
    with torch.no_grad():
        base = ref.forward(cfg, p, tokens, cu)
        t2 = tokens.clone()
        j = 9 + 5
        t2[j] = (t2[j] + 1) % cfg["vocab"]
        new = ref.forward(cfg, p, t2, cu)
    d = (new - base).abs().amax(-1)
    assert float(d[:j].max()) == 0.0 and float(d[21:].max()) == 0.0
    assert float(d[j:21].min()) > 0.0


def test_float32_vs_float64():
    """(b) float32 and float64 runs agree (relative error ~1e-5 or better)."""
    cfg, p64, tokens, cu = case(torch.float64, seqlens=(5, 17, 1, 33))
    _, p32 = ref.load_weights(os.path.join(TMP, f"c{_n[0]}", "weights.h5"), torch.float32)
    adam = (1e-3, 0.9, 0.95, 1e-8, 0.1)
    r64, r32 = ref.run(cfg, p64, tokens, cu, adam), ref.run(cfg, p32, tokens, cu, adam)
    assert abs(r64["loss"] - r32["loss"]) / r64["loss"] < 1e-6
    assert rel(r32["logits"], r64["logits"]) < 1e-5
    worst = max(rel(r32["grad"][k], r64["grad"][k]) for k in p64)
    assert worst < 1e-4, worst
    worst_adam = max(rel(r32["adamw"][k], r64["adamw"][k]) for k in p64)
    assert worst_adam < 1e-5, worst_adam
    print(f"    worst relative error: logits {rel(r32['logits'], r64['logits']):.1e}, "
          f"grad {worst:.1e}, adamw {worst_adam:.1e}")


def _finite_difference(cfg, p, tokens, cu, entries_per_tensor=2, h=1e-6, tol=1e-6):
    res = ref.run(cfg, p, tokens, cu)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, t in p.items():
            # random direction over the whole tensor: (L(p+hd) - L(p-hd)) / 2h == <grad, d>
            d = torch.randn(t.shape, generator=g, dtype=t.dtype)
            t += h * d
            lp = float(loss_of(cfg, p, tokens, cu))
            t -= 2 * h * d
            lm = float(loss_of(cfg, p, tokens, cu))
            t += h * d
            fd, an = (lp - lm) / (2 * h), float((res["grad"][name] * d).sum())
            assert abs(fd - an) <= tol * max(abs(an), 1e-3), f"{name}: fd {fd} vs grad {an}"
            # a few single entries, the largest-gradient ones
            flat = t.view(-1)
            for e in res["grad"][name].view(-1).abs().argsort(descending=True)[:entries_per_tensor]:
                old = float(flat[e])
                flat[e] = old + h
                lp = float(loss_of(cfg, p, tokens, cu))
                flat[e] = old - h
                lm = float(loss_of(cfg, p, tokens, cu))
                flat[e] = old
                fd, an = (lp - lm) / (2 * h), float(res["grad"][name].view(-1)[e])
                assert abs(fd - an) <= tol * max(abs(an), 1e-3), f"{name}[{e}]: {fd} vs {an}"


def test_finite_differences():
    """(c) autograd gradients == central finite differences (float64), every tensor."""
    cfg, p, tokens, cu = case(layers=2, hidden=32, heads=4, kv_heads=2, ffn=48, vocab=50,
                              seqlens=(6, 1, 9), std=0.3)
    _finite_difference(cfg, p, tokens, cu)


def test_finite_differences_tied():
    """(c/f) tied embeddings: the embedding gradient sums its input and output uses."""
    cfg, p, tokens, cu = case(layers=1, hidden=32, heads=2, kv_heads=1, ffn=40, vocab=40,
                              seqlens=(7, 8), std=0.3, tie=True)
    assert "lm_head.weight" not in p
    _finite_difference(cfg, p, tokens, cu)


def test_adamw_formula():
    """(e) one AdamW step == the hand-written formula (decay on matrices only)."""
    cfg, p, tokens, cu = case(seqlens=(8, 13))
    lr, b1, b2, eps, wd = 3e-3, 0.9, 0.95, 1e-8, 0.1
    res = ref.run(cfg, p, tokens, cu, (lr, b1, b2, eps, wd))
    for name in ("model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight",
                 "model.layers.0.input_layernorm.weight", "model.norm.weight"):
        w, g = p[name].detach(), res["grad"][name]
        decay = wd if w.ndim == 2 else 0.0
        m, v = (1 - b1) * g, (1 - b2) * g * g
        expect = w * (1 - lr * decay) - lr * (m / (1 - b1)) / ((v / (1 - b2)).sqrt() + eps)
        assert rel(res["adamw"][name], expect) < 1e-14, name
        assert rel(res["exp_avg"][name], m) < 1e-15 and rel(res["exp_avg_sq"][name], v) < 1e-15
    # untouched embedding rows (tokens absent from the batch) only decay
    absent = sorted(set(range(cfg["vocab"])) - set(tokens.tolist()))[0]
    e = p["model.embed_tokens.weight"].detach()[absent]
    assert rel(res["adamw"]["model.embed_tokens.weight"][absent], e * (1 - lr * wd)) < 1e-15


def test_rope_properties():
    """RoPE is a rotation (norm kept) and q.k depends only on the relative position."""
    hd, theta = 16, 10000.0
    torch.manual_seed(2)
    q, k = torch.randn(1, 1, hd, dtype=torch.float64), torch.randn(1, 1, hd, dtype=torch.float64)

    def rot(x, pos):
        c, s = ref.rope_cos_sin(torch.tensor([pos]), ref.rope_inv_freq({"rope_theta": theta}, hd),
                                torch.float64)
        return ref.apply_rope(x, c, s)
    assert abs(float(rot(q, 37).norm()) - float(q.norm())) < 1e-12
    d1 = float((rot(q, 10) * rot(k, 3)).sum())
    d2 = float((rot(q, 107) * rot(k, 100)).sum())
    assert abs(d1 - d2) < 1e-10
    # explicit convention: pair (i, i + hd/2) rotated by pos * theta^(-2i/hd)
    pos, x = 5, torch.randn(hd, dtype=torch.float64)
    y = rot(x.view(1, 1, hd), pos).view(-1)
    for i in range(hd // 2):
        a = pos * theta ** (-2 * i / hd)
        assert abs(float(y[i]) - (float(x[i]) * math.cos(a) - float(x[i + hd // 2]) * math.sin(a))) < 1e-12
        assert abs(float(y[i + hd // 2]) - (float(x[i + hd // 2]) * math.cos(a) + float(x[i]) * math.sin(a))) < 1e-12


def test_gqa_mapping():
    """kv_heads=2 model == kv_heads=4 model whose kv head h is kv head h // 2 duplicated."""
    cfg, p, tokens, cu = case(seqlens=(11, 6), heads=4, kv_heads=2, std=0.3)
    hd = cfg["hidden"] // cfg["heads"]
    cfg4, p4 = dict(cfg, kv_heads=4), {}
    for k, t in p.items():
        if k.endswith(("k_proj.weight", "v_proj.weight")):
            t = t.detach().view(2, hd, -1).repeat_interleave(2, dim=0).reshape(4 * hd, -1)
        p4[k] = t.detach()
    with torch.no_grad():
        assert rel(ref.forward(cfg4, p4, tokens, cu), ref.forward(cfg, p, tokens, cu)) < 1e-13


def test_gqa_variants_and_tie():
    """(f) kv_heads == heads, kv_heads == 1, tied embeddings: finite results."""
    for kw in (dict(heads=4, kv_heads=4), dict(heads=4, kv_heads=1),
               dict(heads=8, kv_heads=2, tie=True)):
        cfg, p, tokens, cu = case(torch.float32, seqlens=(5, 17, 1, 33), **kw)
        res = ref.run(cfg, p, tokens, cu, (1e-3, 0.9, 0.95, 1e-8, 0.1))
        assert math.isfinite(res["loss"]), kw
        assert all(bool(torch.isfinite(t).all()) for t in res["grad"].values()), kw
        assert all(bool(torch.isfinite(t).all()) for t in res["adamw"].values()), kw
        assert ("lm_head.weight" in res["grad"]) == (not kw.get("tie", False))


def test_cli_and_compare():
    """the three scripts end to end; compare.py passes equal files and fails bad ones."""
    d = os.path.join(TMP, "cli")
    run = lambda *a: subprocess.run([PY, *a], capture_output=True, text=True)
    r = run(os.path.join(HERE, "make_case.py"), "--out", d, "--seqlens", "4,9,1", "--tie",
            "--seed", "3")
    assert r.returncode == 0, r.stderr
    outs = {}
    for dt in ("float32", "float64"):
        outs[dt] = os.path.join(d, f"{dt}.h5")
        r = run(os.path.join(HERE, "llama_ref.py"), "--weights", os.path.join(d, "weights.h5"),
                "--batch", os.path.join(d, "batch.h5"), "--out", outs[dt], "--dtype", dt,
                "--adamw", "1e-3,0.9,0.95,1e-8,0.1", "--per-seq-loss")
        assert r.returncode == 0, r.stderr
    with h5py.File(outs["float32"], "r") as f:
        assert f["loss"].dtype == np.float64 and f["loss"].shape == ()
        assert f["num_predictions"][()] == 3 + 8 + 0
        assert f["logits"].dtype == np.float32 and f["logits"].shape == (14, 300)
        assert f["seq_loss"].shape == (3,) and "lm_head.weight" not in f["grad"]
    r = run(os.path.join(HERE, "compare.py"), outs["float32"], outs["float64"],
            "--keys", "loss,logits,grad,adamw,optimizer,seq_loss", "--rtol", "1e-4")
    assert r.returncode == 0 and r.stdout.strip().endswith(" 0 failed"), r.stdout
    # a perturbed gradient and a missing tensor must fail
    bad = os.path.join(d, "bad.h5")
    with h5py.File(outs["float32"], "r") as src, h5py.File(bad, "w") as dst:
        for k in ("loss", "logits", "grad", "adamw"):
            src.copy(k, dst)
        dst["grad/model.norm.weight"][0] += 1.0
        del dst["adamw/model.norm.weight"]
    with contextlib.redirect_stdout(io.StringIO()):
        passed, failed = cmp.compare(bad, outs["float32"], ["loss", "grad", "adamw"], 1e-5)
    assert failed == 2 and passed > 0
    r = run(os.path.join(HERE, "compare.py"), bad, outs["float32"])
    assert r.returncode == 1 and r.stdout.strip().endswith(" 2 failed"), r.stdout


def main():
    torch.set_num_threads(min(4, torch.get_num_threads()))
    tests = [(n, f) for n, f in globals().items() if n.startswith("test_") and callable(f)]
    passed = failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASS {name}")
            passed += 1
        except Exception:
            print(f"FAIL {name}\n{traceback.format_exc()}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
