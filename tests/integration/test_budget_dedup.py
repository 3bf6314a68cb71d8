"""Snapshot dedup under a budget (docs/recording.md, "Frozen tensors are stored once"): a job
with a frozen 1 MiB embedding and a trained head (jobs/frozen_job.py), a periodic snapshot every
2 steps, under a budget that holds a few snapshots only. The frozen tensors are written once, in
the first snapshot's bulk file, which later snapshots refer to and which stays pinned while they
are kept; old snapshots are dropped, and every kept one is whole: replay from the oldest kept and
from the newest verifies. The stream that uses bulk files says format 2.0 (docs/format.md)."""
import os
import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import PY, ROOT, children, run, tool

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


    def test_kill_9_leaves_kept_snapshots_whole(self):
        # A snapshot every step: bulk files are created, referred to, pinned and dropped all the
        # time; a kill -9 at any of those moments leaves a readable trace whose newest snapshot
        # (which refers to the first one's file) is whole.
        for at in (25, 41):
            trace = os.path.join(self.tmp, "killed%d" % at)
            p = subprocess.Popen([tool("dlrecord"), "-q", "--snapshot-every", "1steps", "--budget", "8M", "-o", trace,
                                  "--", PY, JOB, "100000", "progress"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                                 start_new_session=True)
            try:
                for line in p.stdout:
                    if line == "step %d\n" % at:
                        for pid in children(p.pid):
                            os.kill(pid, signal.SIGKILL)
                        break
                p.stdout.close()
                self.assertEqual(p.wait(timeout=120), 128 + 9)
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            time.sleep(0.1)
            v = run([tool("dltrace"), "verify", trace])
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
            info = json.loads(run([tool("dltrace"), "info", "--json", trace], check=True).stdout)
            snaps = info["snapshots"]
            self.assertGreater(len(snaps), 20)
            self.assertTrue(any(s["dropped"] for s in snaps))
            self.assertFalse(snaps[-1]["dropped"], snaps[-1])  # it refers to the pinned first file
            self.assertFalse(snaps[0]["dropped"], snaps[0])  # that file: pinned


if __name__ == "__main__":
    unittest.main()
