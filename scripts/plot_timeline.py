#!/usr/bin/python3
"""Draws a merged megatrain timeline (megatrain trace merge) as a picture: one band per rank, its
steps as grey bars and its communication on coloured lanes (tp, pp, dp, world), over a window of
steps. Usage: scripts/plot_timeline.py RUN_DIR/timeline/merged.trace.json -o timeline.png
[--first-step N --steps K]. Needs Debian's python3-matplotlib."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LANES = {1: ("tp", "tab:blue"), 2: ("pp", "tab:purple"), 3: ("dp", "tab:orange"), 4: ("world", "tab:green"),
         5: ("other", "tab:gray")}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("merged")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--first-step", type=int, default=10)
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()
    events = json.load(open(a.merged))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    steps = [e for e in events if e.get("cat") == "step"]
    wanted = {f"step {s}" for s in range(a.first_step, a.first_step + a.steps)}
    window = [e for e in steps if e["name"] in wanted]
    t0 = min(e["ts"] for e in window)
    t1 = max(e["ts"] + e["dur"] for e in window)
    ranks = sorted(names)
    fig, ax = plt.subplots(figsize=(11, 1 + 0.9 * len(ranks)))
    for i, rank in enumerate(ranks):
        y = (len(ranks) - 1 - i) * 6
        for e in events:
            if e.get("pid") != rank or e.get("ph") != "X" or e["ts"] + e["dur"] < t0 or e["ts"] > t1:
                continue
            start, width = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
            if e.get("cat") == "step":
                ax.broken_barh([(start, width)], (y + 4, 1.2), color="lightgray", edgecolor="black", linewidth=0.3)
                ax.text(start + width / 2, y + 4.6, e["name"], ha="center", va="center", fontsize=7)
            else:
                lane, colour = LANES.get(e.get("tid", 5), LANES[5])
                ax.broken_barh([(start, max(width, 0.05))], (y + 4 - e["tid"] * 0.9, 0.8), color=colour)
    ax.set_yticks([(len(ranks) - 1 - i) * 6 + 3 for i in range(len(ranks))])
    ax.set_yticklabels([names[r] for r in ranks])
    ax.set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color="lightgray", ec="black")] + \
              [plt.Rectangle((0, 0), 1, 1, color=c) for _, c in LANES.values()]
    fig.legend(handles, ["step"] + [f"{n} communication" for n, _ in LANES.values()], fontsize=7,
               loc="lower center", ncol=6, frameon=False)
    ax.set_title(f"merged timeline, steps {a.first_step}–{a.first_step + a.steps - 1}", fontsize=9)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
