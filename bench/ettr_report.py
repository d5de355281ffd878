"""The table of bench/ettr.sh for one mode: each fault (the injected ones from the driver's events, the
host loss from DIR/host_loss.json) with the steps it cost and its recovery broken down (the driver's
RECOVERY event of the launch after it), then the run's ETTR.

    python3 bench/ettr_report.py MODE DIR     (DIR: the mode's folder: run/reports/events.jsonl, …)
"""
import json
import os
import statistics
import sys

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
    print(f"\n== {mode}: ETTR {100 * end['ettr']:.1f}% ({end['productive_steps']} steps × {end['median_step_ms']:.0f} ms "
          f"median in {end['wall_s']:.0f} s, {end['attempts']} launches)")
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
    json.dump({"mode": mode, "ettr": end["ettr"], "end": end, "faults": rows},
              open(os.path.join(out, "summary.json"), "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
