"""What scripts/megatrain-resilient reports of a run from the events it saw, each a tuple (attempt,
kind, fields, t_wall) with kind a marker of the job's output (FAULT_INJECTED, WATCHDOG, …), a
driver's detection (PEER_LOST, NODE_STALE) or an exit code: how long each injected fault took to be
detected, how long a recovery took broken down, and the effective training time ratio (ETTR)."""
import json
import os
import statistics

# What a detection looks like for each kind of injected fault (an exit code, or a marker line).
DETECTED_BY = {"kill": {137, "PEER_LOST"}, "ckpt_crash": {137, "PEER_LOST"}, "exc": {70}, "hang": {"WATCHDOG", 75},
               "nan": {"NONFINITE"}, "slow": {"STRAGGLER", "SLOW_STEP"}, "bitflip": {"REPLICA_MISMATCH"},
               "spike": {"LOSS_SPIKE"}}
DETECTIONS = {"WATCHDOG", "PEER_LOST", "NODE_STALE", "REPLICA_MISMATCH"}


def fault_detections(seen):
    """Each injected fault (kind, seconds to the first detection of its kind that followed it in its
    attempt); None when undetected, "cut short" when the attempt ended before it could be: another
    fault came after it or was detected (a kill injected beside it ends the launch), a rank died by a
    signal (PEER_LOST: also a lost host, which injects nothing), or training finished (a slow rank is
    judged over whole straggler windows). Injected delays nothing is meant to detect (ckpt_slow,
    selfcheck_slow, peak_slow: tests of the trainer's own waiting) are not faults here."""
    seen = [e for e in seen if e[1] != "FAULT_INJECTED" or e[2]["kind"] in DETECTED_BY]
    out = []
    for i, (attempt, kind, fields, t) in enumerate(seen):
        if kind != "FAULT_INJECTED":
            continue
        rest = [(k, f, u) for a, k, f, u in seen[i + 1:] if a == attempt]
        hit = next((u - t for k, _, u in rest if k in DETECTED_BY[fields["kind"]]), None)
        others = set().union(*(DETECTED_BY[f["kind"]] for j, (a, k, f, _) in enumerate(seen)
                               if a == attempt and k == "FAULT_INJECTED" and j != i and f["kind"] != fields["kind"]))
        if hit is None and any(k in ("FAULT_INJECTED", "PEER_LOST", 0, 10) or k in others for k, _, _ in rest):
            hit = "cut short"
        out.append((fields["kind"], hit))
    return out


def recovery(seen, attempt, launched_at, now, parts):
    """At the end of attempt's first step (`now`; `parts`: the start-up line's phases): the RECOVERY
    event's fields, how long the recovery took from the failure of the attempt before (the injected
    fault when there was one, else its detection) broken down: detection (to the first detection of
    the attempt before, or its end), teardown (to the job's end), relaunch (backoff and launcher, to
    this launch), start-up (to the state loaded), state load, first step; None without an attempt
    before that ended."""
    prev = [(k, f, t) for a, k, f, t in seen if a == attempt - 1]
    ended = next((t for k, _, t in prev if isinstance(k, int)), None)
    if ended is None:
        return None
    fault = next((t for k, _, t in prev if k == "FAULT_INJECTED"), None)
    detected = min(next((t for k, _, t in prev if k in DETECTIONS and (fault is None or t >= fault)), ended), ended)
    first_step = float(parts.get("first step", 0.0))
    load = float(parts.get("checkpoint load", 0.0))
    source = "memory" if any(a == attempt and k == "MEMORY_RESTORE" for a, k, *_ in seen) else "storage"
    r = lambda x: round(x, 3)  # noqa: E731
    return dict(source=source, detection_s=r(detected - fault) if fault else None, teardown_s=r(ended - detected),
                relaunch_s=r(launched_at - ended), startup_s=r(now - launched_at - first_step - load),
                state_load_s=r(load), first_step_s=r(first_step), total_s=r(now - (fault or detected)),
                to_first_step_s=r(now - detected))


def iteration_ms(row):
    """A metrics row's iteration time: iter_time_ms (the step and the work between steps, as Megatron
    times iterations), or step_time_ms in rows written before it existed."""
    return row.get("iter_time_ms", row["step_time_ms"])


def ettr(metrics_path, first_step, wall):
    """(productive steps, median iteration ms or None, ETTR) from the run's metrics (RUN/metrics.jsonl, its
    resumes rewound): MegaScale's ratio, productive steps × the median iteration time (iteration_ms)
    ÷ wall time."""
    times, last = [], first_step
    if os.path.exists(metrics_path):
        for line in open(metrics_path):
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if "step_time_ms" in m:
                times.append(iteration_ms(m))
                last = max(last, m["step"])
    productive = last - first_step
    median = statistics.median(times) if times else None
    return productive, median, productive * median / 1e3 / wall if median and wall > 0 else 0.0
