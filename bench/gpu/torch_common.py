"""What every mode of torch_baseline.py shares: the process's wall-clock budget, JSON-line
output, timing (clock, median of repeats), errors and memory, document lengths and packed
batches, flexsp's presets and FLOP formulas. Kept free of attention and model code so that
those modules (torch_attention, torch_model, torch_train) can all stand on it.

Importing it starts the budget's clock and sets the CUDA allocator's options, both before torch
is imported: torch_baseline.py imports it first.
"""
import gc
import json
import math
import os
import statistics
import sys
import time

T_START = time.monotonic()
# Expandable segments keep the out-of-memory searches (train's checkpointing fallback, longest)
# from failing on fragmentation; it must be set before CUDA starts.
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402

# hidden, layers, heads, kv_heads, ffn, vocab: lib/model/model_config.cpp's presets. tiny and
# small have no vocabulary there (the dataset's); 512 here.
PRESETS = {
    "tiny": (64, 2, 4, 2, 176, 512),
    "small": (256, 4, 8, 4, 768, 512),
    "125m": (768, 12, 12, 12, 2048, 32000),
    "350m": (1024, 24, 16, 16, 2816, 32000),
    "1.3b": (2048, 24, 32, 32, 5632, 32000),
    "7b": (4096, 32, 32, 32, 11008, 32000),
}

# Percentiles of ../shared/data/wikipedia_lengths.txt (1,000,000 documents; tokens per
# document: mean 1014, median 347, max 1,823,777). Used only when no lengths file is found
# (the GPU machine receives the repository alone): lengths are then drawn by inverse CDF,
# interpolating log(length) between these points. The JSON says which source was used.
WIKI_P = [i / 50 for i in range(50)] + [0.99, 0.995, 0.998, 0.999, 0.9995, 0.9998, 0.9999, 1.0]
WIKI_Q = [1, 48, 62, 72, 80, 87, 93, 99, 106, 113, 122, 131, 141, 151, 160, 171, 183, 198, 213,
          228, 243, 260, 279, 300, 322, 347, 372, 398, 423, 446, 472, 502, 535, 577, 628, 685,
          749, 821, 904, 984, 1092, 1218, 1373, 1562, 1796, 2112, 2565, 3235, 4392, 7087,
          10919, 15986, 26511, 37353, 51510, 75413, 101537, 1823777]


# ---- small utilities -----------------------------------------------------------------------
class Budget:
    """Wall-clock budget of the whole process (torch import included)."""

    def __init__(self, seconds):
        self.end = T_START + seconds

    def left(self):
        return self.end - time.monotonic()


class Output:
    """JSON lines to --jsonl (flushed per line, so a run cut by `timeout` keeps what it has
    measured) or to stdout; the readable table goes to stdout at the end."""

    def __init__(self, path):
        self.f = open(path, "a") if path else None
        self.records = []

    def emit(self, rec):
        rec = _finite(rec)
        self.records.append(rec)
        line = json.dumps(rec, allow_nan=False, default=str)
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()
        else:
            print(line, flush=True)


def _finite(x):
    """JSON has no NaN/inf: such a number (a diverged check, say) is written as a string."""
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def progress(msg):
    print(f"[{time.monotonic() - T_START:6.1f}s] {msg}", file=sys.stderr, flush=True)


def short_error(e):
    s = f"{type(e).__name__}: {e}".strip().splitlines()
    return (s[0] if s else type(e).__name__)[:300]


def is_oom(e):
    """The caching allocator's error, or a library's failed workspace allocation."""
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    msg = str(e).lower()
    return (oom is not None and isinstance(e, oom)) or "out of memory" in msg or \
        "alloc_failed" in msg


def free_memory(dev):
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


class Clock:
    """Seconds of one call: CUDA events on the GPU (host gaps between launches included, as a
    training loop pays them), perf_counter on the CPU."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn):
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            return a.elapsed_time(b) / 1e3
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t


def measure(clock, fn, budget, target_s, min_reps=3, max_reps=20):
    """Median seconds of fn after one untimed warm-up call (cuDNN plan builds, allocator
    growth), with as many repeats as fill about target_s, fewer when the budget is short."""
    fn()
    clock.sync()
    first = clock.time(fn)
    reps = max(min_reps, min(max_reps, int(target_s / max(first, 1e-6))))
    afford = int(max(0.0, budget.left() - 2.0) / max(first, 1e-6))
    reps = max(1, min(reps, afford + 1))
    ts = [first] + [clock.time(fn) for _ in range(reps - 1)]
    return statistics.median(ts), len(ts)


def rel_err(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# ---- lengths and packed batches ----------------------------------------------------------------
def default_lengths_path():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for p in (os.environ.get("FLEXSP_LENGTHS"),
              os.path.join(repo, "..", "shared", "data", "wikipedia_lengths.txt"),
              os.path.join(repo, "shared", "data", "wikipedia_lengths.txt"),
              os.path.join(repo, ".deps", "wikipedia_lengths.txt")):
        if p and os.path.isfile(p):
            return os.path.normpath(p)
    return None


class Lengths:
    def __init__(self, path):
        self.values, self.source = None, "built-in percentiles of wikipedia_lengths.txt"
        if path:
            with open(path) as f:
                self.values = [int(x) for x in f.read().split()]
            if not self.values or min(self.values) < 1:
                raise ValueError(f"{path}: expected positive integers, one per line")
            self.source = path

    def draw(self, rng):
        if self.values:
            return self.values[rng.randrange(len(self.values))]
        u = rng.random()
        i = min(max(0, next(j for j in range(1, len(WIKI_P)) if WIKI_P[j] >= u) - 1),
                len(WIKI_P) - 2)
        t = (u - WIKI_P[i]) / (WIKI_P[i + 1] - WIKI_P[i])
        lo, hi = math.log(WIKI_Q[i]), math.log(WIKI_Q[i + 1])
        return max(1, int(round(math.exp(lo + t * (hi - lo)))))


def draw_batch(lengths, rng, tokens, max_len):
    """Sequence lengths summing to exactly `tokens` (see torch_baseline.py's docstring)."""
    out, left = [], tokens
    while left > 0:
        n = lengths.draw(rng)
        while n > 0 and left > 0:
            piece = min(n, max_len, left)
            out.append(piece)
            n -= piece
            left -= piece
    return out


# ---- FLOPs (lib/model/model_config.{h,cpp}) -----------------------------------------------------
def attn_fwd_flops(seqlens, heads, hd):
    return sum(4.0 * heads * hd * s * (s + 1) / 2.0 for s in seqlens)


class Cfg:
    def __init__(self, name):
        self.name = name
        self.hidden, self.layers, self.heads, self.kv_heads, self.ffn, self.vocab = PRESETS[name]
        self.hd = self.hidden // self.heads
        self.rope_theta, self.norm_eps, self.init_std = 10000.0, 1e-5, 0.02

    def num_params(self):  # model_num_params, untied
        h, qd, kvd = self.hidden, self.heads * self.hd, self.kv_heads * self.hd
        layer = 2 * h + h * qd + 2 * h * kvd + qd * h + 3 * h * self.ffn
        return 2 * self.vocab * h + self.layers * layer + h

    def dense_flops_per_token(self):  # model_dense_flops_per_token
        h, qd, kvd = self.hidden, self.heads * self.hd, self.kv_heads * self.hd
        mm = self.layers * (h * qd + 2 * h * kvd + qd * h + 3 * h * self.ffn) + self.vocab * h
        return 6.0 * mm

    def train_flops(self, seqlens):  # model_train_flops
        return (self.dense_flops_per_token() * sum(seqlens)
                + 3.0 * self.layers * attn_fwd_flops(seqlens, self.heads, self.hd))

