#!/usr/bin/env python3
"""One JSON line per measured GPU configuration, for bench/results/gpu-speed.jsonl.

flexsp's figures come from the run's summary.json (totals over totals: io/report/report.h,
Throughput), PyTorch's from the baseline's JSON lines (bench/gpu/torch_train.py: the `train`
record of the same preset and activation checkpointing, when there is one), so that the two
sit on one line measured by the same formula. The line names the commit and the device:

  commit, device, model, tokens_per_step, tokens_per_s, mfu (0-1), torch_tokens_per_s,
  torch_mfu, peak_gb, date   (plus checkpoint_activations and steps)

usage: speed_line.py SUMMARY_JSON --device NAME --preset P [--ckpt true|false]
                     [--torch JSONL] [--commit SHA] [--out FILE]
Without --out the line goes to stdout; with it, it is appended. Exits 2 naming the file on
a summary that is not flexsp's or holds no timed step.
"""
import argparse
import datetime
import json
import subprocess
import sys


def fail(msg):
    print(f"speed_line: {msg}", file=sys.stderr)
    sys.exit(2)


def read_summary(path):
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if s.get("schema") != "flexsp.report.summary":
        fail(f"{path}: not a flexsp report summary (schema {s.get('schema')!r})")
    if not s.get("timed_steps"):
        fail(f"{path}: no timed step (a run of one step, or a report of an older flexsp)")
    return s


def torch_record(path, preset, ckpt):
    """The fastest ok `train` record of the preset with the same checkpointing, or None."""
    best = None
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail(f"{path}: {e}")
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if (r.get("kind") == "train" and r.get("status") == "ok" and r.get("preset") == preset
                and bool(r.get("ckpt")) == ckpt):
            if best is None or r["tokens_per_s"] > best["tokens_per_s"]:
                best = r
    return best


def commit_of_checkout():
    try:
        return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("summary")
    ap.add_argument("--device", required=True)
    ap.add_argument("--preset", required=True)
    ap.add_argument("--ckpt", choices=["true", "false"], default="false")
    ap.add_argument("--torch")
    ap.add_argument("--commit")
    ap.add_argument("--out")
    a = ap.parse_args()
    s = read_summary(a.summary)
    ckpt = a.ckpt == "true"
    t = torch_record(a.torch, a.preset, ckpt) if a.torch else None
    line = {
        "commit": a.commit or commit_of_checkout(),
        "device": a.device,
        "model": a.preset,
        "checkpoint_activations": ckpt,
        "steps": s["timed_steps"],
        "tokens_per_step": s["tokens"] / s["steps"],
        "tokens_per_s": s["tokens_per_s"],
        "mfu": s["mfu"],
        "torch_tokens_per_s": t["tokens_per_s"] if t else None,
        "torch_mfu": t["mfu"] if t else None,
        "peak_gb": s["peak_mem_gb"],
        "date": datetime.date.today().isoformat(),
    }
    text = json.dumps(line)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
