"""The ranks' heartbeats as scripts/megatrain-resilient reads them: RUN/hb/rank_R.json, which every rank
rewrites every health.heartbeat_interval_s (health/heartbeat.h) with its rank, host, node, pid, step, the
count of collectives it completed and the interval itself; a rank's last beat, written as it ends, says
"final"."""
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


def live_beats(run_dir):
    """beats() of the ranks still running: a rank that ended (its final beat) is never stale."""
    return [b for b in beats(run_dir) if not b.get("final")]


def missed_a_beat(beat):
    """Older than one and a half of the rank's own intervals: it skipped a beat (no beat yet counts as none)."""
    return beat.get("interval_s", 0) > 0 and beat["age"] > 1.5 * beat["interval_s"]


def stale_ranks(live, seen, hb_timeout_s, stuck_timeout_s):
    """Of `live` (live_beats()): {rank: (node, host, step, seconds, why)} of the ranks whose heartbeat is
    older than hb_timeout_s ("no heartbeat"), or whose step and collectives have not moved for
    stuck_timeout_s while they beat ("no progress"); `seen` (rank -> ((step, collectives), since))
    carries what was seen across calls.
    With a rank of a node past the timeout, the node's other ranks that missed a beat are named too: a
    node that stopped stopped all its ranks, whose beats were up to an interval apart."""
    now, out = time.time(), {}
    for beat in live:
        age = beat["age"]
        rank, key = beat["rank"], (beat["step"], beat["coll_seq"])
        if seen.get(rank, (None,))[0] != key:
            seen[rank] = (key, now)
        frozen = now - seen[rank][1]
        if age > hb_timeout_s:
            out[rank] = (beat["node"], beat["host"], beat["step"], age, "no heartbeat")
        elif beat["step"] > 0 and frozen > stuck_timeout_s:
            out[rank] = (beat["node"], beat["host"], beat["step"], frozen, "no progress")
    silent_nodes = {node for node, _, _, _, why in out.values() if why == "no heartbeat"}
    for beat in live:
        if beat["rank"] not in out and beat["node"] in silent_nodes and missed_a_beat(beat):
            out[beat["rank"]] = (beat["node"], beat["host"], beat["step"], beat["age"], "no heartbeat")
    return out


def stale_hosts(live, stale):
    """The hosts to blame for `stale` (stale_ranks' answer over the same `live` beats): those all of whose
    ranks are stale, while another host's ranks beat on. One stalled rank among live ones is the job's
    fault, not its host's, and when every host stalled the job stopped, not a host."""
    hosts = {b["host"] for b in live}
    whole = {h for h in hosts if all(b["rank"] in stale for b in live if b["host"] == h)}
    return sorted(whole) if whole != hosts else []
