"""Attention for the baselines: the implementations this torch offers (SDPA per sequence
with a forced backend, PyTorch's varlen APIs, cuDNN's ragged op, SDPA on nested jagged
tensors, a manual fp32 reference), each checked against the reference before use, and the
attention mode that times them over packed batches and prints its table. torch_model's
attention inside the model reuses the same entry points and check. env_record lives here too:
besides the machine, it lists the varlen APIs found.
"""
import contextlib
import inspect
import math
import random
import sys
import warnings

import torch
import torch.nn.functional as F

from torch_common import (Budget, Clock, Lengths, attn_fwd_flops, draw_batch, free_memory,
                          is_oom, measure, progress, rel_err, short_error)


# ---- attention implementations -----------------------------------------------------------------
def sdpa_available():
    return hasattr(F, "scaled_dot_product_attention")


def sdpa_gqa_supported():
    """enable_gqa= appeared in torch 2.5; older versions need k/v expanded by hand."""
    if not sdpa_available():
        return False
    try:
        q, kv = torch.zeros(1, 2, 3, 4), torch.zeros(1, 1, 3, 4)
        F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        return True
    except Exception:
        return False


def sdpa_backend_ctx(name):
    """A context forcing one SDPA backend (FLASH_ATTENTION, CUDNN_ATTENTION, ...), or None
    when this torch cannot (no torch.nn.attention.sdpa_kernel or no such backend)."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = getattr(SDPBackend, name)
    except Exception:
        return None
    return lambda: sdpa_kernel([backend])


def expand_kv(t, groups):
    # Query head h reads kv head h // groups (HF repeat_kv order, SDPA's enable_gqa order).
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def seq_views(t, seqlens):
    """Packed [T, h, d] -> one [1, h, s, d] view per sequence (no copy)."""
    out, a = [], 0
    for s in seqlens:
        out.append(t[a:a + s].transpose(0, 1).unsqueeze(0))
        a += s
    return out


def manual_attention(q, k, v, seqlens):
    """fp32 causal attention per sequence (the reference; the only path on torch < 2.0)."""
    groups = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[2])
    outs, a = [], 0
    for s in seqlens:
        qs = q[a:a + s].transpose(0, 1).float()
        ks = expand_kv(k[a:a + s], groups).transpose(0, 1).float()
        vs = expand_kv(v[a:a + s], groups).transpose(0, 1).float()
        sc = torch.matmul(qs, ks.transpose(1, 2)) * scale
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        p = torch.softmax(sc.masked_fill(mask, float("-inf")), dim=-1)
        outs.append(torch.matmul(p, vs).transpose(0, 1).to(q.dtype))
        a += s
    return torch.cat(outs)


def cu_seqlens(seqlens, dev, dtype=torch.int32):
    cu = [0]
    for s in seqlens:
        cu.append(cu[-1] + s)
    return torch.tensor(cu, dtype=dtype, device=dev)


def varlen_apis():
    """PyTorch's varlen entry points present in this torch, best first: [(name, fn(q, k, v,
    cu, max_s) -> out)], q [T, H, d], k/v [T, KV, d], cu int32 [n+1]."""
    apis = []
    try:
        from torch.nn.attention.varlen import varlen_attn
        params = inspect.signature(varlen_attn).parameters
        if "is_causal" in params:  # torch 2.10
            causal = {"is_causal": True}
        elif "window_size" in params:  # torch 2.11+: causal is exactly the tuple (-1, 0)
            causal = {"window_size": (-1, 0)}
        else:
            causal = None
        gqa = {"enable_gqa": True} if "enable_gqa" in params else {}
        if causal is not None:
            apis.append(("nn.attention.varlen.varlen_attn",
                         lambda q, k, v, cu, m: varlen_attn(
                             q, k, v, cu, cu, m, m, **causal,
                             **(gqa if k.shape[1] != q.shape[1] else {}))))
    except Exception:
        pass
    try:
        op = torch.ops.aten._flash_attention_forward
        apis.append(("aten._flash_attention_forward",
                     lambda q, k, v, cu, m: op(q, k, v, cu, cu, m, m, 0.0, True, False)[0]))
    except Exception:
        pass
    return apis


def cudnn_varlen_apis():
    """cuDNN's ragged-offset attention (the op varlen_attn will call once it enables cuDNN)."""
    try:
        op = torch.ops.aten._cudnn_attention_forward
    except Exception:
        return []
    return [("aten._cudnn_attention_forward",
             lambda q, k, v, cu, m: op(q, k, v, None, cu, cu, m, m, True, 0.0, True, False)[0])]


class Runner:
    """One implementation bound to a packed batch q [T, H, d], k/v [T, KV, d]: leaves (what
    gradients are taken for), run() -> outputs, and maps between outputs and packed layout."""

    def __init__(self, leaves, run, pack_out, unpack, pack_grads):
        self.leaves, self.run = leaves, run
        self.pack_out, self.unpack, self.pack_grads = pack_out, unpack, pack_grads


def _reduce_groups(g, kv):
    """Gradient of expanded k/v [T, H, d] -> [T, KV, d] (sum over each kv head's queries)."""
    t, h, d = g.shape
    return g if h == kv else g.reshape(t, kv, h // kv, d).sum(2)


def build_per_seq(ctx, q, k, v, seqlens, expand, gqa_kw, contiguous=False):
    """SDPA once per sequence: what a model without a varlen kernel does. The inputs are
    [1, h, s, d] views of the packed tensors, or (contiguous) copies made outside the timed
    region, for a backend that rejects the strided views."""
    H, KV = q.shape[1], k.shape[1]
    kk, vv = (expand_kv(k, H // KV), expand_kv(v, H // KV)) if expand else (k, v)
    lay = (lambda x: x.contiguous()) if contiguous else (lambda x: x)
    qs, ks, vs = ([lay(x).detach().requires_grad_() for x in seq_views(t, seqlens)]
                  for t in (q, kk, vv))
    kw = gqa_kw if kk.shape[1] != H else {}
    n = len(seqlens)

    def run():
        with ctx():
            return [F.scaled_dot_product_attention(a, b, c, is_causal=True, **kw)
                    for a, b, c in zip(qs, ks, vs)]

    def packed(ts):
        return torch.cat([t.squeeze(0).transpose(0, 1) for t in ts])

    return Runner(qs + ks + vs, run, packed,
                  lambda g: [x.contiguous() for x in seq_views(g, seqlens)],
                  lambda gs: (packed(gs[:n]), _reduce_groups(packed(gs[n:2 * n]), KV),
                              _reduce_groups(packed(gs[2 * n:]), KV)))


def build_packed(fn, q, k, v, seqlens, expand):
    """One call over the packed batch (varlen APIs, manual): fn(q, k, v, seqlens) -> out."""
    H, KV = q.shape[1], k.shape[1]
    kk, vv = (expand_kv(k, H // KV), expand_kv(v, H // KV)) if expand else (k, v)
    leaves = [t.detach().requires_grad_() for t in (q, kk, vv)]
    return Runner(leaves, lambda: [fn(*leaves, seqlens)], lambda o: o[0], lambda g: [g],
                  lambda g: (g[0], _reduce_groups(g[1], KV), _reduce_groups(g[2], KV)))


def njt_fn(ctx, gqa_kw):
    """SDPA on nested jagged tensors: PyTorch's other varlen route (cuDNN backend here)."""
    from_jagged = torch.nested.nested_tensor_from_jagged
    hints = "max_seqlen" in inspect.signature(from_jagged).parameters

    def fn(q, k, v, seqlens):
        off = cu_seqlens(seqlens, q.device, torch.int64)
        kw = {"min_seqlen": min(seqlens), "max_seqlen": max(seqlens)} if hints else {}
        qn, kn, vn = (from_jagged(t, off, **kw).transpose(1, 2) for t in (q, k, v))
        with ctx():
            o = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True,
                                               **(gqa_kw if k.shape[1] != q.shape[1] else {}))
        return o.transpose(1, 2).values()

    return fn


def impl_candidates(name, dev, gqa_kw):
    """[(api name, builder(q, k, v, seqlens, expand) -> Runner)] for an implementation name;
    empty when this torch lacks it."""
    if name in ("sdpa-flash", "sdpa-cudnn", "sdpa"):
        if not sdpa_available():
            return []
        ctx = (contextlib.nullcontext if name == "sdpa"
               else sdpa_backend_ctx({"sdpa-flash": "FLASH_ATTENTION",
                                      "sdpa-cudnn": "CUDNN_ATTENTION"}[name]))
        if ctx is None:
            return []
        return [("F.scaled_dot_product_attention",
                 lambda q, k, v, sl, ex: build_per_seq(ctx, q, k, v, sl, ex, gqa_kw)),
                ("F.scaled_dot_product_attention (contiguous [1,h,s,d] copies)",
                 lambda q, k, v, sl, ex: build_per_seq(ctx, q, k, v, sl, ex, gqa_kw, True))]
    if name in ("varlen", "varlen-cudnn"):
        out = []
        for api, fn in (varlen_apis() if name == "varlen" else cudnn_varlen_apis()):
            def call(q, k, v, sl, fn=fn):
                return fn(q, k, v, cu_seqlens(sl, q.device), max(sl))
            out.append((api, lambda q, k, v, sl, ex, call=call: build_packed(call, q, k, v, sl, ex)))
        return out
    if name == "njt-cudnn":
        ctx = sdpa_backend_ctx("CUDNN_ATTENTION")
        if ctx is None or not sdpa_available() or not hasattr(torch, "nested") or \
                not hasattr(torch.nested, "nested_tensor_from_jagged"):
            return []
        fn = njt_fn(ctx, gqa_kw)
        return [("SDPA on nested_tensor_from_jagged",
                 lambda q, k, v, sl, ex: build_packed(fn, q, k, v, sl, ex))]
    if name == "manual":
        return [("matmul+softmax (fp32)",
                 lambda q, k, v, sl, ex: build_packed(manual_attention, q, k, v, sl, ex))]
    raise ValueError(name)


CHECK_SEQLENS = [37, 128, 3, 70]  # odd sizes, a tiny one (Wikipedia has many), > one tile


def check_runner(build, H, KV, hd, dtype, dev, seed=0, seqlens=CHECK_SEQLENS):
    """Forward and backward of one candidate against manual fp32 attention on a small packed
    batch. Returns (fwd_err, bwd_err) relative errors (bwd_err is the error message when
    backward fails); a failing forward raises."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    T = sum(seqlens)
    q, k, v, go = (torch.randn(T, h, hd, generator=g).to(dev, dtype)
                   for h in (H, KV, KV, H))
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = manual_attention(*ref_in, seqlens)
    ref_grads = torch.autograd.grad(ref, ref_in, go.double())
    r = build(q, k, v, seqlens)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = r.run()
        fwd = rel_err(r.pack_out(outs), ref)
        try:
            grads = torch.autograd.grad(outs, r.leaves, r.unpack(go))
            bwd = max(rel_err(a, b) for a, b in zip(r.pack_grads(grads), ref_grads))
        except Exception as e:  # forward-only implementations are still worth timing
            bwd = short_error(e)
    return fwd, bwd


# ---- mode: attention ------------------------------------------------------------------------
def attention_cases(args, lengths):
    if args.tiny:
        T = 256
        base = [("1x256", [256]), ("4x64", [64] * 4), ("16x16", [16] * 16)]
    else:
        T = 65536
        base = [("1x64K", [65536]), ("4x16K", [16384] * 4), ("64x1K", [1024] * 64)]
    # Tiny: pieces of at most T/4 so that the smoke test's mix has several sequences.
    mix = draw_batch(lengths, random.Random(args.seed), T, T // 4 if args.tiny else T)
    return base + [(f"wiki{T // 1024}K" if T >= 1024 else f"wiki{T}", mix)]


def attention_configs(args):
    """(head_dim, heads, kv_heads), most wanted first: hd 128 as in 7B-class models, hd 64 as
    in flexsp's 350m/1.3b presets; GQA 4:1 and 1:1."""
    if args.configs:
        return [tuple(int(x) for x in c.split(":")) for c in args.configs.split(",")]
    if args.tiny:
        return [(16, 4, 1), (16, 4, 4), (8, 4, 4), (8, 4, 1)]
    return [(128, 32, 8), (128, 32, 32), (64, 32, 32), (64, 32, 8)]


def mode_attention(args, dev, out, budget):
    lengths = Lengths(args.lengths)
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    tol = (2e-2, 4e-2) if dtype == torch.bfloat16 else (1e-4, 1e-4)
    clock = Clock(dev)
    gqa_kw = {"enable_gqa": True} if sdpa_gqa_supported() else {}
    impls = args.impls.split(",") if args.impls else (
        ["sdpa-cudnn", "sdpa-flash", "varlen", "varlen-cudnn", "njt-cudnn"]
        + (["sdpa", "manual"] if args.tiny else []))
    cases = attention_cases(args, lengths)
    if args.cases:
        keep = args.cases.split(",")
        cases = [c for c in cases if c[0] in keep]
    out.emit(env_record(args, dev, "attention", lengths=lengths.source,
                        impls=impls, sdpa_enable_gqa=bool(gqa_kw),
                        gemm_tflops=gemm_ceiling(dev, dtype, clock, 256 if args.tiny else 8192)))
    for hd, H, KV in attention_configs(args):
        chosen = {}  # impl -> (api, expand, fwd_ok, bwd_ok, errors) or None
        for impl in impls:
            chosen[impl] = select_impl(impl, dev, dtype, tol, H, KV, hd, gqa_kw, out, args)
        for case, seqlens in cases:
            T = sum(seqlens)
            base = {"kind": "attention", "case": case, "head_dim": hd, "heads": H,
                    "kv_heads": KV, "gqa": f"{H // KV}:1", "dtype": str(dtype).split(".")[-1],
                    "nseq": len(seqlens), "tokens": T, "max_s": max(seqlens),
                    "sum_s2": sum(s * s for s in seqlens), "seqlens": seqlens}
            fwd_flops = attn_fwd_flops(seqlens, H, hd)
            # Drawn on the device: 64K x 32 x 128 values each would take seconds on the host.
            g = torch.Generator(device=dev).manual_seed(args.seed + T)
            q, k, v = (torch.randn(T, h, hd, generator=g, device=dev, dtype=dtype)
                       for h in (H, KV, KV))
            best = {}
            for impl in impls:
                c = chosen[impl]
                if c is None:
                    continue
                if len(seqlens) == 1 and impl not in ("sdpa-cudnn", "sdpa-flash") and not args.tiny:
                    continue  # one sequence: the varlen routes run the same kernels as SDPA
                api, build, expand, ok_f, ok_b, errs = c
                rec = dict(base, impl=impl, api=api, kv="expanded" if expand else "native",
                           check_err=errs)
                for pss, ok in (("fwd+bwd", ok_b), ("fwd", ok_f)):
                    r = dict(rec, **{"pass": pss})
                    if not ok:
                        continue
                    if budget.left() < 3.0:
                        out.emit(dict(r, status="skipped", error="budget"))
                        continue
                    try:
                        res = time_attention(build, q, k, v, seqlens, expand, pss, clock,
                                             budget, args.target_s)
                    except Exception as e:
                        out.emit(dict(r, status="oom" if is_oom(e) else "error",
                                      error=short_error(e)))
                        free_memory(dev)
                        continue
                    secs, reps = res
                    flops = fwd_flops * (3.0 if pss == "fwd+bwd" else 1.0)
                    ms = secs * 1e3
                    r.update(status="ok", ms=ms, reps=reps, flops=flops,
                             tflops=flops / secs / 1e12)
                    out.emit(r)
                    progress(f"attention hd{hd} {H}/{KV} {case} {pss} {impl}: {ms:.3f} ms "
                             f"{r['tflops']:.1f} TFLOP/s")
                    if pss not in best or ms < best[pss]["ms"]:
                        best[pss] = r
            for pss, r in best.items():
                out.emit({k_: r[k_] for k_ in ("case", "head_dim", "heads", "kv_heads", "gqa",
                                               "nseq", "tokens", "sum_s2", "impl", "api", "kv",
                                               "pass", "ms", "tflops", "flops")}
                         | {"kind": "attention_best"})
            del q, k, v
            free_memory(dev)
    print_attention_table(out.records)


def gemm_ceiling(dev, dtype, clock, n):
    """TFLOP/s of an n x n x n matrix product on random data: the rate this card really
    reaches (METHOD.md), next to the 989 datasheet peak that MFU is taken against."""
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    secs, _ = measure(clock, lambda: torch.matmul(a, b), Budget(1e9), 0.2, 5, 20)
    return 2.0 * n ** 3 / secs / 1e12


def select_impl(impl, dev, dtype, tol, H, KV, hd, gqa_kw, out, args):
    """First (kv layout, api) of an implementation that passes the check: native GQA before
    k/v expanded by hand (then the expansion is outside the timed region, and noted)."""
    errors = []
    fallback = None
    for expand in ([False, True] if KV != H else [False]):
        for api, build in impl_candidates(impl, dev, gqa_kw):
            b = (lambda q, k, v, sl, build=build, expand=expand: build(q, k, v, sl, expand))
            tag = f"{api}{' (kv expanded)' if expand else ''}"
            # A backend that fails only on the 3-token sequence is still timed (each case
            # then reports its own error): the long cases matter most.
            for sl in (CHECK_SEQLENS, [s for s in CHECK_SEQLENS if s >= 16]):
                try:
                    fwd, bwd = check_runner(b, H, KV, hd, dtype, dev, args.seed, sl)
                except Exception as e:
                    errors.append(f"{tag} {sl}: {short_error(e)}")
                    fwd, bwd = None, None
                    continue
                if fwd < tol[0] and isinstance(bwd, float) and bwd < tol[1]:
                    break
                errors.append(f"{tag} {sl}: check fwd {fwd} bwd {bwd}")
            if fwd is None:
                continue
            ok_f = fwd < tol[0]
            ok_b = isinstance(bwd, float) and bwd < tol[1]
            errs = {"fwd": fwd, "bwd": bwd, "seqlens": sl}
            if sl != CHECK_SEQLENS:
                errs["failed"] = errors[-1]
            if ok_f and ok_b:
                return api, build, expand, True, True, errs
            if ok_f and fallback is None:
                fallback = (api, build, expand, True, False, errs)
    base = {"kind": "attention", "case": "*", "head_dim": hd, "heads": H, "kv_heads": KV,
            "gqa": f"{H // KV}:1", "impl": impl}
    if fallback is not None:
        out.emit(dict(base, status="fwd only", error="; ".join(errors)[:600]))
        return fallback
    out.emit(dict(base, status="unavailable",
                  error=("; ".join(errors) or "not in this torch")[:600]))
    progress(f"attention hd{hd} {H}/{KV} {impl}: unavailable")
    return None


def time_attention(build, q, k, v, seqlens, expand, pss, clock, budget, target_s):
    r = build(q, k, v, seqlens, expand)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if pss == "fwd":
            def fn():
                r.run()
        else:
            gouts = [torch.randn_like(o) for o in r.run()]

            def fn():
                torch.autograd.grad(r.run(), r.leaves, gouts)
        return measure(clock, fn, budget, target_s)


def print_attention_table(records):
    rows = [r for r in records if r.get("kind") == "attention" and r.get("status") == "ok"]
    best = [r for r in records if r.get("kind") == "attention_best"]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    print("\nPyTorch attention, TFLOP/s (causal model FLOPs; fwd+bwd = 3 x fwd), best per case")
    hdr = f"{'hd':>4} {'H/KV':>6} {'case':<9} {'pass':<8}" + "".join(f"{i:>13}" for i in impls)
    print(hdr + f"  {'best':<13} {'ms':>9}")
    for b in best:
        cells = ""
        for i in impls:
            m = [r for r in rows if r["impl"] == i and r["case"] == b["case"] and r["pass"] == b["pass"]
                 and r["head_dim"] == b["head_dim"] and r["kv_heads"] == b["kv_heads"]
                 and r["heads"] == b["heads"]]
            cells += f"{m[0]['tflops']:>13.4g}" if m else f"{'-':>13}"
        print(f"{b['head_dim']:>4} {b['heads']:>3}/{b['kv_heads']:<2} {b['case']:<9} "
              f"{b['pass']:<8}{cells}  {b['impl']:<13} {b['ms']:>9.3f}")


# ---- the env record: every mode's first JSON line ----------------------------------------
def env_record(args, dev, mode, **extra):
    rec = {"kind": "env", "mode": mode, "torch": torch.__version__,
           "python": sys.version.split()[0], "device": dev.type, "tiny": args.tiny,
           "budget_s": args.budget_s, "seed": args.seed, "peak_tflops": args.peak_tflops}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        rec.update(gpu=p.name, sms=p.multi_processor_count, gpu_mem_gib=p.total_memory / 2**30,
                   cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    rec["varlen_apis"] = [a for a, _ in varlen_apis()] + [a for a, _ in cudnn_varlen_apis()]
    rec.update(extra)
    return rec

