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


def iterations(metrics_path):
    """The metrics rows (RUN/metrics.jsonl, its resumes rewound) that timed a step, as (step, layout,
    iteration ms); a layout is the job's ranks (`world`: an elastic run changes them; None in rows
    written before the field existed). A line cut short by a kill is skipped."""
    out = []
    if os.path.exists(metrics_path):
        for line in open(metrics_path):
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if "step_time_ms" in m:
                out.append((m["step"], m.get("world"), iteration_ms(m)))
    return out


def ettr(metrics_path, first_step, wall):
    """(productive steps, median iteration ms or None, ETTR) from the run's metrics: MegaScale's
    ratio, productive steps × the median iteration time (iteration_ms) ÷ wall time."""
    rows = iterations(metrics_path)
    productive = max([first_step] + [s for s, _, _ in rows]) - first_step
    median = statistics.median(t for _, _, t in rows) if rows else None
    return productive, median, productive * median / 1e3 / wall if median and wall > 0 else 0.0


def ettr_by_layout(metrics_path, first_step, wall):
    """The same ratio with each layout's productive steps counted at that layout's own median
    iteration: after a host is lost an elastic run trains at a smaller dp, whose iterations differ
    from the larger one's, and one median over the mixture swings from run to run with the share of
    each. 0.0 without metrics."""
    rows = sorted(iterations(metrics_path))
    if not rows or wall <= 0:
        return 0.0
    steps, before = {}, first_step  # a row stands for the steps since the row before (log.interval)
    for s, w, _ in rows:
        if s > before:
            steps[w] = steps.get(w, 0) + s - before
            before = s
    return sum(n * statistics.median(t for _, w, t in rows if w == layout) / 1e3
               for layout, n in steps.items()) / wall
