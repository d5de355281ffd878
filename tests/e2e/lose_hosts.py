#!/usr/bin/python3
"""The chaos soak's host losses (tests/e2e/test_resilient_e2e.cpp): while a job trains under the
resilient driver, (virtual) host NODE is lost at random — its ranks SIGKILLed, then its memory store
removed, as a machine that goes away takes its memory with it — at exponential intervals of mean
MTTI_S seconds drawn from SEED, until the file STOP exists. A loss waits for a job that is training
(every rank of NODE beat within the last second, past step 0). Each loss is a JSON line in LOG:
{"t_wall", "ranks", "steps"}.

    lose_hosts.py SEED MTTI_S RUN_DIR STORE NODE LOG STOP
"""
import json
import os
import random
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "scripts"))
from resilient_heartbeats import beats  # noqa: E402  (the driver's reading of RUN/hb)


def live_ranks(run_dir, node):
    """{rank: (pid, step)} of NODE's ranks when each beat within the last second past step 0, else {}."""
    out = {}
    for beat in beats(run_dir):
        if beat.get("node") == node:
            if beat["age"] > 1.0 or beat.get("step", 0) < 1:
                return {}
            out[beat["rank"]] = (beat["pid"], beat["step"])
    return out


def main():
    seed, mtti_s, run_dir, store, node, log, stop = sys.argv[1:8]
    rng = random.Random(int(seed))
    node = int(node)
    while not os.path.exists(stop):
        due = time.time() + rng.expovariate(1.0 / float(mtti_s))
        while time.time() < due and not os.path.exists(stop):
            time.sleep(0.1)
        ranks = {}
        while not ranks and not os.path.exists(stop):
            ranks = live_ranks(run_dir, node)
            time.sleep(0.1)
        if not ranks:
            return
        for pid, _ in ranks.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(store, ignore_errors=True)
        with open(log, "a") as f:
            f.write(json.dumps({"t_wall": time.time(), "ranks": sorted(ranks),
                                "steps": sorted({s for _, s in ranks.values()})}) + "\n")


if __name__ == "__main__":
    main()
