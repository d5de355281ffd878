"""The table of bench/ettr.sh for one mode: each fault (the injected ones from the driver's events, the
host loss from DIR/host_loss.json) with the steps it cost and its recovery broken down (the driver's
RECOVERY event of the launch after it), then the run's ETTR and where its wall time went.

    python3 bench/ettr_report.py MODE DIR     (DIR: the mode's folder: run/reports/events.jsonl, …)
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "scripts"))
from resilient_report import iteration_ms  # noqa: E402

PARTS = ("detection_s", "teardown_s", "relaunch_s", "startup_s", "state_load_s", "first_step_s")


def main(mode, out):
    events = [json.loads(line) for line in open(os.path.join(out, "run", "reports", "events.jsonl"))]
    faults = [{"kind": "hang (freeze)" if e.get("how") == "freeze" else e["kind"], "attempt": e["attempt"],
               "done": int(e["step"]) - 1, "t": e["t_wall"]} for e in events if e["event"] == "FAULT_INJECTED"]
    loss_file = os.path.join(out, "host_loss.json")
    if os.path.exists(loss_file):
        loss = json.load(open(loss_file))
        attempt = max((e["attempt"] for e in events if e["event"] == "start" and e["t_wall"] <= loss["t_wall"]), default=1)
        faults.append({"kind": "host loss", "attempt": attempt, "done": loss["step"], "t": loss["t_wall"]})
    faults.sort(key=lambda f: f["t"])
    rows = []
    for f in faults:
        nxt = f["attempt"] + 1
        rec = next((e for e in events if e["event"] == "RECOVERY" and e["attempt"] == nxt), None)
        restore = next((int(e["step"]) for e in events if e["event"] == "MEMORY_RESTORE" and e["attempt"] == nxt), None)
        if restore is None:
            restore = next((e["resume_from"] for e in events if e["event"] == "start" and e["attempt"] == nxt), None)
        if rec is None or restore is None:
            print(f"{mode}: {f['kind']} at step {f['done'] + 1}: no recovery recorded (the run ended first?)")
            continue
        total = rec["t_wall"] - f["t"]
        parts = {p: rec[p] for p in PARTS}
        if parts["detection_s"] is None:  # the host loss, injected outside the job
            parts["detection_s"] = round(total - sum(v for k, v in parts.items() if k != "detection_s"), 3)
        rows.append({"kind": f["kind"], "step": f["done"] + 1, "restored": restore, "lost": f["done"] - restore,
                     "source": rec["source"], "total_s": round(total, 3), **parts})
    end = next(e for e in events if e["event"] == "end")
    metrics = [json.loads(line) for line in open(os.path.join(out, "run", "metrics.jsonl")) if line.strip()]
    steps = [m["step_time_ms"] for m in metrics if "step_time_ms" in m]
    print(f"\n== {mode}: ETTR {100 * end['ettr']:.1f}% ({end['productive_steps']} iterations × {end['median_iter_ms']:.0f}"
          f" ms median (steps {statistics.median(steps):.0f} ms) in {end['wall_s']:.0f} s, {end['attempts']} launches); "
          f"by layout {100 * end.get('ettr_by_layout', 0.0):.1f}% (each layout's iterations at its own median)")
    print("| fault | at step | restored step (source) | steps lost | fault → first new step, s | detection | teardown "
          "| relaunch | start-up | state load | first step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {r['step']} | {r['restored']} ({r['source']}) | {r['lost']} | {r['total_s']:.2f} | "
              + " | ".join(f"{r[p]:.2f}" for p in PARTS) + " |")
    if rows:
        lost, total = [r["lost"] for r in rows], [r["total_s"] for r in rows]
        print(f"steps lost per fault: median {statistics.median(lost):g}, max {max(lost)}; recovery (fault → first new "
              f"step): median {statistics.median(total):.2f} s, max {max(total):.2f} s")
    spent = wall_time(out, events, end, rows, metrics)
    print("wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()))
    kept = spent["iterations at the median"] + spent["iterations above it"]
    print(f"kept iterations (each at its own time): {kept:.1f} s, {100 * kept / end['wall_s']:.1f} % of the wall time "
          f"(ETTR with the iterations summed instead of counted at the median)")
    if rows:
        lost = spent["recoveries"] + sum(r["lost"] for r in rows) * end["median_iter_ms"] / 1e3
        print(f"lost to the faults (recoveries and steps lost): {lost:.1f} s, {100 * lost / end['wall_s']:.1f} % of the "
              f"wall time")
    json.dump({"mode": mode, "ettr": end["ettr"], "ettr_by_layout": end.get("ettr_by_layout"),
               "kept_share": kept / end["wall_s"], "end": end, "faults": rows, "wall": spent},
              open(os.path.join(out, "summary.json"), "w"), indent=1)


def wall_time(out, events, end, rows, metrics):
    """The driver's wall time in parts: the iterations at the median (ETTR's productive time), the
    iterations' time above it, the recoveries (fault → first new step, less that step), the first
    launch's start-up (to the end of its step 1, less that step), the end (TRAIN_FINISHED to the job's
    exit) and the rest: the steps lost and the parts of iterations a fault cut short."""
    iterations = [iteration_ms(m) / 1e3 for m in metrics if "step_time_ms" in m]
    productive = end["productive_steps"] * end["median_iter_ms"] / 1e3
    first = open(os.path.join(out, "run", "attempt_1.log"), errors="replace").read()
    m = re.search(r"startup ([0-9.]+) s from process start to the end of step 1: .*first step ([0-9.]+)", first)
    startup = float(m.group(1)) - float(m.group(2)) if m else 0.0
    finished = next((e["t_wall"] for e in events if e["event"] == "TRAIN_FINISHED"), None)
    ending = end["t_wall"] - finished if finished else 0.0
    recoveries = sum(r["total_s"] - r["first_step_s"] for r in rows)
    parts = {"iterations at the median": productive, "iterations above it": sum(iterations) - productive,
             "recoveries": recoveries, "first start-up": startup, "end": ending}
    parts["rest"] = end["wall_s"] - sum(parts.values())
    return parts


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
