"""The train and longest modes: training-step rows per preset, token count, eager or
compiled, with the checkpointing fallback on out-of-memory; the longest single sequence by
doubling then bisecting; their tables. The model and the step itself are torch_model's.
"""
import random
import statistics

import torch

from torch_attention import env_record
from torch_common import (Cfg, Lengths, attn_fwd_flops, draw_batch, free_memory, is_oom,
                          progress, short_error)
from torch_model import build_model, dense_fns, memory_fields, run_steps


# ---- mode: train -------------------------------------------------------------------------------
def mode_train(args, dev, out, budget):
    lengths = Lengths(args.lengths)
    amp = dev.type == "cuda"
    dtype = torch.bfloat16 if amp else torch.float32
    presets = args.presets.split(",") if args.presets else (["tiny"] if args.tiny else ["1.3b", "350m"])
    tokens = ([int(t) for t in args.tokens.split(",")] if args.tokens
              else ([256, 512] if args.tiny else [8192, 16384, 32768]))
    warm, steps = (args.warmup, args.steps)
    compile_on = {"on": True, "off": False, "auto": dev.type == "cuda"}[args.compile]
    out.emit(env_record(args, dev, "train", lengths=lengths.source))
    # Most wanted first: eager rows of every preset, the first preset compiled, its middle
    # size with per-sequence SDPA instead of varlen (when auto chose varlen), then the rest
    # compiled. Rows (preset, compiled, attention, tokens).
    plan = [(p, False, args.attn, tokens) for p in presets]
    if compile_on:
        plan.append((presets[0], True, args.attn, tokens))
    if args.attn == "auto" and not args.tiny:
        plan.append((presets[0], False, "sdpa", [tokens[len(tokens) // 2]]))
    if compile_on:
        plan += [(p, True, args.attn, tokens) for p in presets[1:]]
    rate = None  # measured FLOP/s so far: predicts what still fits in the budget
    compile_broken = None
    auto_kinds = set()  # attention kinds that --attn resolved to
    for preset, compiled, attn_kind, row_tokens in plan:
        c = Cfg(preset)
        base = {"kind": "train", "preset": preset, "params": c.num_params(), "compile": compiled}
        if compiled and compile_broken:
            out.emit(dict(base, status="skipped", error=compile_broken))
            continue
        if budget.left() < (60.0 if compiled and not args.tiny else 5.0):
            out.emit(dict(base, status="skipped", error="budget"))
            continue
        if attn_kind != args.attn and attn_kind in auto_kinds:
            out.emit(dict(base, status="skipped", error=f"auto already chose {attn_kind}"))
            continue
        try:
            model, opt, okind, attn_name = build_model(args, c, dev, dtype, attn_kind)
        except Exception as e:
            out.emit(dict(base, status="oom" if is_oom(e) else "error", error=short_error(e)))
            free_memory(dev)
            continue
        if attn_kind == args.attn:
            auto_kinds.add(attn_name.split(":")[0])
        assert sum(p.numel() for p in model.parameters()) == c.num_params()
        if compiled:
            try:
                model.pre, model.post = (torch.compile(f, dynamic=True) for f in dense_fns(c))
            except Exception as e:
                compile_broken = f"torch.compile: {short_error(e)}"
                out.emit(dict(base, status="compile failed", error=compile_broken))
                del model, opt
                free_memory(dev)
                continue
        for T in row_tokens:
            rec = dict(base, tokens_per_step=T, attn=attn_name, optimizer=okind,
                       warmup=warm, steps=steps)
            rng = random.Random(args.seed * 1000003 + T)  # the same batches for every row
            batches = [draw_batch(lengths, rng, T, T // 4 if args.tiny else T)
                       for _ in range(warm + steps)]
            flops = [c.train_flops(sl) for sl in batches[warm:]]
            need = (warm + steps) * (sum(flops) / len(flops)) / rate if rate else 0.0
            if compiled and T == row_tokens[0] and not args.tiny:
                need += 60.0  # the first call compiles
            if need > budget.left():
                out.emit(dict(rec, status="skipped", error=f"budget (needs ~{need:.0f} s)"))
                continue
            modes = {"auto": [False, True], "on": [True], "off": [False]}[args.ckpt]
            for ckpt in modes:
                model.ckpt = ckpt
                progress(f"train {preset} {'compiled' if compiled else 'eager'} T={T} ckpt={ckpt}")
                err = None
                try:
                    times, loss = run_steps(model, opt, c, dev, amp, batches, warm, args.seed)
                except Exception as e:
                    err = ("oom" if is_oom(e) else "error", short_error(e))
                    if compiled and not is_oom(e) and not ckpt:
                        compile_broken = f"torch.compile: {err[1]}"
                if err:
                    model.zero_grad(set_to_none=True)
                    free_memory(dev)
                    out.emit(dict(rec, ckpt=ckpt, status=err[0], error=err[1]))
                    if err[0] == "oom":
                        continue  # try with checkpointing
                    break
                total = sum(times)
                r = dict(rec, ckpt=ckpt, status="ok", step_ms=1e3 * total / len(times),
                         step_ms_median=1e3 * statistics.median(times),
                         tokens_per_s=T * len(times) / total,
                         tflops=sum(flops) / total / 1e12,
                         mfu=sum(flops) / total / 1e12 / args.peak_tflops,
                         nseq_mean=sum(len(s) for s in batches[warm:]) / steps,
                         attn_flop_share=sum(3.0 * c.layers * attn_fwd_flops(s, c.heads, c.hd)
                                             for s in batches[warm:]) / sum(flops),
                         loss=loss, **memory_fields(dev))
                out.emit(r)
                rate = sum(flops) / total if rate is None else min(rate, sum(flops) / total)
                progress(f"  {r['step_ms']:.1f} ms/step {r['tokens_per_s']:.0f} tok/s "
                         f"{r['tflops']:.1f} TFLOP/s MFU {r['mfu']:.3f}")
                break
            if compile_broken:
                break
        del model, opt
        free_memory(dev)
    print_train_table(out.records)


def print_train_table(records):
    rows = [r for r in records if r.get("kind") == "train"]
    print("\nPyTorch training step (bf16 autocast on GPU), MFU against the peak given")
    print(f"{'preset':<7}{'compile':>8}{'tokens':>8}{'ckpt':>6}{'ms/step':>10}{'tok/s':>10}"
          f"{'TFLOP/s':>11}{'MFU':>10}{'peak GiB':>10}  status")
    for r in rows:
        if r.get("status") == "ok":
            peak = r.get("peak_alloc_gib")
            print(f"{r['preset']:<7}{str(r['compile']):>8}{r['tokens_per_step']:>8}"
                  f"{str(r['ckpt']):>6}{r['step_ms']:>10.1f}{r['tokens_per_s']:>10.0f}"
                  f"{r['tflops']:>11.4g}{r['mfu']:>10.3g}"
                  f"{(f'{peak:.1f}' if peak is not None else '-'):>10}  ok ({r['attn']})")
        else:
            print(f"{r['preset']:<7}{str(r['compile']):>8}{r.get('tokens_per_step', '-'):>8}"
                  f"{str(r.get('ckpt', '-')):>6}{'':>51}  {r['status']}: {r.get('error', '')[:80]}")


# ---- mode: longest -----------------------------------------------------------------------------
def mode_longest(args, dev, out, budget):
    amp = dev.type == "cuda"
    dtype = torch.bfloat16 if amp else torch.float32
    c = Cfg(args.preset or ("tiny" if args.tiny else "1.3b"))
    start = args.start_len or (64 if args.tiny else 32768)
    max_len = args.max_len or (1024 if args.tiny else 1 << 20)
    gran = args.granularity or (64 if args.tiny else 8192)
    out.emit(env_record(args, dev, "longest"))
    base = {"kind": "longest", "preset": c.name, "params": c.num_params(), "ckpt": True}
    try:
        model, opt, okind, attn_name = build_model(args, c, dev, dtype)
    except Exception as e:
        out.emit(dict(base, status="oom" if is_oom(e) else "error", error=short_error(e)))
        return
    model.ckpt = True
    total_mem = torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else None
    ok, fail, probes = None, None, []  # ok/fail: (length, seconds, peak GiB)
    L, stop = start, "bisected"

    def probe(n):
        gen_seed = args.seed + n
        try:
            times, _ = run_steps(model, opt, c, dev, amp, [[n]], 0, gen_seed)
            return True, times[0], memory_fields(dev).get("peak_alloc_gib")
        except Exception as e:
            if not is_oom(e):
                raise
        model.zero_grad(set_to_none=True)
        free_memory(dev)
        return False, None, None

    while True:
        if ok is not None:  # a step's cost grows at most as its FLOPs do
            need = ok[1] * c.train_flops([L]) / c.train_flops([ok[0]])
            if need * 1.2 > budget.left():
                stop = f"budget (next probe {L} needs ~{need:.0f} s)"
                break
        elif budget.left() < 5:
            stop = "budget"
            break
        progress(f"longest {c.name}: probing {L}")
        try:
            good, secs, peak = probe(L)
        except Exception as e:  # not out-of-memory: report it and what was found so far
            stop = f"error at {L}: {short_error(e)}"
            break
        probes.append({"len": L, "ok": good, "step_s": secs, "peak_alloc_gib": peak})
        out.emit({"kind": "longest_probe", "preset": c.name, "len": L, "ok": good,
                  "step_s": secs, "peak_alloc_gib": peak})
        if good:
            ok = (L, secs, peak)
        else:
            fail = (L, None, None)
        if fail is None:
            if L >= max_len:
                stop = f"reached --max-len {max_len}"
                break
            L = min(2 * L, max_len)
            continue
        if ok is None:  # even the start is too long: halve until one fits
            if L // 2 < gran:
                stop = f"no length down to {L} fits"
                break
            L //= 2
            continue
        if fail[0] - ok[0] <= gran:
            break
        # Peak memory is about linear in the length: aim at where it meets the card's size,
        # kept in the middle half of the bracket so that each probe shrinks it by a quarter
        # or more; plain bisection without two points to fit.
        mid = (ok[0] + fail[0]) // 2
        fits = [p for p in probes if p["ok"] and p["peak_alloc_gib"]]
        if total_mem and len(fits) >= 2:
            (l1, m1), (l2, m2) = ((p["len"], p["peak_alloc_gib"]) for p in fits[-2:])
            if l2 != l1 and m2 > m1:
                guess = l2 + (0.97 * total_mem / 2**30 - m2) * (l2 - l1) / (m2 - m1)
                quarter = (fail[0] - ok[0]) // 4
                mid = int(min(max(guess, ok[0] + quarter), fail[0] - quarter))
        L = max(ok[0] + gran, min(fail[0] - gran, mid // gran * gran))
    rec = dict(base, attn=attn_name, optimizer=okind, granularity=gran, stop=stop,
               first_fail=fail[0] if fail else None, probes=len(probes))
    if ok is None:
        out.emit(dict(rec, status="none fits", longest=None))
    else:
        # Re-time the winner when there is time: its probe ran right after a resize of the
        # allocator's pools.
        secs, warm = ok[1], False
        if budget.left() > 1.5 * ok[1] + 2:
            try:
                good, s2, _ = probe(ok[0])
            except Exception:
                good = False
            if good:
                secs, warm = s2, True
        flops = c.train_flops([ok[0]])
        out.emit(dict(rec, status="ok", longest=ok[0], step_s=secs, timed_warm=warm,
                      tokens_per_s=ok[0] / secs, tflops=flops / secs / 1e12,
                      mfu=flops / secs / 1e12 / args.peak_tflops, peak_alloc_gib=ok[2]))
    r = out.records[-1]
    print(f"\nPyTorch longest single sequence, {c.name}, activation checkpointing")
    print(f"longest {r.get('longest')} tokens (first fail {r.get('first_fail')}, stop: {stop}); "
          + (f"step {r['step_s']:.2f} s, {r['tflops']:.1f} TFLOP/s, MFU {r['mfu']:.3f}"
             if r.get("status") == "ok" else r.get("status")))
