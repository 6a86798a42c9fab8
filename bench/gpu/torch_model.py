"""The PyTorch LLaMA of the train and longest modes (flexsp's presets, HF LlamaForCausalLM
math over one packed batch), its attention (chosen among torch_attention's implementations by
the same check), the AdamW optimizer and the timed training steps, with the simulated
out-of-memory that lets the tests exercise the fallbacks on a CPU.
"""
import contextlib
import time

import torch
import torch.nn.functional as F

from torch_attention import (build_packed, check_runner, cu_seqlens, expand_kv,
                             manual_attention, sdpa_available, sdpa_backend_ctx,
                             sdpa_gqa_supported, varlen_apis)
from torch_common import short_error


# ---- the model (train, longest) ----------------------------------------------------------------
def rms_norm(x, w, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, cos, sin):
    """HF rotate-half RoPE; x [T, h, d], cos/sin [T, d]."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos[:, None, :] + rot * sin[:, None, :]


def dense_fns(c):
    """The per-layer work around attention as two plain functions of tensors, so that
    torch.compile can take them (weights are arguments: one graph for all layers; T is
    dynamic: one graph for all batch sizes); attention stays eager between them."""
    H, KV, hd, eps = c.heads, c.kv_heads, c.hd, c.norm_eps

    def pre(x, ln1, wqkv, cos, sin):
        t = x.shape[0]
        q, k, v = F.linear(rms_norm(x, ln1, eps), wqkv).split([H * hd, KV * hd, KV * hd], -1)
        return (rope(q.reshape(t, H, hd), cos, sin), rope(k.reshape(t, KV, hd), cos, sin),
                v.reshape(t, KV, hd).contiguous())

    def post(x, a, wo, ln2, w13, w2):
        x = x + F.linear(a, wo)
        g, u = F.linear(rms_norm(x, ln2, eps), w13).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, w2)

    return pre, post


class Block(torch.nn.Module):
    def __init__(self, c, dev):
        super().__init__()
        h, qd, kvd = c.hidden, c.heads * c.hd, c.kv_heads * c.hd
        mat = lambda *s: torch.nn.Parameter(torch.empty(*s, device=dev).normal_(0.0, c.init_std))
        self.ln1 = torch.nn.Parameter(torch.ones(h, device=dev))
        self.wqkv = mat(qd + 2 * kvd, h)  # q_proj, k_proj, v_proj stacked: one GEMM
        self.wo = mat(h, qd)
        self.ln2 = torch.nn.Parameter(torch.ones(h, device=dev))
        self.w13 = mat(2 * c.ffn, h)  # gate_proj, up_proj stacked
        self.w2 = mat(h, c.ffn)


class Llama(torch.nn.Module):
    """LLaMA (HF LlamaForCausalLM math, untied) over one packed batch: fp32 weights and
    residual stream, bf16 matmuls and attention under autocast, causal within each sequence,
    loss = mean next-token cross-entropy over the batch's predictions."""

    def __init__(self, c, dev, attn, ckpt=False):
        super().__init__()
        self.c, self.attn, self.ckpt = c, attn, ckpt
        mat = lambda *s: torch.nn.Parameter(torch.empty(*s, device=dev).normal_(0.0, c.init_std))
        self.embed = mat(c.vocab, c.hidden)
        self.blocks = torch.nn.ModuleList(Block(c, dev) for _ in range(c.layers))
        self.norm = torch.nn.Parameter(torch.ones(c.hidden, device=dev))
        self.lm_head = mat(c.vocab, c.hidden)
        self.pre, self.post = dense_fns(c)

    def layer(self, x, i, blk, batch):
        q, k, v = self.pre(x, blk.ln1, blk.wqkv, batch.cos, batch.sin)
        a = self.attn(q, k, v, batch)
        return self.post(x, a.reshape(x.shape[0], -1), blk.wo, blk.ln2, blk.w13, blk.w2)

    def forward(self, batch):
        from torch.utils.checkpoint import checkpoint
        x = F.embedding(batch.tokens, self.embed)
        for i, blk in enumerate(self.blocks):
            if self.ckpt:
                x = checkpoint(self.layer, x, i, blk, batch, use_reentrant=False)
            else:
                x = self.layer(x, i, blk, batch)
        x = rms_norm(x, self.norm, self.c.norm_eps)
        if not self.ckpt:
            return self.ce(x, batch.targets) / batch.n_pred
        # With checkpointing the [T, vocab] logits would dominate memory: chunks of 8K tokens,
        # each recomputed in backward.
        total = 0.0
        for a in range(0, x.shape[0], 8192):
            total = total + checkpoint(self.ce, x[a:a + 8192], batch.targets[a:a + 8192],
                                       use_reentrant=False)
        return total / batch.n_pred

    def ce(self, x, targets):
        return F.cross_entropy(F.linear(x, self.lm_head).float(), targets, ignore_index=-100,
                               reduction="sum")


class Batch:
    """Packed batch on the device: tokens, next-token targets inside each sequence (-100 at
    each sequence's last position), RoPE tables for positions restarting at 0 per sequence."""

    def __init__(self, c, seqlens, dev, dtype, gen):
        T = sum(seqlens)
        self.seqlens, self.max_s = seqlens, max(seqlens)
        self.cu = cu_seqlens(seqlens, dev)
        self.tokens = torch.randint(0, c.vocab, (T,), generator=gen, device="cpu").to(dev)
        lens = torch.tensor(seqlens, device=dev)
        ends = torch.cumsum(lens, 0)
        pos = torch.arange(T, device=dev) - (ends - lens).repeat_interleave(lens)
        self.targets = torch.roll(self.tokens, -1)
        self.targets[ends - 1] = -100
        self.n_pred = T - len(seqlens)
        inv = c.rope_theta ** (-torch.arange(0, c.hd, 2, dtype=torch.float64, device=dev) / c.hd)
        ang = pos.double()[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        self.cos, self.sin = ang.cos().to(dtype), ang.sin().to(dtype)


def model_attention(kind, fn, H, KV, gqa_kw, ctx=None):
    """Attention inside the model: q [T, H, d], k/v [T, KV, d] -> [T, H, d]."""
    if kind == "varlen":
        return lambda q, k, v, b: fn(q, k, v, b.cu, b.max_s)
    if kind == "manual":
        return lambda q, k, v, b: manual_attention(q, k, v, b.seqlens)
    native = bool(gqa_kw) or H == KV
    ctx = ctx or contextlib.nullcontext

    def per_seq(q, k, v, b):
        if not native:
            k, v = expand_kv(k, H // KV), expand_kv(v, H // KV)
        outs = []
        with ctx():
            for qs, ks, vs in zip(*(t.split(b.seqlens) for t in (q, k, v))):
                o = F.scaled_dot_product_attention(
                    *(t.transpose(0, 1).unsqueeze(0) for t in (qs, ks, vs)), is_causal=True,
                    **(gqa_kw if native and H != KV else {}))
                outs.append(o.squeeze(0).transpose(0, 1))
        return torch.cat(outs)

    return per_seq


def choose_model_attention(args, c, dev, dtype, kind_wanted):
    """auto: the first of varlen, per-sequence SDPA, manual that passes the same check as in
    attention mode (fwd and bwd)."""
    gqa_kw = {"enable_gqa": True} if sdpa_gqa_supported() else {}
    tol = (2e-2, 4e-2) if dtype == torch.bfloat16 else (1e-4, 1e-4)
    order = {"auto": ["varlen", "sdpa", "manual"]}.get(kind_wanted, [kind_wanted])
    errors = []
    for kind in order:
        if kind == "varlen":
            cands = [(api, fn) for api, fn in varlen_apis()]
        elif kind == "sdpa":
            ctx = None if args.sdpa_backend == "default" else sdpa_backend_ctx(args.sdpa_backend)
            cands = [("F.scaled_dot_product_attention" +
                      ("" if ctx is None else f" [{args.sdpa_backend}]"), None)] \
                if sdpa_available() and (ctx or args.sdpa_backend == "default") else []
        else:
            cands = [("matmul+softmax", None)]
        if not cands:
            errors.append(f"{kind}: not in this torch")
        for api, fn in cands:
            attn = model_attention(kind, fn, c.heads, c.kv_heads, gqa_kw,
                                   ctx if kind == "sdpa" else None)

            def build(q, k, v, sl, attn=attn):
                b = type("B", (), {})()
                b.seqlens, b.cu, b.max_s = sl, cu_seqlens(sl, q.device), max(sl)
                return build_packed(lambda q_, k_, v_, s_: attn(q_, k_, v_, b), q, k, v, sl, False)
            try:
                fwd, bwd = check_runner(build, c.heads, c.kv_heads, c.hd, dtype, dev, args.seed)
            except Exception as e:
                errors.append(f"{kind} {api}: {short_error(e)}")
                continue
            if fwd < tol[0] and isinstance(bwd, float) and bwd < tol[1]:
                return f"{kind}: {api}", attn
            errors.append(f"{kind} {api}: check fwd {fwd} bwd {bwd}")
    raise RuntimeError("no attention implementation passed the check: " + "; ".join(errors))


def make_optimizer(model, dev):
    """AdamW as flexsp's defaults (lr 3e-4 here, betas 0.9/0.95, eps 1e-8, decay 0.1 on
    matrices only): fused when this torch has it for the device, else foreach, else plain."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    for kind in ("fused", "foreach", "plain"):
        try:
            kw = {kind: True} if kind != "plain" else {}
            opt = torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, **kw)
            if kind == "fused":  # some versions accept the flag and fail only at step()
                probe = torch.nn.Parameter(torch.zeros(2, 2, device=dev))
                probe.grad = torch.zeros_like(probe)
                torch.optim.AdamW([probe], fused=True).step()
            return opt, kind
        except Exception:
            continue
    raise RuntimeError("no AdamW")


def clip_grads(params, max_norm):
    try:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    except TypeError:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)


def train_step(model, opt, batch, dev, amp):
    with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
        loss = model(batch)
    loss.backward()
    clip_grads(list(model.parameters()), 1.0)  # flexsp's optim.grad_clip default
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def memory_fields(dev):
    if dev.type == "cuda":
        return {"peak_alloc_gib": torch.cuda.max_memory_allocated() / 2**30,
                "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}
    import resource
    return {"peak_alloc_gib": None, "peak_reserved_gib": None,
            "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


SIMULATE_OOM_ABOVE = 0  # --simulate-oom-above (tests): steps over this many tokens "run out"


def run_steps(model, opt, c, dev, amp, batches, n_warm, seed):
    """Train on the batches; the first n_warm are untimed. Returns (seconds per timed step,
    last loss) with peak memory counted over the timed steps."""
    dtype = torch.bfloat16 if amp else torch.float32
    gen = torch.Generator(device="cpu").manual_seed(seed)
    times, loss = [], None
    for i, sl in enumerate(batches):
        limit = SIMULATE_OOM_ABOVE * (4 if model.ckpt else 1)
        if limit and sum(sl) > limit:
            raise RuntimeError(f"CUDA out of memory (simulated: {sum(sl)} > {limit} tokens)")
        b = Batch(c, sl, dev, dtype, gen)
        if i == n_warm and dev.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        loss = train_step(model, opt, b, dev, amp)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        del b
    return times[n_warm:], float(loss)


def build_model(args, c, dev, dtype, attn_kind=None):
    attn_name, attn = choose_model_attention(args, c, dev, dtype, attn_kind or args.attn)
    torch.manual_seed(args.seed)
    model = Llama(c, dev, attn)
    opt, okind = make_optimizer(model, dev)
    return model, opt, okind, attn_name

