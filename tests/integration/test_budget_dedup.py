"""Snapshot dedup under a budget (docs/recording.md, "Frozen tensors are stored once"): a job
with a frozen 1 MiB embedding and a trained head (jobs/frozen_job.py), a periodic snapshot every
2 steps, under a budget that holds a few snapshots only. The frozen tensors are written once, in
the first snapshot's bulk file, which later snapshots refer to and which stays pinned while they
are kept; old snapshots are dropped, and every kept one is whole: replay from the oldest kept and
from the newest verifies. The stream that uses bulk files says format 2.0 (docs/format.md)."""
import os
import re
import shutil
import tempfile
import unittest

from harness import PY, ROOT, run, tool

JOB = os.path.join(ROOT, "tests", "integration", "jobs", "frozen_job.py")
STEPS = 40
BUDGET = 8 << 20


def trace_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


class BudgetDedupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dlrr-dedup-")
        cls.trace = os.path.join(cls.tmp, "t")
        cls.rec = run([tool("dlrecord"), "--snapshot-every", "2steps", "--budget", "8M", "-o", cls.trace, "--", PY,
                       JOB, str(STEPS)])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.rec.returncode, 0, self.rec.stderr)

    def test_frozen_stored_once_old_dropped_kept_whole(self):
        self.assertLessEqual(trace_bytes(self.trace), BUDGET)
        text = run([tool("dltrace"), "info", self.trace], check=True).stdout
        rows = re.findall(r"\n  (\d+) +periodic +([\d.]+ [KM]iB) +([\d.]+ [KM]iB)( +\(dropped\))?", text)
        self.assertGreaterEqual(len(rows), 15, text)
        kept = [int(r[0]) for r in rows if not r[3]]
        dropped = [int(r[0]) for r in rows if r[3]]
        self.assertTrue(dropped, text)  # the budget was reached: old ones went
        # The first snapshot's file holds the frozen part and is pinned by every later one.
        self.assertEqual(kept[0], int(rows[0][0]), text)
        self.assertEqual(kept[-1], int(rows[-1][0]), text)
        # A later snapshot's new bytes are its head only: well under half its tensors.
        for step, tensors, new, _ in rows[1:]:
            self.assertIn("KiB", new, (step, tensors, new))
            self.assertIn("MiB", tensors, (step, tensors, new))
        # Without dedup a snapshot is 1.5 MiB: only about 5 would fit in 8 MiB.
        self.assertGreater(len(kept), 8, text)
        events = run([tool("dltrace"), "events", self.trace], check=True).stdout
        self.assertIn("budget: dropped the snapshot of step", events)
        self.assertRegex(text, r"format +2\.0 .*2\.x: snapshots in bulk files")
        # The oldest kept (the pinned one) and a later kept one both replay bit-exactly.
        second = kept[1]
        for start in (kept[0], second, kept[-1]):
            p = run([tool("dlreplay"), self.trace, "--until", "end", "--from", "step=%d" % start])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("jumping to the snapshot of step %d" % start, p.stderr)
            self.assertIn("%d of %d recorded steps verified bit-exact" % (STEPS - start, STEPS), p.stderr)

    def test_format_major_per_stream(self):
        majors = {}
        for f in os.listdir(self.trace):
            with open(os.path.join(self.trace, f), "rb") as fh:
                head = fh.read(12)
            majors[f] = int.from_bytes(head[8:10], "little")
        process = [f for f in majors if f.endswith(".dls") and f != "launcher.dls"]
        self.assertEqual(len(process), 1, majors)
        self.assertEqual(majors[process[0]], 2, majors)  # it uses bulk files
        self.assertEqual(majors["launcher.dls"], 1, majors)  # it does not: older dlrr reads it
        self.assertTrue(all(v == 2 for f, v in majors.items() if f.endswith(".dlb")), majors)


if __name__ == "__main__":
    unittest.main()
