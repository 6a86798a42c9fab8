# The PyTorch baselines of the GPU benchmarks (bench/gpu/torch_baseline.py) in CPU tiny
# mode, so that the one GPU run they are written for does not die on a Python error:
#  attention: every case x config x pass has a best row; every measured row has finite
#             positive ms / TFLOP/s / FLOPs equal to 4*H*d*sum s(s+1)/2 (x3 for fwd+bwd);
#             implementations this torch lacks are reported unavailable, not crashed on;
#  train:     a row per token count, with the fallback to activation checkpointing after an
#             (simulated) out-of-memory; FLOPs per step as flexsp's model_train_flops;
#  longest:   the doubling-then-bisecting search against a simulated memory limit finds
#             the exact longest length.
# Skipped (exit 77) when /usr/bin/python3 (or $FLEXSP_TORCH_PYTHON) has no torch.
set -euo pipefail
PY=${FLEXSP_TORCH_PYTHON:-/usr/bin/python3}  # another python with torch, to try other versions
if ! $PY -c 'import torch' 2>/dev/null; then
  echo "SKIP: $PY has no torch (Debian's python3-torch)"
  exit 77
fi
src=${FLEXSP_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
script=$src/bench/gpu/torch_baseline.py
work=$(mktemp -d "${PWD}/torch_baseline.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1  # the CI machine has 2 cores, shared with other tests

# A lengths file of our own: the test must not depend on ../shared.
$PY -c 'import random; r = random.Random(5); print("\n".join(str(int(r.lognormvariate(5.5, 1.3)) + 1) for _ in range(2000)))' >"$work/lengths.txt"

run() {  # run MODE ARGS...: JSON lines to $work/MODE.jsonl, the table to $work/MODE.txt
  local mode=$1; shift
  $PY "$script" "$mode" --device cpu --tiny --budget-s 120 --lengths "$work/lengths.txt" \
    --jsonl "$work/$mode.jsonl" "$@" >"$work/$mode.txt" 2>"$work/$mode.err" ||
    { tail -20 "$work/$mode.err" >&2; fail "$mode exited non-zero"; }
}
run attention
run train --simulate-oom-above 300
run longest --simulate-oom-above 100

$PY - "$work" <<'PYEOF' || fail "JSON lines"
import json, math, sys
work = sys.argv[1]

def lines(mode):
    with open(f"{work}/{mode}.jsonl") as f:
        return [json.loads(l) for l in f]

def positive(rec, *keys):
    for k in keys:
        v = rec.get(k)
        assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, (k, rec)

for mode in ("attention", "train", "longest"):
    env = lines(mode)[0]
    assert env["kind"] == "env" and env["mode"] == mode and env["device"] == "cpu", env

att = lines("attention")
positive(att[0], "gemm_tflops")
ok = [r for r in att if r["kind"] == "attention" and r.get("status") == "ok"]
best = [r for r in att if r["kind"] == "attention_best"]
cases = {r["case"] for r in ok}
assert cases == {"1x256", "4x64", "16x16", "wiki256"}, cases
configs = {(r["head_dim"], r["heads"], r["kv_heads"]) for r in ok}
assert configs == {(16, 4, 1), (16, 4, 4), (8, 4, 4), (8, 4, 1)}, configs
assert len(best) == len(cases) * len(configs) * 2, len(best)
for r in ok + best:
    positive(r, "ms", "tflops", "flops", "tokens", "nseq")
    assert r["tokens"] == 256, r
for r in ok:
    f = sum(4.0 * r["heads"] * r["head_dim"] * s * (s + 1) / 2 for s in r["seqlens"])
    f *= 3 if r["pass"] == "fwd+bwd" else 1
    assert abs(r["flops"] - f) <= 1e-9 * f, r
    assert abs(r["tflops"] - r["flops"] / (r["ms"] * 1e-3) / 1e12) <= 1e-6 * r["tflops"], r
    assert sum(r["seqlens"]) == r["tokens"] and r["sum_s2"] == sum(s * s for s in r["seqlens"])
    assert r["check_err"]["fwd"] < 1e-4, r
# The fp32 reference implementation is always there; what this torch lacks is reported.
assert {r["impl"] for r in ok} >= {"manual"}, {r["impl"] for r in ok}
for r in att:
    if r["kind"] == "attention" and r.get("status") != "ok":
        assert r["status"] in ("unavailable", "fwd only", "skipped") and r.get("error"), r
for r in best:
    same = [o for o in ok if (o["case"], o["pass"], o["head_dim"], o["kv_heads"]) ==
            (r["case"], r["pass"], r["head_dim"], r["kv_heads"])]
    assert r["ms"] == min(o["ms"] for o in same), r
mix = next(r for r in ok if r["case"] == "wiki256")
assert len(mix["seqlens"]) > 1 and max(mix["seqlens"]) <= 64, mix["seqlens"]

# tiny: hidden 64, 2 layers, 4 heads (kv 2), ffn 176, vocab 512 (lib/model/model_config.cpp)
h, L, H, KV, f, V = 64, 2, 4, 2, 176, 512
hd = h // H
mm = L * (h * H * hd + 2 * h * KV * hd + H * hd * h + 3 * h * f) + V * h
params = 2 * V * h + L * (2 * h + h * H * hd + 2 * h * KV * hd + H * hd * h + 3 * h * f) + h
tr = [r for r in lines("train") if r["kind"] == "train"]
assert [(r["tokens_per_step"], r["ckpt"], r["status"]) for r in tr] == \
    [(256, False, "ok"), (512, False, "oom"), (512, True, "ok")], tr
for r in (tr[0], tr[2]):
    positive(r, "step_ms", "tokens_per_s", "tflops", "mfu", "loss", "peak_rss_gib")
    assert r["params"] == params and r["preset"] == "tiny" and r["compile"] is False, r
    assert abs(r["mfu"] - r["tflops"] / 989.0) <= 1e-9, r
    # TFLOP/s x time = FLOPs of the timed steps: 6*mm per token + attention, between the
    # bounds of all tokens in one sequence and every sequence of length 1.
    flops = r["tflops"] * 1e12 * r["step_ms"] * 1e-3
    T = r["tokens_per_step"]
    lo, hi = 6 * mm * T + 12 * L * H * hd * T, 6 * mm * T + 12 * L * H * hd * T * (T + 1) / 2
    assert lo * 0.999 <= flops <= hi * 1.001, (flops, lo, hi)
    assert abs(r["tokens_per_s"] - T / (r["step_ms"] * 1e-3)) <= 1e-6 * r["tokens_per_s"], r
    assert 5.0 < r["loss"] < 7.5, r  # about ln(512) = 6.24 for random tokens

lg = lines("longest")
res = [r for r in lg if r["kind"] == "longest"]
assert len(res) == 1, res
r = res[0]
# Limit 4 x 100 tokens with checkpointing, granularity 64: 64, 128, 256 fit, 512 does not,
# then bisection to 384 (fits) and 448 (does not).
assert r["status"] == "ok" and r["longest"] == 384 and r["first_fail"] == 448, r
positive(r, "step_s", "tokens_per_s", "tflops", "mfu")
probes = [(p["len"], p["ok"]) for p in lg if p["kind"] == "longest_probe"]
assert probes[:4] == [(64, True), (128, True), (256, True), (512, False)], probes
print(f"ok: {len(ok)} attention rows ({sorted({r['impl'] for r in ok})}), "
      f"{len(tr)} train rows, longest {r['longest']}")
PYEOF

# The baseline's model is flexsp's model: its loss and every gradient equal those of the
# independent reference (tests/reference/llama_ref.py) on the tiny preset (GQA 2:1) and a
# packed batch, with and without checkpointing, through each attention this torch offers.
$PY - "$src" <<'PYEOF' || fail "the baseline model differs from tests/reference/llama_ref.py"
import sys, torch
sys.path[:0] = [f"{sys.argv[1]}/bench/gpu", f"{sys.argv[1]}/tests/reference"]
import torch_baseline as tb
import llama_ref as ref

class A:  # the arguments choose_model_attention reads
    seed, sdpa_backend = 0, "default"
c, dev = tb.Cfg("tiny"), torch.device("cpu")
seqlens = [5, 17, 1, 9]
kinds = ["manual"] + (["sdpa"] if tb.sdpa_available() else [])
for kind in kinds:
    for ckpt in (False, True):
        torch.manual_seed(3)
        name, attn = tb.choose_model_attention(A, c, dev, torch.float32, kind)
        m = tb.Llama(c, dev, attn, ckpt=ckpt)
        b = tb.Batch(c, seqlens, dev, torch.float32, torch.Generator().manual_seed(4))
        loss = m(b)
        loss.backward()
        qd, kvd, f = c.heads * c.hd, c.kv_heads * c.hd, c.ffn
        hf = {"model.embed_tokens.weight": (m.embed, None), "model.norm.weight": (m.norm, None),
              "lm_head.weight": (m.lm_head, None)}
        for i, blk in enumerate(m.blocks):
            p = f"model.layers.{i}."
            hf[p + "input_layernorm.weight"] = (blk.ln1, None)
            hf[p + "self_attn.q_proj.weight"] = (blk.wqkv, slice(0, qd))
            hf[p + "self_attn.k_proj.weight"] = (blk.wqkv, slice(qd, qd + kvd))
            hf[p + "self_attn.v_proj.weight"] = (blk.wqkv, slice(qd + kvd, qd + 2 * kvd))
            hf[p + "self_attn.o_proj.weight"] = (blk.wo, None)
            hf[p + "post_attention_layernorm.weight"] = (blk.ln2, None)
            hf[p + "mlp.gate_proj.weight"] = (blk.w13, slice(0, f))
            hf[p + "mlp.up_proj.weight"] = (blk.w13, slice(f, 2 * f))
            hf[p + "mlp.down_proj.weight"] = (blk.w2, None)
        cfg = {"hidden": c.hidden, "layers": c.layers, "heads": c.heads, "kv_heads": c.kv_heads,
               "ffn": c.ffn, "vocab": c.vocab, "tie_embeddings": 0,
               "rope_theta": c.rope_theta, "norm_eps": c.norm_eps}
        cut = lambda t, s: t if s is None else t[s]
        params = {n: cut(t, s).detach().clone().requires_grad_() for n, (t, s) in hf.items()}
        assert set(params) == set(ref.param_shapes(cfg)), "parameter names"
        r = ref.run(cfg, params, b.tokens, tb.cu_seqlens(seqlens, dev, torch.int64))
        loss = loss.detach()
        assert abs(float(loss) - r["loss"]) <= 1e-5 * abs(r["loss"]), (kind, float(loss), r["loss"])
        for n, (t, s) in hf.items():
            g, gr = cut(t.grad, s), r["grad"][n]
            err = float((g - gr).norm() / gr.norm().clamp_min(1e-30))
            assert err < 1e-4, (kind, ckpt, n, err)
        print(f"ok: model = reference ({name}, checkpointing {ckpt}, loss {float(loss):.6f})")
PYEOF

grep -q "best" "$work/attention.txt" || fail "attention: no table on stdout"
# flexsp's side of the ratios (bench_gpu --vs-torch, CUDA builds) reads every best and
# every case's lengths from these lines (without a GPU it stops there).
bench=${FLEXSP:+$(dirname "$FLEXSP")/tests/bench_gpu}
if [[ -n $bench && -x $bench ]]; then
  "$bench" --vs-torch "$work/attention.jsonl" >"$work/vs_torch.txt" 2>&1 || { cat "$work/vs_torch.txt"; fail "bench_gpu --vs-torch"; }
  grep -q "attention.jsonl: 32 PyTorch attention bests, 16 cases with sequence lengths" "$work/vs_torch.txt" ||
    { cat "$work/vs_torch.txt"; fail "bench_gpu --vs-torch did not read the lines"; }
  if "$bench" --vs-torch "$work/none.jsonl" >"$work/vs_none.txt" 2>&1; then
    fail "bench_gpu --vs-torch accepted a missing file"
  fi
  grep -q "cannot read .*none.jsonl" "$work/vs_none.txt" || { cat "$work/vs_none.txt"; fail "the error does not name the missing file"; }
  echo "ok: bench_gpu reads the attention lines, and names a missing file"
fi
grep -q "ms/step" "$work/train.txt" || fail "train: no table on stdout"
grep -q "longest 384 tokens" "$work/longest.txt" || fail "longest: no summary on stdout"

# Bad input: a missing lengths file is named, with a non-zero exit.
if $PY "$script" attention --device cpu --tiny --lengths "$work/none.txt" >"$work/bad.txt" 2>&1; then
  fail "a missing --lengths file was accepted"
fi
grep -q "none.txt" "$work/bad.txt" || fail "the error does not name the missing file"
echo "ok: torch_baseline"
