#!/usr/bin/python3
"""PyTorch baselines for flexsp's GPU benchmarks (issue 9), measured in the same run on the
same GPU as flexsp's own figures, so that the ratios mean something.

Modes (each prints JSON lines, then a readable table; see bench/gpu/README.md):
  attention  varlen causal attention in bf16 over packed batches (1 x 64K, 4 x 16K, 64 x 1K,
             a Wikipedia-like mix of 64K tokens), head dim 128 and 64, GQA 4:1 and 1:1,
             forward and forward+backward. Implementations: SDPA per sequence with the cuDNN
             and the flash backend, PyTorch's varlen API (torch.nn.attention.varlen or the
             aten flash op), cuDNN's ragged (varlen) op, SDPA on nested jagged tensors.
             Each is checked against an fp32 reference on a small packed batch before it is
             timed; the best per case is reported.
  train      one training step (forward, backward, grad clip, fused AdamW) of a PyTorch LLaMA
             of a flexsp preset (1.3b, 350m) on packed Wikipedia-like batches of 8K/16K/32K
             tokens: bf16 autocast, varlen or per-sequence SDPA, activation checkpointing when
             the step does not fit without, torch.compile of the dense parts as a second row.
  longest    the longest single sequence the preset trains with activation checkpointing
             (doubling, then bisecting on out-of-memory, bounded by --budget-s), and its MFU.

FLOPs, the same formulas as flexsp (lib/model/model_config.{h,cpp}):
  attention forward, sequence of s tokens, H query heads of dim d:
      F_fwd(s) = 4 * H * d * s(s+1)/2      (QK^T and PV, 2 FLOPs per multiply-add, over the
                                           s(s+1)/2 causal pairs, diagonal included)
  attention forward+backward = 3 * F_fwd   (backward = 2 x forward; FlashAttention's recompute
                                           of QK^T is not credited: model FLOPs, like
                                           model_attention_flops; papers that count 3.5 x
                                           report 7/6 of these TFLOP/s)
  training step (model_train_flops) = sum over sequences of
      6 * N_mm * s + layers * 3 * F_fwd(s)
      N_mm = layers * (h*qd + 2*h*kvd + qd*h + 3*h*ffn) + vocab*h   (matrix-product parameters,
      lm_head included), qd = heads*d, kvd = kv_heads*d; activation recompute is not counted.
  MFU = TFLOP/s / --peak-tflops (989: H100 SXM dense bf16).

Packed batches: documents are drawn with replacement from --lengths with random.Random(seed),
each cut into pieces of at most the batch size (docs/batches.md's cut), appended until the batch
holds exactly the requested tokens (the last piece truncated). Every JSON line of a case holds
its `seqlens`, so flexsp's benchmark can run the very same batches.

Usage:
  python3 bench/gpu/torch_baseline.py attention [--budget-s 100] [--jsonl F]
  python3 bench/gpu/torch_baseline.py train     [--presets 1.3b,350m] [--tokens 8192,16384,32768]
  python3 bench/gpu/torch_baseline.py longest   [--preset 1.3b]
  ... --device cpu --tiny        a smoke test with tiny shapes (fp32 on CPU), seconds
"""
# This file is the command line alone (arguments, dispatch; the docstring above is its --help).
# The work is in the modules beside it: torch_common (budget, output, timing, lengths, FLOPs),
# torch_attention (attention implementations, the attention mode), torch_model (the LLaMA,
# optimizer, training step), torch_train (the train and longest modes).
import argparse
import os
import sys

# The modules beside this script, wherever it is run from (python3 -P or -I leave the
# script's folder off sys.path).
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# torch_common first: it starts the budget's clock and sets the allocator before torch loads.
from torch_common import PRESETS, Budget, Cfg, Output, default_lengths_path, progress  # noqa: E402
import torch  # noqa: E402

import torch_model  # noqa: E402
from torch_attention import cu_seqlens, mode_attention, sdpa_available  # noqa: E402
from torch_model import Batch, Llama, choose_model_attention  # noqa: E402
from torch_train import mode_longest, mode_train  # noqa: E402

# main, and what tests/e2e/test_torch_baseline.sh reaches through this module to check the
# model against tests/reference/llama_ref.py.
__all__ = ["main", "Batch", "Cfg", "Llama", "choose_model_attention", "cu_seqlens",
           "sdpa_available"]


def parse_args(argv):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    common.add_argument("--tiny", action="store_true", help="tiny shapes (smoke test)")
    common.add_argument("--budget-s", type=float, default=None,
                        help="wall-clock budget of this process (default: 120 attention, "
                             "180 train, 90 longest)")
    common.add_argument("--jsonl", help="append JSON lines here (default: stdout)")
    common.add_argument("--lengths", help="document lengths, one per line (default: "
                        "$FLEXSP_LENGTHS, ../shared/data/wikipedia_lengths.txt, "
                        ".deps/wikipedia_lengths.txt, else built-in percentiles)")
    common.add_argument("--seed", type=int, default=1234)
    common.add_argument("--peak-tflops", type=float, default=989.0,
                        help="MFU denominator (H100 SXM dense bf16)")
    common.add_argument("--attn", default="auto", choices=["auto", "varlen", "sdpa", "manual"],
                        help="attention inside the model (train, longest)")
    common.add_argument("--sdpa-backend", default="default",
                        help="with --attn sdpa: default, FLASH_ATTENTION, CUDNN_ATTENTION, ...")
    # Tests: a step of more tokens than this (4 x with checkpointing) fails as out of memory,
    # so that the checkpointing fallback and the longest-sequence search run on a CPU.
    common.add_argument("--simulate-oom-above", type=int, default=0, help=argparse.SUPPRESS)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("attention", parents=[common])
    a.add_argument("--configs", help="HD:HEADS:KV,... (default 128:32:8,128:32:32,64:32:32,64:32:8)")
    a.add_argument("--cases", help="subset of case names, comma-separated")
    a.add_argument("--impls", help="subset of sdpa-cudnn,sdpa-flash,varlen,varlen-cudnn,"
                   "njt-cudnn,sdpa,manual")
    a.add_argument("--target-s", type=float, default=None,
                   help="timed seconds per measurement (default 0.3; 0.01 with --tiny)")
    t = sub.add_parser("train", parents=[common])
    t.add_argument("--presets", help="comma-separated (default 1.3b,350m)")
    t.add_argument("--tokens", help="tokens per step, comma-separated (default 8192,16384,32768)")
    t.add_argument("--compile", default="auto", choices=["auto", "on", "off"],
                   help="also rows with torch.compile (auto: on GPU)")
    t.add_argument("--ckpt", default="auto", choices=["auto", "on", "off"],
                   help="activation checkpointing (auto: only when the step does not fit)")
    t.add_argument("--warmup", type=int, default=None)
    t.add_argument("--steps", type=int, default=None)
    g = sub.add_parser("longest", parents=[common])
    g.add_argument("--preset", default=None, help="default 1.3b")
    g.add_argument("--start-len", type=int, default=None)
    g.add_argument("--max-len", type=int, default=None)
    g.add_argument("--granularity", type=int, default=None)
    args = ap.parse_args(argv)
    if args.budget_s is None:
        args.budget_s = {"attention": 120.0, "train": 180.0, "longest": 90.0}[args.mode]
    if args.mode == "attention" and args.target_s is None:
        args.target_s = 0.01 if args.tiny else 0.3
    if args.mode == "train":
        args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 2)
        args.steps = args.steps if args.steps is not None else (2 if args.tiny else 4)
        if args.steps < 1:
            ap.error("--steps must be at least 1")
    if args.lengths is None:
        args.lengths = default_lengths_path()
    elif not os.path.isfile(args.lengths):
        ap.error(f"--lengths: no such file: {args.lengths}")
    for name in (getattr(args, "presets", None) or "").split(",") + [getattr(args, "preset", None)]:
        if name and name not in PRESETS:
            ap.error(f"unknown preset '{name}' (expected one of {', '.join(PRESETS)})")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch_baseline: no CUDA device (use --device cpu --tiny for a smoke test)",
              file=sys.stderr)
        return 2
    torch_model.SIMULATE_OOM_ABOVE = args.simulate_oom_above
    dev = torch.device(args.device)
    torch.manual_seed(args.seed)
    out = Output(args.jsonl)
    budget = Budget(args.budget_s)
    {"attention": mode_attention, "train": mode_train, "longest": mode_longest}[args.mode](
        args, dev, out, budget)
    progress(f"{args.mode} done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
