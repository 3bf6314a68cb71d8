"""A trace within a budget (docs/recording.md, "The budget"; docs/replay.md, "Bounded traces"):
the ImageFolder job of test_bounded.py (random augmentation in 2 workers), with a hidden layer
wide enough that each snapshot weighs about 900 KB, recorded with `dlrecord --window 4
--snapshot-every 3steps --budget 4M`. Unbounded its trace would be about 5.5 MB: old periodic
snapshots are dropped (their bulk files unlinked), the latest kept. Replayed without the
dataset inside the window (from the kept periodic snapshot of step 27, read from its bulk file,
and from the window's of step 24) and outside it (refused with the map, no jump to a dropped snapshot), and with the
dataset from the start. A budget too small for what every step records stops the recording,
said by dlrecord, and leaves the job alone; a bad --budget is a usage error."""
import os
import re
import shutil
import tempfile
import unittest

from harness import PY, ROOT, run, tool
from test_bounded import make_images

JOB = os.path.join(ROOT, "tests", "integration", "jobs", "imagefolder_job.py")
STEPS = 30
BUDGET = 4 << 20


def trace_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


class BudgetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dlrr-budget-")
        cls.data = os.path.join(cls.tmp, "images")
        make_images(cls.data)
        cls.trace = os.path.join(cls.tmp, "t")
        cls.job = [PY, JOB, cls.data, str(STEPS), "wide=16384"]
        cls.rec = run([tool("dlrecord"), "--window", "4", "--snapshot-every", "3steps", "--budget", "4M", "-o",
                       cls.trace, "--"] + cls.job)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.rec.returncode, 0, self.rec.stderr)

    def test_within_budget_old_bulk_dropped(self):
        self.assertLessEqual(trace_bytes(self.trace), BUDGET)
        # dlrecord's closing size counts the bulk files too (it once gave the streams' alone).
        m = re.search(r"dlrecord: trace .*: %d steps, ([0-9.]+) (KiB|MiB)" % STEPS, self.rec.stderr)
        self.assertIsNotNone(m, self.rec.stderr)
        said = float(m.group(1)) * (1024 if m.group(2) == "KiB" else 1 << 20)
        bulk = sum(os.path.getsize(os.path.join(self.trace, f)) for f in os.listdir(self.trace) if f.endswith(".dlb"))
        self.assertGreater(bulk, 0)
        self.assertGreater(said, bulk, self.rec.stderr)
        # Periodic snapshots at steps 3, 6, 9, 15, 18, 21, 27 (the window's own at 4, 8, ...): each
        # in a bulk file; the oldest are gone, the latest kept.
        bulk = [f for f in os.listdir(self.trace) if f.endswith(".dlb")]
        self.assertTrue(0 < len(bulk) < 7, os.listdir(self.trace))
        info = run([tool("dltrace"), "info", self.trace], check=True).stdout
        self.assertIn("dropped for the budget", info)
        self.assertIn("in bulk files (snapshots of a budgeted trace", info)
        self.assertIn("without it only steps", info)
        self.assertRegex(info, r"\n  3 +periodic .*\(dropped\)\n")
        self.assertNotRegex(info, r"\n  27 +periodic .*\(dropped\)\n")
        events = run([tool("dltrace"), "events", self.trace], check=True).stdout
        self.assertIn("budget: dropped the snapshot of step 3", events)

    def test_without_data_inside_and_outside_the_window(self):
        moved = self.data + ".moved"
        os.rename(self.data, moved)
        try:
            # The latest periodic snapshot (step 27) is kept, in its bulk file.
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "end", "--from", "step=27"])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("jumping to the snapshot of step 27", p.stderr)
            self.assertIn("3 of %d recorded steps verified bit-exact" % STEPS, p.stderr)
            # From the window's own snapshot (step 24) on: bit-exact without the data.
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "end", "--from", "step=24"])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("6 of %d recorded steps verified bit-exact" % STEPS, p.stderr)
            # Step 16: its periodic snapshot (step 15) was dropped, so no jump there; refused with the map.
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "step=16"])
            self.assertEqual(p.returncode, 7, p.stdout + p.stderr)  # refused before anything ran
            self.assertNotIn("jumping to the snapshot of step 15", p.stderr)
            self.assertIn("recorded by reference", p.stderr)
            self.assertIn("without it only steps", p.stderr)
        finally:
            os.rename(moved, self.data)

    def test_with_data_everything(self):
        p = run([tool("dlreplay"), self.trace, "--until", "end", "--from", "start"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d of %d recorded steps verified bit-exact" % (STEPS, STEPS), p.stderr)

    def test_by_value_old_snapshots_dropped_while_running(self):
        # Batches by value, a snapshot every 3 steps: the budget is reached during the run, and each
        # new snapshot drops the oldest then (not only when the job ends).
        trace = os.path.join(self.tmp, "byvalue")
        p = run([tool("dlrecord"), "--snapshot-every", "3steps", "--budget", "4M", "-o", trace, "--"] + self.job)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertLessEqual(trace_bytes(trace), BUDGET)
        events = run([tool("dltrace"), "events", trace], check=True).stdout
        drops = [line for line in events.splitlines() if "budget: dropped the snapshot of step" in line]
        self.assertTrue(drops, events[-2000:])
        self.assertLess(int(drops[0].split()[1]), STEPS - 1)  # the step it happened in: mid-run
        p = run([tool("dlreplay"), trace, "--until", "end", "--from", "step=27"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("3 of %d recorded steps verified bit-exact" % STEPS, p.stderr)

    def test_budget_too_small_for_every_step(self):
        trace = os.path.join(self.tmp, "small")
        plain = run(self.job)
        p = run([tool("dlrecord"), "--budget", "64K", "-o", trace, "--"] + self.job)
        self.assertEqual(p.returncode, plain.returncode, p.stderr)
        self.assertEqual(p.stdout, plain.stdout)  # the job's own result, untouched
        self.assertIn("trace budget (--budget 64.0 KiB) reached", p.stderr)
        self.assertIn("recording stopped there (the job goes on)", p.stderr)

    def test_bad_budget_is_a_usage_error(self):
        for bad in ("0", "12Q", "-5M", "", "M", "99999999999999999999"):
            p = run([tool("dlrecord"), "--budget", bad, "-o", os.path.join(self.tmp, "bad"), "--", "true"])
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn("--budget must be a size", p.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.tmp, "bad")))


if __name__ == "__main__":
    unittest.main()
