"""Checks scripts/resilient_heartbeats.py, the driver's reading of the ranks' heartbeats, on beat files
with set ages: which ranks are stale and which hosts are blamed.
    /usr/bin/python3 tests/scripts/test_resilient_heartbeats.py"""
import json
import os
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "scripts"))
from resilient_heartbeats import live_beats, stale_hosts, stale_ranks  # noqa: E402

NODES = {"a": 0, "b": 1}


class StaleRanks(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.run = self.tmp.name
        os.makedirs(os.path.join(self.run, "hb"))

    def tearDown(self):
        self.tmp.cleanup()

    def beat(self, rank, host, age, step=7, final=False):
        """Rank `rank` on `host` beat every second, the last time `age` seconds ago."""
        path = os.path.join(self.run, "hb", f"rank_{rank}.json")
        beat = {"rank": rank, "host": host, "node": NODES[host], "pid": 100 + rank, "step": step, "coll_seq": 40,
                "interval_s": 1.0}
        if final:
            beat["final"] = True
        with open(path, "w") as f:
            json.dump(beat, f)
        t = time.time() - age
        os.utime(path, (t, t))

    def stale(self):
        return stale_ranks(live_beats(self.run), {}, 3.0, 600.0)

    def blamed(self, stale):
        return stale_hosts(live_beats(self.run), stale)

    def test_a_stopped_host_names_all_its_ranks_and_is_blamed(self):
        # Host b stopped: rank 2's last beat is past the 3 s timeout, rank 3 beat 0.9 s after it.
        self.beat(0, "a", 0.2), self.beat(1, "a", 0.7), self.beat(2, "b", 3.2), self.beat(3, "b", 2.3)
        stale = self.stale()
        self.assertEqual(sorted(stale), [2, 3])
        self.assertEqual({why for *_, why in stale.values()}, {"no heartbeat"})
        self.assertEqual(self.blamed(stale), ["b"])

    def test_a_live_rank_beside_a_stopped_one_is_not_named_and_its_host_not_blamed(self):
        self.beat(0, "a", 0.2), self.beat(1, "a", 0.7), self.beat(2, "b", 3.2), self.beat(3, "b", 0.9)
        stale = self.stale()
        self.assertEqual(sorted(stale), [2])
        self.assertEqual(self.blamed(stale), [])

    def test_a_rank_that_missed_a_beat_on_a_node_with_none_past_the_timeout_is_not_stale(self):
        self.beat(0, "a", 2.0), self.beat(1, "a", 0.4), self.beat(2, "b", 2.9), self.beat(3, "b", 0.1)
        self.assertEqual(self.stale(), {})

    def test_when_every_host_stopped_no_host_is_blamed(self):
        self.beat(0, "a", 3.5), self.beat(1, "a", 3.1), self.beat(2, "b", 3.4), self.beat(3, "b", 2.6)
        stale = self.stale()
        self.assertEqual(sorted(stale), [0, 1, 2, 3])
        self.assertEqual(self.blamed(stale), [])

    def test_a_rank_that_ended_is_never_stale(self):
        self.beat(0, "a", 9.0, final=True), self.beat(1, "a", 0.3), self.beat(2, "b", 0.5), self.beat(3, "b", 0.2)
        self.assertEqual(self.stale(), {})

    def test_a_rank_that_beats_without_progress_is_stuck(self):
        self.beat(0, "a", 0.2), self.beat(1, "a", 0.3)
        seen = {}
        self.assertEqual(stale_ranks(live_beats(self.run), seen, 3.0, 600.0), {})
        seen[1] = (seen[1][0], time.time() - 601)  # rank 1's step and collectives stood still 601 s
        stale = stale_ranks(live_beats(self.run), seen, 3.0, 600.0)
        self.assertEqual(sorted(stale), [1])
        self.assertEqual(stale[1][4], "no progress")


if __name__ == "__main__":
    unittest.main()
