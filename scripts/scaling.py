#!/usr/bin/python3
"""Strong and weak scaling sweeps of megatrain over parallel layouts.

Usage:
  scripts/scaling.py strong --config configs/demo.toml --layout dp=1 --layout dp=2 --layout tp=2 \
      --global-batch 32 --out runs/scaling_strong [--launcher mpirun|srun] [--reps 3] [--steps 8]
      [--warmup 3] [--set KEY=VALUE ...] [--bin build/megatrain]
  scripts/scaling.py weak ...            (the same; the global batch grows with the rank count)
  scripts/scaling.py strong --from-dir runs/scaling_strong ...   (no runs: table and plots of
                                                                  the metrics already there)

A layout is comma-separated KEY=N of tp, pp, dp, cp, ep (ep lies inside dp, as in the trainer) and
zero (the ZeRO stage); unnamed sizes are 1, ZeRO stays the config's. Ranks = tp·pp·dp·cp.
Strong scaling keeps --global-batch for every layout; weak scaling gives a layout of R ranks
--global-batch · R / R0 (R0: the first layout's ranks), so each rank's work stays the same.

Each run is `mpirun --oversubscribe -np R -x OMP_NUM_THREADS=1` (or `srun -n R`) of `megatrain
train` with the layout, the global batch, --steps steps, no evaluation, no checkpoint and a metrics
line every step, written to OUT/LAYOUT_rREP.jsonl (and .log). A layout's figures are the median over
its repetitions of each run's mean over the steps after --warmup.

Table columns: tokens/s; ideal = the first layout's tokens/s per rank × ranks; efficiency =
tokens/s ÷ ideal; step time; exposed communication per group (ms a step the ranks waited on the
data-, tensor- and expert-parallel groups); the pipeline bubble (mean stage idle time ÷ step
time); memory (rank 0's accounted buffers and its peak RSS). The table is printed (Markdown) and
written to OUT/scaling.md; OUT/scaling.png plots tokens/s against ranks with the ideal line, and
the efficiency. On a machine whose ranks share a few cores (a laptop, CI) the figures say how the
software scales with contention, not how a cluster would: say so wherever you quote them.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

PROG = "scaling.py"
SIZES = ("tp", "pp", "dp", "cp", "ep")


class ScalingError(Exception):
    pass


def parse_layout(text):
    """'tp=2,dp=2' -> {'tp': 2, 'pp': 1, 'dp': 2, 'cp': 1, 'ep': 1} (+ 'zero' when given)."""
    layout = {k: 1 for k in SIZES}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in SIZES + ("zero",) or not value.isdigit():
            raise ScalingError(f"--layout {text!r}: expected comma-separated KEY=N with KEY one of "
                               f"{', '.join(SIZES)}, zero (e.g. tp=2,dp=2)")
        layout[key] = int(value)
        if key != "zero" and layout[key] < 1:
            raise ScalingError(f"--layout {text!r}: {key} must be at least 1")
    if layout["dp"] % layout["ep"]:
        raise ScalingError(f"--layout {text!r}: ep={layout['ep']} must divide dp={layout['dp']} (ep lies inside dp)")
    return layout


def layout_name(layout):
    name = "_".join(f"{k}{layout[k]}" for k in SIZES if layout[k] > 1) or "serial"
    return name + (f"_zero{layout['zero']}" if "zero" in layout else "")


def ranks(layout):
    return layout["tp"] * layout["pp"] * layout["dp"] * layout["cp"]


def global_batches(mode, layouts, base):
    """The global batch of each layout: `base` (strong) or base · R / R0 (weak)."""
    if mode == "strong":
        return [base] * len(layouts)
    r0 = ranks(layouts[0])
    out = []
    for layout in layouts:
        if (base * ranks(layout)) % r0:
            raise ScalingError(f"weak scaling: --global-batch {base} × {ranks(layout)} ranks of {layout_name(layout)} "
                               f"is not a multiple of the first layout's {r0} ranks; choose a --global-batch that is")
        out.append(base * ranks(layout) // r0)
    return out


def launch_command(args, layout, batch, metrics, extra):
    n = ranks(layout)
    if args.launcher == "srun":
        launcher = ["srun", "-n", str(n), "--mpi=pmix"]
    else:
        launcher = ["mpirun", "--oversubscribe", "-np", str(n), "-x", "OMP_NUM_THREADS=1"]
    sets = [f"parallel.{k}={layout[k]}" for k in SIZES]
    if "zero" in layout:
        sets.append(f"parallel.zero_stage={layout['zero']}")
    sets += [f"train.global_batch_size={batch}", f"train.steps={args.steps}", "train.eval_interval=0",
             "checkpoint.save_interval=0", 'checkpoint.load=""', "log.interval=1",
             f'log.metrics_file="{metrics}"'] + extra
    cmd = launcher + [args.bin, "train", "--config", args.config]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def run_all(args, layouts, batches):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    # Repetitions interleaved (rep 1 of every layout, then rep 2, ...): slow periods hit all alike.
    for rep in range(1, args.reps + 1):
        for layout, batch in zip(layouts, batches):
            stem = out / f"{layout_name(layout)}_r{rep}"
            metrics = stem.with_suffix(".jsonl")
            metrics.unlink(missing_ok=True)
            cmd = launch_command(args, layout, batch, metrics, args.set)
            print(f"== {layout_name(layout)} rep {rep}: {ranks(layout)} rank(s), global batch {batch}", flush=True)
            with open(stem.with_suffix(".log"), "w") as log:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
            if rc != 0:
                raise ScalingError(f"{layout_name(layout)} rep {rep} failed (exit {rc}); see {stem}.log; "
                                   f"command: {' '.join(cmd)}")


def run_figures(path, warmup):
    """The mean over the steps after `warmup` of one metrics file's figures."""
    steps = []
    with open(path) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                m = json.loads(line)
            except json.JSONDecodeError as e:
                raise ScalingError(f"{path}:{lineno}: malformed metrics line: {e.msg}") from None
            if isinstance(m, dict) and "step_time_ms" in m and m.get("step", 0) > warmup:
                steps.append(m)
    if not steps:
        raise ScalingError(f"{path}: no step after the {warmup} warm-up steps; run more --steps or lower --warmup")

    def mean(f):
        return sum(f(m) for m in steps) / len(steps)

    last_memory = steps[-1].get("memory_bytes", {})
    return {
        "tokens_per_s": mean(lambda m: m["tokens_per_s"]),
        "step_ms": mean(lambda m: m["step_time_ms"]),
        "dp_exposed_ms": mean(lambda m: m.get("exposed_comm_ms", 0.0)),
        "tp_exposed_ms": mean(lambda m: m.get("tp_exposed_ms", 0.0)),
        "ep_exposed_ms": mean(lambda m: m.get("ep_exposed_ms", 0.0)),
        "bubble": mean(lambda m: statistics.fmean(m.get("pp_idle_ms") or [0.0]) / m["step_time_ms"]),
        "accounted_mib": sum(v for k, v in last_memory.items() if k != "peak_rss") / 2**20,
        "peak_rss_mib": last_memory.get("peak_rss", 0) / 2**20,
    }


def collect(out, layouts, batches, warmup):
    """One row per layout: the median over its repetitions of run_figures."""
    rows = []
    for layout, batch in zip(layouts, batches):
        name = layout_name(layout)
        files = sorted(Path(out).glob(f"{name}_r*.jsonl"))
        files = [p for p in files if re.fullmatch(re.escape(name) + r"_r\d+\.jsonl", p.name)]
        if not files:
            raise ScalingError(f"{out}: no metrics file {name}_rREP.jsonl for layout {name}; run without --from-dir")
        runs = [run_figures(p, warmup) for p in files]
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row.update(layout=name, ranks=ranks(layout), batch=batch, reps=len(runs))
        rows.append(row)
    per_rank = rows[0]["tokens_per_s"] / rows[0]["ranks"]
    for row in rows:
        row["ideal"] = per_rank * row["ranks"]
        row["efficiency"] = row["tokens_per_s"] / row["ideal"]
    return rows


def table(rows, mode):
    head = ("| layout | ranks | global batch | tokens/s | ideal | efficiency | step ms | exposed dp / tp / ep ms "
            "| bubble | accounted MiB | peak RSS MiB | runs |")
    lines = [f"{mode} scaling", "", head, "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['layout']} | {r['ranks']} | {r['batch']} | {r['tokens_per_s']:.0f} | {r['ideal']:.0f} "
                     f"| {r['efficiency']:.2f} | {r['step_ms']:.0f} | {r['dp_exposed_ms']:.1f} / "
                     f"{r['tp_exposed_ms']:.1f} / {r['ep_exposed_ms']:.1f} | {100 * r['bubble']:.1f} % "
                     f"| {r['accounted_mib']:.0f} | {r['peak_rss_mib']:.0f} | {r['reps']} |")
    return "\n".join(lines) + "\n"


def plot(rows, mode, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = [r["ranks"] for r in rows]
    ax_t.plot(x, [r["tokens_per_s"] for r in rows], "o", label="measured")
    xs = sorted(set(x))
    per_rank = rows[0]["ideal"] / rows[0]["ranks"]
    ax_t.plot(xs, [per_rank * n for n in xs], "--", color="grey", label="ideal")
    ax_e.plot(x, [r["efficiency"] for r in rows], "o")
    ax_e.axhline(1.0, ls="--", color="grey")
    for r in rows:
        ax_t.annotate(r["layout"], (r["ranks"], r["tokens_per_s"]), fontsize=7, xytext=(3, 3),
                      textcoords="offset points")
        ax_e.annotate(r["layout"], (r["ranks"], r["efficiency"]), fontsize=7, xytext=(3, 3),
                      textcoords="offset points")
    ax_t.set(xlabel="ranks", ylabel="tokens/s", title=f"{mode} scaling: throughput")
    ax_e.set(xlabel="ranks", ylabel="efficiency (tokens/s ÷ ideal)", title=f"{mode} scaling: efficiency",
             ylim=(0, max(1.1, max(r["efficiency"] for r in rows) * 1.1)))
    ax_t.legend()
    for ax in (ax_t, ax_e):
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("mode", choices=("strong", "weak"))
    p.add_argument("--config", required=True, help="the TOML config every run starts from")
    p.add_argument("--layout", action="append", required=True, help="e.g. tp=2,dp=2 (repeat; the first is the base)")
    p.add_argument("--global-batch", type=int, required=True, help="global batch (weak: at the first layout)")
    p.add_argument("--out", required=True, help="directory of the runs' metrics, logs, table and plot")
    p.add_argument("--launcher", choices=("mpirun", "srun"), default="mpirun")
    p.add_argument("--bin", default="build/megatrain")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--set", action="append", default=[], help="a config override passed to every run")
    p.add_argument("--from-dir", action="store_true", help="no runs: read the metrics already in --out")
    args = p.parse_args(argv)
    try:
        if args.steps <= args.warmup:
            raise ScalingError(f"--steps {args.steps} must exceed --warmup {args.warmup}")
        if args.global_batch < 1 or args.reps < 1:
            raise ScalingError("--global-batch and --reps must be at least 1")
        layouts = [parse_layout(t) for t in args.layout]
        names = [layout_name(layout) for layout in layouts]
        if len(set(names)) != len(names):
            raise ScalingError(f"a layout is given twice: {', '.join(names)}")
        batches = global_batches(args.mode, layouts, args.global_batch)
        if not args.from_dir:
            if not os.access(args.bin, os.X_OK):
                raise ScalingError(f"{args.bin}: not an executable; build megatrain first or pass --bin")
            run_all(args, layouts, batches)
        rows = collect(args.out, layouts, batches, args.warmup)
    except (ScalingError, OSError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    text = table(rows, args.mode)
    print(text)
    Path(args.out, "scaling.md").write_text(text)
    plot(rows, args.mode, Path(args.out, "scaling.png"))
    print(f"wrote {Path(args.out, 'scaling.md')} and {Path(args.out, 'scaling.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
