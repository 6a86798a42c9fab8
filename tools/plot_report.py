#!/usr/bin/python3
"""Plot of `flexsp report --out DIR`: tokens/s against ranks, one line per sp_mode (and
ZeRO stage when runs differ in it), with ideal linear scaling from each line's smallest
run dashed. Reads the CSV that flexsp report writes; writes a PNG with matplotlib's Agg
backend (no display needed).

  /usr/bin/python3 tools/plot_report.py scaling.csv scaling.png

Exit codes: 0 written, 2 bad arguments or CSV, 3 matplotlib is not installed (flexsp
report then says the plot was skipped; Debian: python3-matplotlib).
"""
import csv
import sys


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return 3
    with open(argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{argv[1]}: no runs", file=sys.stderr)
        return 2
    zeros = {r["zero"] for r in rows}
    series = {}
    for r in rows:
        key = r["sp_mode"] + (f" (ZeRO {r['zero']})" if len(zeros) > 1 else "")
        series.setdefault(key, []).append((int(r["ranks"]), float(r["tokens_per_s"])))
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=100)
    for key, pts in sorted(series.items()):
        pts.sort()
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        line, = ax.plot(xs, ys, marker="o", label=key)
        if len(xs) > 1:
            ax.plot(xs, [ys[0] * x / xs[0] for x in xs], linestyle="--", color=line.get_color(),
                    alpha=0.4, label=f"{key}: linear")
    ranks = sorted({int(r["ranks"]) for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ranks)
    ax.set_xticklabels([str(x) for x in ranks])
    ax.set_xlabel("ranks")
    ax.set_ylabel("tokens/s")
    ax.set_title("flexsp scaling: " + ", ".join(sorted({r["model"] for r in rows})))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(argv[2], format="png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
