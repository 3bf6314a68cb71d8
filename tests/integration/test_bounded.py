"""Bounded traces (docs/recording.md, "Batches by reference"; docs/replay.md, "Bounded
traces"): a torchvision ImageFolder job with random augmentation in 2 workers, recorded with
`dlrecord --window 2`; replayed with the dataset present (every batch re-made and checked),
without it inside the window (served from the trace) and outside it (refused with the map),
and with one image changed (named as the divergence)."""
import os
import shutil
import signal
import subprocess
import tempfile
import unittest

from harness import PY, ROOT, run, tool

JOB = os.path.join(ROOT, "tests", "integration", "jobs", "imagefolder_job.py")
STEPS = 8


def make_images(root):
    from PIL import Image
    import random
    rnd = random.Random(7)
    for cls in ("a", "b"):
        os.makedirs(os.path.join(root, cls))
        for i in range(6):
            img = Image.new("RGB", (24, 24))
            img.putdata([(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)) for _ in range(24 * 24)])
            img.save(os.path.join(root, cls, "%d.png" % i))


class BoundedTraceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dlrr-bounded-")
        cls.data = os.path.join(cls.tmp, "images")
        make_images(cls.data)
        cls.trace = os.path.join(cls.tmp, "t")
        cls.rec = run([tool("dlrecord"), "--window", "2", "-o", cls.trace, "--", PY, JOB, cls.data, str(STEPS)])
        cls.full = os.path.join(cls.tmp, "full")
        cls.rec_full = run([tool("dlrecord"), "-o", cls.full, "--", PY, JOB, cls.data, str(STEPS)])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertEqual(self.rec.returncode, 0, self.rec.stderr)

    def test_recorded_by_reference_and_smaller(self):
        self.assertIn("batch window (--window 2) written at exit", self.rec.stderr)
        info = run([tool("dltrace"), "info", self.trace], check=True).stdout
        self.assertIn("without it only steps", info)
        size = lambda d: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        self.assertLess(size(self.trace), size(self.full))

    def test_replay_with_data_remakes_every_batch(self):
        p = run([tool("dlreplay"), self.trace, "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("verified", p.stderr)

    def test_without_data_inside_window_and_outside(self):
        moved = self.data + ".moved"
        os.rename(self.data, moved)
        try:
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "step=%d" % (STEPS - 1)])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("jumping to the snapshot of step", p.stderr)
            self.assertIn("1 of %d recorded steps verified bit-exact" % STEPS, p.stderr)
            p = run([tool("dlreplay"), self.trace, "--without-data", "--until", "step=1", "--from", "start"])
            self.assertEqual(p.returncode, 7, p.stdout + p.stderr)  # refused before anything ran
            self.assertIn("not replayable without the dataset: steps 0-1", p.stderr)
            self.assertIn("recorded by reference", p.stderr)
            self.assertIn("without it only steps", p.stderr)
            self.assertNotIn("step 0 loss", p.stdout)  # the job never started
            # Without --without-data the missing dataset is said, not a crash.
            p = run([tool("dlreplay"), self.trace, "--until", "step=1"])
            self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("--without-data", p.stderr)
        finally:
            os.rename(moved, self.data)

    def test_without_data_refuses_a_snapshot_outside_the_window(self):
        # 12 steps, --window 2 and a periodic snapshot every 3 steps: those of steps 3 and 9 are
        # kept in bulk files beside the window's (8, 10). --until step=5 would jump to step 3, whose
        # batches are by reference: refused before running, with the map, rather than replaying
        # step 3 on a fast-forward stand-in batch (which diverged: a false divergence).
        trace = os.path.join(self.tmp, "snapshots")
        rec = run([tool("dlrecord"), "--window", "2", "--snapshot-every", "3steps", "-o", trace, "--", PY, JOB,
                   self.data, "12"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertRegex(run([tool("dltrace"), "info", trace], check=True).stdout, r"\n  3 +periodic ")
        moved = self.data + ".moved"
        os.rename(self.data, moved)
        try:
            p = run([tool("dlreplay"), trace, "--without-data", "--until", "step=5"])
            self.assertEqual(p.returncode, 7, p.stdout + p.stderr)
            self.assertIn("not replayable without the dataset: steps 3-5 (from the snapshot of step 3)", p.stderr)
            self.assertIn("without it only steps 8-11", p.stderr)
            self.assertNotIn("diverge", p.stderr)
            # Inside the window, from its own snapshot: replayed and verified.
            p = run([tool("dlreplay"), trace, "--without-data", "--until", "end", "--from", "step=8"])
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("4 of 12 recorded steps verified bit-exact", p.stderr)
        finally:
            os.rename(moved, self.data)

    def test_changed_image_is_named(self):
        from PIL import Image
        path = os.path.join(self.data, "a", "3.png")
        keep = path + ".orig"
        shutil.copy(path, keep)
        try:
            Image.new("RGB", (24, 24), (255, 0, 0)).save(path)
            p = run([tool("dlreplay"), self.trace, "--until", "end"])
            self.assertEqual(p.returncode, 11, p.stdout + p.stderr)  # a divergence
            self.assertIn("differs from the recording", p.stderr)
            self.assertIn("3.png", p.stderr)
        finally:
            shutil.move(keep, path)

    def test_sigterm_writes_the_window(self):
        trace = os.path.join(self.tmp, "term")
        p = subprocess.Popen([tool("dlrecord"), "--window", "2", "-o", trace, "--", PY, JOB, self.data, str(STEPS),
                              "wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            for line in p.stdout:
                if line.strip() == "ready":
                    break
            p.send_signal(signal.SIGTERM)  # dlrecord forwards it to the job
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)  # the job died of it, as without dlrr
        self.assertIn("written at SIGTERM", err)
        info = run([tool("dltrace"), "info", trace], check=True).stdout
        self.assertIn("without it only steps 4-7", info)


if __name__ == "__main__":
    unittest.main()
