#!/usr/bin/python3
"""Scaling plot of `flexsp report --out DIR` and `flexsp simulate --plot`, from the CSV they
write (columns ranks, sp_mode, zero, model, tokens_per_s; report's also backend). A rank is
a GPU, so GPUs are on x; both axes of the throughput panel are logarithmic, so that every
node count reads as clearly as the largest and ideal (linear) scaling is a straight line.

  left:  tokens/s against GPUs, one line per series (sp_mode, and the ZeRO stage when the
         runs differ in it), each with its ideal line from its smallest run, dashed, and
         (report's CSV: predicted_step_ms) the predicted tokens/s, dotted, hollow markers;
  right: scaling efficiency per series (tokens/s per GPU over the smallest run's), and on
         a second axis flexsp's speedup over static SP at each GPU count where both ran
         (a series "flexsp ..." against "static ..." of the same stage and suffix).

  /usr/bin/python3 tools/plot_report.py [--describe FILE] scaling.csv scaling.png

--describe FILE also writes what was drawn as JSON (axes, scales, labels, series): what
the tests check. Exit codes: 0 written, 2 bad arguments or CSV, 3 matplotlib is not
installed (flexsp then says the plot was skipped; Debian: python3-matplotlib).
"""
import csv
import json
import sys


def read_series(rows, column=None):
    """{name: [(gpus, tokens/s)]} sorted by GPUs; the name is sp_mode (+ ZeRO if mixed).
    column "predicted_step_ms": the predicted tokens/s instead (the runs that have one)."""
    zeros = {r["zero"] for r in rows}
    series = {}
    for r in rows:
        key = r["sp_mode"] + (f" (ZeRO {r['zero']})" if len(zeros) > 1 else "")
        tps = float(r["tokens_per_s"])
        if column:
            if not r.get(column):
                continue
            tps *= float(r["mean_step_ms"]) / float(r[column])  # the same tokens per step
        series.setdefault(key, []).append((int(r["ranks"]), tps))
    for pts in series.values():
        pts.sort()
    return series


def speedups(series):
    """{flexsp name: [(gpus, flexsp tokens/s / static tokens/s)]} where a static twin ran."""
    out = {}
    for name, pts in series.items():
        if not name.startswith("flexsp"):
            continue
        twin = dict(series.get("static" + name[len("flexsp"):], []))
        common = [(x, y / twin[x]) for x, y in pts if x in twin and twin[x] > 0]
        if common:
            out[name] = common
    return out


def draw(rows, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = read_series(rows)
    predicted = read_series(rows, "predicted_step_ms") if "predicted_step_ms" in rows[0] else {}
    gpus = sorted({int(r["ranks"]) for r in rows})
    cpu = any(r.get("backend") == "cpu" for r in rows)
    xlabel = "GPUs (CPU ranks here)" if cpu else "GPUs"
    fig, (ax, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.4), dpi=100)
    desc = {"panels": []}

    lines = []
    for name, pts in sorted(series.items()):
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        line, = ax.plot(xs, ys, marker="o", label=name)
        lines.append({"label": name, "x": xs, "y": ys})
        if len(xs) > 1:
            ideal = [ys[0] * x / xs[0] for x in xs]
            ax.plot(xs, ideal, linestyle="--", color=line.get_color(), alpha=0.45,
                    label=f"{name}: ideal")
            lines.append({"label": f"{name}: ideal", "x": xs, "y": ideal})
        pred = predicted.get(name)
        if pred:
            px, py = [p[0] for p in pred], [p[1] for p in pred]
            ax.plot(px, py, marker="o", markerfacecolor="none", linestyle=":", color=line.get_color(),
                    label=f"{name}: predicted")
            lines.append({"label": f"{name}: predicted", "x": px, "y": py})
    for a in (ax, ax_eff):
        a.set_xscale("log", base=2)
        a.set_xticks(gpus)
        a.set_xticklabels([str(x) for x in gpus])
        a.minorticks_off()
        a.set_xlabel(xlabel)
        a.grid(True, which="both", alpha=0.3)
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s")
    ax.set_title("throughput: " + ", ".join(sorted({r["model"].split(":")[0] for r in rows})))
    ax.legend(fontsize="small")
    desc["panels"].append({"title": ax.get_title(), "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                           "xlabel": xlabel, "ylabel": "tokens/s", "lines": lines})

    lines = []
    for name, pts in sorted(series.items()):
        xs = [p[0] for p in pts]
        eff = [(y / x) / (pts[0][1] / pts[0][0]) for x, y in pts]
        ax_eff.plot(xs, eff, marker="o", label=f"{name}: efficiency")
        lines.append({"label": f"{name}: efficiency", "x": xs, "y": eff})
    ax_eff.axhline(1.0, color="grey", linewidth=0.8)
    ax_eff.set_ylim(0, max(1.1, max((max(l["y"]) for l in lines), default=1) * 1.05))
    ax_eff.set_ylabel("scaling efficiency (per GPU, vs the smallest run)")
    ax_eff.set_title("efficiency and flexsp over static SP")
    handles, labels = ax_eff.get_legend_handles_labels()
    sp = speedups(series)
    if sp:
        ax_sp = ax_eff.twinx()
        for name, pts in sorted(sp.items()):
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            ax_sp.plot(xs, ys, marker="s", color="black", linestyle=":",
                       label=f"{name} / static: speedup")
            lines.append({"label": f"{name} / static: speedup", "x": xs, "y": ys, "axis": "right"})
        top = max(max(p[1] for p in pts) for pts in sp.values())
        ax_sp.set_ylim(0, max(2.0, top * 1.1))
        ax_sp.set_ylabel("flexsp speedup over static SP")
        h2, l2 = ax_sp.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax_eff.legend(handles, labels, fontsize="small", loc="lower left")
    desc["panels"].append({"title": ax_eff.get_title(), "xscale": ax_eff.get_xscale(),
                           "yscale": ax_eff.get_yscale(), "xlabel": xlabel, "lines": lines})
    fig.tight_layout()
    fig.savefig(png, format="png")
    return desc


def main(argv):
    args = argv[1:]
    describe = None
    if len(args) == 4 and args[0] == "--describe":
        describe, args = args[1], args[2:]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return 3
    with open(args[0], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{args[0]}: no runs", file=sys.stderr)
        return 2
    desc = draw(rows, args[1])
    if describe:
        with open(describe, "w") as f:
            json.dump(desc, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
