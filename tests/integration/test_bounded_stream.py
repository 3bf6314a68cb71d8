"""Bounded traces of jobs whose batches are not a map-style dataset's (docs/recording.md,
"Batches by reference"): a nanoGPT-style memmap token loop (no DataLoader, dropout, the next
batch drawn before backward()) and an IterableDataset streaming shards in 2 workers, each
recorded with `dlrecord --window 2`, then replayed with the data moved away (inside the window,
from the window's snapshot, and from the start) and with it present.

Neither has batches that a replay could re-make by reference: the token loop's data are the
memmap ranges it sliced, recorded every step as file facts (their bytes: the token file is over
the whole-file limit here, as a real one is); the IterableDataset's batches stay by value, which
dlrecord says. So both replay bit-exactly without the data from any step, and the trace's map
says nothing is missing."""
import os
import shutil
import tempfile
import unittest

from harness import PY, ROOT, run, tool

JOBS = os.path.join(ROOT, "tests", "integration", "jobs")
ITERS = 12
# The token file (128 KiB) over the whole-file limit: only the ranges used are recorded.
SMALL_WHOLE = {"DLRR_FILES_WHOLE_MAX": "4096"}


class Moved:
    """The data directory moved away for the block (the replay must not need it)."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        os.rename(self.path, self.path + ".moved")

    def __exit__(self, *exc):
        os.rename(self.path + ".moved", self.path)


class MemmapTokenLoopTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dlrr-bounded-lm-")
        cls.data = os.path.join(cls.tmp, "tokens")
        run([PY, os.path.join(JOBS, "memmap_lm.py"), cls.data, "--iters", "0"], check=True)  # makes train.bin
        cls.trace = os.path.join(cls.tmp, "t")
        cls.rec = run([tool("dlrecord"), "--window", "2", "-o", cls.trace, "--", PY, os.path.join(JOBS, "memmap_lm.py"),
                       cls.data, "--iters", str(ITERS)], env=SMALL_WHOLE)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.rec.returncode, 0, self.rec.stderr)

    def test_ranges_recorded_not_the_whole_file(self):
        p = run([tool("dltrace"), "events", self.trace, "--kind", "file"], check=True)
        self.assertIn("train.bin file 128.0 KiB, bytes ", p.stdout)  # ranges, not the whole file
        self.assertIn("batch window (--window 2) written at exit", self.rec.stderr)

    def test_without_data_inside_the_window(self):
        with Moved(self.data):
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "step=%d" % (ITERS - 1)])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("jumping to the snapshot of step", p.stderr)
        self.assertRegex(p.stderr, r"[1-3] of %d recorded steps verified bit-exact" % ITERS)
        self.assertIn("served 1 path(s) from the trace", p.stderr)

    def test_without_data_from_the_start(self):
        # Outside the window too: the token windows each step used are in the trace.
        with Moved(self.data):
            p = run([tool("dlreplay"), self.trace, "--without-data", "--from", "start", "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d of %d recorded steps verified bit-exact" % (ITERS, ITERS), p.stderr)
        self.assertEqual(p.stdout.count("iter "), ITERS)

    def test_with_data_everything(self):
        p = run([tool("dlreplay"), self.trace, "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d of %d recorded steps verified bit-exact" % (ITERS, ITERS), p.stderr)


class IterableDatasetTest(unittest.TestCase):
    STEPS = 10

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dlrr-bounded-it-")
        cls.data = os.path.join(cls.tmp, "shards")
        job = os.path.join(JOBS, "iterable_job.py")
        run([PY, job, cls.data, "make"], check=True)
        cls.trace = os.path.join(cls.tmp, "t")
        cls.rec = run([tool("dlrecord"), "--window", "2", "-o", cls.trace, "--", PY, job, cls.data, str(cls.STEPS)])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.rec.returncode, 0, self.rec.stderr)

    def test_kept_by_value_and_said(self):
        said = "loader 0: batches kept by value in the bounded trace: an IterableDataset"
        self.assertIn(said, self.rec.stderr)
        info = run([tool("dltrace"), "info", self.trace], check=True).stdout
        self.assertIn(said, info)
        self.assertNotIn("without it only steps", info)  # no step needs the data
        batches = run([tool("dltrace"), "events", self.trace, "--kind", "batch", "--json"], check=True).stdout
        self.assertEqual(batches.count('"kind":"batch"'), self.STEPS)
        self.assertNotIn('"byReference":true', batches)

    def test_without_data_inside_the_window(self):
        with Moved(self.data):
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "step=%d" % (self.STEPS - 1)])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("jumping to the snapshot of step", p.stderr)
        self.assertIn("reached step=%d" % (self.STEPS - 1), p.stderr)

    def test_without_data_from_the_start(self):
        with Moved(self.data):
            p = run([tool("dlreplay"), self.trace, "--without-data", "--from", "start", "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d of %d recorded steps verified bit-exact" % (self.STEPS, self.STEPS), p.stderr)

    def test_with_data_everything(self):
        p = run([tool("dlreplay"), self.trace, "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("%d of %d recorded steps verified bit-exact" % (self.STEPS, self.STEPS), p.stderr)


if __name__ == "__main__":
    unittest.main()
