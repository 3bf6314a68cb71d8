"""`dlreplay --what-if`: recorded failures (jobs/explain_job.py) replayed with one change each,
one that prevents the failure and one that does not, with the loss curve beside the recorded one."""
import json
import os
import shutil
import tempfile
import unittest

from harness import PY, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "explain_job.py")
AT = 4
RECURRED = 15


class WhatIfTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dlrr-whatif-")
        cls.traces = {}
        for fault in ("optimizer", "sample", "scale", "rnn", "amp", "half"):
            path = os.path.join(cls.dir, fault + ".trace")
            p = run([tool("dlrecord"), "-o", path, "--", PY, JOB, fault], env={"OMP_NUM_THREADS": "1"})
            assert p.returncode == 0, p.stderr
            cls.traces[fault] = path

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def what_if(self, fault, change, *args):
        p = run([tool("dlreplay"), self.traces[fault], "--json", "--what-if", change] + list(args))
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        self.assertEqual(p.returncode, doc["exit_code"], p.stderr)
        self.assertEqual(doc["verified_steps"], AT, p.stderr)  # verified up to the change
        self.assertNotIn("divergence", doc["report"])  # the change is not a divergence of the trace
        return p.returncode, doc

    def prevented(self, fault, change, *args):
        rc, doc = self.what_if(fault, change, *args)
        self.assertEqual((rc, doc["outcome"]), (0, "prevented"), doc)
        self.assertTrue(doc["what_if"]["verdict"].startswith("did not recur: steps %d-" % AT), doc)
        return doc

    def recurred(self, fault, change, *args):
        rc, doc = self.what_if(fault, change, *args)
        self.assertEqual((rc, doc["outcome"]), (RECURRED, "recurred"), doc)
        self.assertTrue(doc["what_if"]["verdict"].startswith("recurred at step %d: " % AT), doc)
        return doc

    def test_drop_sample(self):
        doc = self.prevented("sample", "drop-sample=%d" % (8 * AT + 5), "--steps", "2")
        self.assertIn("1 sample(s) of dataset index %d left out" % (8 * AT + 5), doc["what_if"]["change"])
        # The loss curve: recorded NaN beside the replayed finite loss.
        self.assertRegex(doc["what_if"]["losses"], r"^step 4: nan -> [0-9.]+\nstep 5: nan -> [0-9.]+$")
        doc = self.recurred("sample", "drop-sample=%d" % (8 * AT + 4), "--steps", "2")  # its neighbour
        self.assertIn("module output fc1 not finite", doc["what_if"]["verdict"])

    def test_from_the_failure_snapshot(self):
        # A jump to the failing step's snapshot changes the same step the same way.
        change = "drop-sample=%d" % (8 * AT + 5)
        _, full = self.what_if("sample", change, "--steps", "2")
        p = run([tool("dlreplay"), self.traces["sample"], "--json", "--what-if", change, "--steps", "2",
                 "--from", "snapshot"])
        self.assertEqual(p.returncode, 0, p.stderr)
        jumped = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        self.assertEqual((jumped["report"]["jump.step"], jumped["verified_steps"]), (AT, 0))
        self.assertEqual(jumped["what_if"]["losses"], full["what_if"]["losses"])
        # The explanation too, from the snapshot.
        p = run([tool("dlreplay"), self.traces["sample"], "--json", "--from", "snapshot"])
        rep = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])["report"]
        self.assertTrue(rep["explain.op"].startswith("aten::addmm in forward (module fc1)"), rep)

    def test_skip_step(self):
        self.prevented("optimizer", "skip-step", "--steps", "1")
        doc = self.recurred("scale", "skip-step")  # the NaN comes in the forward, before any update
        self.assertIn("module output fc1 not finite", doc["what_if"]["verdict"])

    def test_lr_scale(self):
        doc = self.prevented("optimizer", "lr-scale=1e-40")
        self.assertIn("step 6: nan -> ", doc["what_if"]["losses"])  # to the end of the recording
        doc = self.recurred("optimizer", "lr-scale=0.5", "--steps", "1")
        self.assertIn("parameter fc1.weight not finite", doc["what_if"]["verdict"])

    def test_clip_grad(self):
        self.prevented("optimizer", "clip-grad=1e-30", "--steps", "1")
        doc = self.recurred("rnn", "clip-grad=1.0", "--steps", "1")  # a NaN gradient stays NaN when clipped
        self.assertIn("gradient", doc["what_if"]["verdict"])

    def test_fp32(self):
        self.prevented("amp", "fp32")
        self.recurred("half", "fp32", "--steps", "1")  # .half() is the job's own cast, not autocast

    def test_anomaly_names_the_backward_function_and_never_prevents(self):
        doc = self.recurred("rnn", "anomaly")
        self.assertIn("the job raised RuntimeError: Function 'MmBackward0' returned nan values",
                      doc["what_if"]["verdict"])

    def test_usage(self):
        for args in (["--what-if", "lr-scale=x"], ["--what-if", "teleport"], ["--steps", "3"],
                     ["--what-if", "fp32", "--check"], ["--what-if", "fp32", "--steps", "0"]):
            p = run([tool("dlreplay"), self.traces["amp"]] + args)
            self.assertEqual(p.returncode, 2, (args, p.stderr))


if __name__ == "__main__":
    unittest.main()
