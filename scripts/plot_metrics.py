#!/usr/bin/python3
"""Plot megatrain metrics files (JSON Lines) as a 2x2 figure of training curves.

Usage:
  scripts/plot_metrics.py RUN.jsonl [RUN2.jsonl ...] -o curves.png

Each input line is one JSON object. Training lines carry
  step, loss, lr, grad_norm, tokens_per_s, step_time_ms, mfu (mfu may be null);
validation results carry step and val_loss, either on their own line or as an extra key on a
training line. Unknown keys, null values and blank lines are ignored. A line that is not a JSON
object with a numeric `step` is an error (file and line number reported, exit status 2).

Panels: loss (val_loss dashed, same colour) / learning rate / tokens per second / grad norm
(log scale), all against step. Several files are overlaid; the legend names each by file stem.
Runs with Debian's matplotlib (package python3-matplotlib, installed by scripts/setup.sh).
"""

import argparse
import json
import math
import sys
from pathlib import Path

PROG = "plot_metrics.py"

# Series read from each file.
SERIES = ("loss", "val_loss", "lr", "tokens_per_s", "grad_norm")


class MetricsError(Exception):
    pass


def _number(value):
    """True for JSON numbers (bool is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_metrics(path):
    """Returns {series key: [(step, value), ...]} sorted by step; a repeated step keeps the last value
    (a resumed run rewrites the steps after its checkpoint)."""
    series = {k: {} for k in SERIES}
    try:
        f = open(path, "rb")
    except OSError as e:
        raise MetricsError(f"{path}: cannot open: {e.strerror}") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise MetricsError(f"{path}:{lineno}: malformed metrics line: not UTF-8") from None
            if not text:
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise MetricsError(f"{path}:{lineno}: malformed metrics line: {e.msg} (column {e.colno})") from None
            if not isinstance(obj, dict):
                raise MetricsError(f"{path}:{lineno}: malformed metrics line: expected a JSON object")
            step = obj.get("step")
            if not _number(step) or not math.isfinite(step):
                raise MetricsError(f"{path}:{lineno}: malformed metrics line: missing or non-numeric 'step'")
            for key in SERIES:
                if key not in obj or obj[key] is None:
                    continue
                value = obj[key]
                if not _number(value):
                    raise MetricsError(f"{path}:{lineno}: malformed metrics line: '{key}' is not a number")
                series[key][step] = float(value)
    return {k: sorted(v.items()) for k, v in series.items()}


def run_labels(paths):
    """File stems, made unique with the parent folder name where two runs share a stem."""
    stems = [Path(p).stem for p in paths]
    labels = []
    for p, stem in zip(paths, stems):
        if stems.count(stem) > 1:
            parent = Path(p).resolve().parent.name
            stem = f"{parent}/{stem}" if parent else str(p)
        labels.append(stem)
    # Still equal (same file given twice): number them.
    seen = {}
    for i, label in enumerate(labels):
        if labels.count(label) > 1:
            seen[label] = seen.get(label, 0) + 1
            labels[i] = f"{label} ({seen[label]})"
    return labels


def plot(runs, out_path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{PROG} needs matplotlib: run scripts/setup.sh (Debian package python3-matplotlib)", file=sys.stderr)
        sys.exit(2)

    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    panels = [
        (axes[0][0], "loss", "loss", "linear"),
        (axes[0][1], "lr", "learning rate", "linear"),
        (axes[1][0], "tokens_per_s", "tokens/s", "linear"),
        (axes[1][1], "grad_norm", "grad norm", "log"),
    ]
    for ax, key, title, scale in panels:
        drawn = False
        for i, (label, data) in enumerate(runs):
            color = colors[i % len(colors)]
            points = data[key]
            if scale == "log":
                points = [(s, v) for s, v in points if v > 0]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, color=color, linewidth=1.2, label=label)
                drawn = True
            if key == "loss" and data["val_loss"]:
                xs, ys = zip(*data["val_loss"])
                ax.plot(xs, ys, color=color, linestyle="--", linewidth=1.4, marker="." if len(xs) < 30 else None,
                        label=f"{label} (val)")
                drawn = True
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(title)
        ax.grid(True, alpha=0.3)
        if drawn:
            if scale == "log":
                ax.set_yscale("log")
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    fig.tight_layout()
    try:
        fig.savefig(out_path, dpi=100)
    except OSError as e:
        print(f"{PROG}: cannot write {out_path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description="Plot megatrain metrics JSONL files as training curves.")
    ap.add_argument("runs", nargs="+", metavar="RUN.jsonl", help="metrics file(s), one JSON object per line")
    ap.add_argument("-o", "--output", default="curves.png", help="output PNG (default: curves.png)")
    args = ap.parse_args(argv)

    try:
        data = [load_metrics(p) for p in args.runs]
    except MetricsError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    plot(list(zip(run_labels(args.runs), data)), args.output)
    print(f"{PROG}: wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
