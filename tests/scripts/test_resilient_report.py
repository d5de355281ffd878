"""Checks the ETTR of scripts/resilient_report.py on metrics rows written here: productive steps × the
median iteration time ÷ wall time, an iteration's time from iter_time_ms (step_time_ms in rows
without it); and the ETTR by layout, each layout's steps (rows of one `world`) at its own median.
    /usr/bin/python3 tests/scripts/test_resilient_report.py"""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "scripts"))
from resilient_report import ettr, ettr_by_layout  # noqa: E402


class Ettr(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "metrics.jsonl")

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rows):
        with open(self.path, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
            f.write('{"step": 9, "loss": 1.0, "val_loss"')  # a line cut short by a kill

    def test_iterations_not_steps_are_what_is_counted(self):
        # Steps of 100 ms in iterations of 120 ms (the per-step agreements, a save at step 5).
        rows = [{"step": s, "step_time_ms": 100.0, "iter_time_ms": 900.0 if s == 5 else 120.0} for s in range(1, 9)]
        self.write(rows)
        productive, median, ratio = ettr(self.path, 0, 1.2)
        self.assertEqual((productive, median), (8, 120.0))
        self.assertAlmostEqual(ratio, 8 * 0.12 / 1.2)

    def test_rows_without_iterations_count_their_steps_and_steps_before_a_resume_are_not_productive(self):
        rows = [{"step": s, "step_time_ms": 50.0} for s in range(4, 8)]
        rows += [{"step": 8, "step_time_ms": 40.0, "iter_time_ms": 60.0}]
        self.write(rows)
        productive, median, ratio = ettr(self.path, 3, 1.0)
        self.assertEqual((productive, median), (5, 50.0))
        self.assertAlmostEqual(ratio, 0.25)

    def test_no_metrics_no_ettr(self):
        self.assertEqual(ettr(self.path, 0, 10.0), (0, None, 0.0))
        self.assertEqual(ettr_by_layout(self.path, 0, 10.0), 0.0)

    def test_each_layout_is_counted_at_its_own_median(self):
        # An elastic run: 6 steps of 100 ms at 8 ranks, then 2 of 200 ms at 4 (a host lost), in 1 s.
        # One median over the mixture counts all 8 at 100 ms (0.8); by layout, 6 × 0.1 + 2 × 0.2 = 1.0.
        rows = [{"step": s, "step_time_ms": 90.0, "iter_time_ms": 100.0, "world": 8} for s in range(1, 7)]
        rows += [{"step": s, "step_time_ms": 190.0, "iter_time_ms": 200.0, "world": 4} for s in (7, 8)]
        self.write(rows)
        self.assertAlmostEqual(ettr(self.path, 0, 1.0)[2], 0.8)
        self.assertAlmostEqual(ettr_by_layout(self.path, 0, 1.0), 1.0)

    def test_by_layout_a_row_stands_for_the_steps_since_the_row_before(self):
        # log.interval = 2 from step 2 after a resume at step 2: rows at 4, 6 (8 ranks), 8 (4 ranks).
        rows = [{"step": 2, "step_time_ms": 100.0, "world": 8}, {"step": 4, "step_time_ms": 100.0, "world": 8},
                {"step": 6, "step_time_ms": 100.0, "world": 8}, {"step": 8, "step_time_ms": 200.0, "world": 4}]
        self.write(rows)
        self.assertAlmostEqual(ettr_by_layout(self.path, 2, 1.0), 4 * 0.1 + 2 * 0.2)


if __name__ == "__main__":
    unittest.main()
