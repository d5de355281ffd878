"""The ranks' heartbeats as scripts/megatrain-resilient reads them: RUN/hb/rank_R.json, which every rank
rewrites about once a second (health/heartbeat.h) with its rank, host, node, pid, step and the count of
collectives it completed."""
import json
import os
import re
import time


def beats(run_dir):
    """Every rank's last heartbeat, with "age": seconds since it was written."""
    hb = os.path.join(run_dir, "hb")
    files = [n for n in os.listdir(hb) if re.fullmatch(r"rank_\d+\.json", n)] if os.path.isdir(hb) else []
    out = []
    for n in files:
        try:
            beat = json.load(open(os.path.join(hb, n)))
            beat["age"] = time.time() - os.path.getmtime(os.path.join(hb, n))
        except (OSError, ValueError):
            continue
        out.append(beat)
    return out


def stale_ranks(run_dir, seen, hb_timeout_s, stuck_timeout_s):
    """{rank: (node, host, step, seconds, why)} of the ranks whose heartbeat is older than hb_timeout_s
    ("no heartbeat"), or whose step and collectives have not moved for stuck_timeout_s while they beat
    ("no progress"); `seen` (rank -> ((step, collectives), since)) carries what was seen across calls."""
    now, out = time.time(), {}
    for beat in beats(run_dir):
        age = beat["age"]
        rank, key = beat["rank"], (beat["step"], beat["coll_seq"])
        if seen.get(rank, (None,))[0] != key:
            seen[rank] = (key, now)
        frozen = now - seen[rank][1]
        if age > hb_timeout_s:
            out[rank] = (beat["node"], beat["host"], beat["step"], age, "no heartbeat")
        elif beat["step"] > 0 and frozen > stuck_timeout_s:
            out[rank] = (beat["node"], beat["host"], beat["step"], frozen, "no progress")
    return out
