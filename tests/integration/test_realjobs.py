"""Real jobs built on third-party code (torchvision's datasets.MNIST and transforms): module
calls in the data pipeline (Normalize is an nn.Module run inside the DataLoader's fetch with
num_workers=0), metric modules and EMA copies evaluated after optimizer.step must not make
replay report a divergence that is not there (issue 12, item 1); skorch's own training loop."""
import json
import os
import re
import shutil
import tempfile
import unittest

from harness import PY, TraceTestCase, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "tv_mnist.py")
SKORCH = os.path.join(HERE, "jobs", "skorch_fit.py")
HOGWILD = os.path.join(HERE, "jobs", "hogwild.py")
SPIKE = 20  # an infinite LR at this step: its update makes the parameters non-finite


def replay(trace, *args):
    p = run([tool("dlreplay"), trace, "--json"] + list(args))
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    return p, (json.loads(last) if last.startswith("{") else None)


class TorchvisionMnistTest(TraceTestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="dlrr-mnist-")
        run([PY, JOB, "--root", cls.root, "--write", "256"], check=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def record(self, *args):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, JOB, "--root", self.root] + list(args),
                  env={"OMP_NUM_THREADS": "1"})
        self.assertEqual(rec.returncode, 0, rec.stderr)
        return trace, rec

    def check_nan(self, model, *extra):
        trace, rec = self.record("--model", model, "--spike-step", str(SPIKE), *extra)
        self.assertIn("step %d loss nan" % (SPIKE + 1), rec.stdout)
        self.assertNotIn("step %d loss nan" % SPIKE, rec.stdout)
        p, doc = replay(trace, "--until", "nan")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        # Every step before the NaN verified bit-exact: none cried wolf on the transforms.
        self.assertEqual(doc["verified_steps"], SPIKE, p.stderr)
        self.assertEqual(doc["report"]["stop.step"], str(SPIKE))
        self.assertNotIn("diverged", p.stderr)
        return doc

    def test_cnn_replays_to_the_nan(self):
        doc = self.check_nan("cnn")
        self.assertIn("after SGD.step() of step %d" % SPIKE, doc["report"]["stop.where"])
        self.assertIn("param:conv1.weight", doc["report"]["stop.where"])

    def test_rnn_replays_to_the_nan(self):
        doc = self.check_nan("rnn")
        self.assertIn("after SGD.step() of step %d" % SPIKE, doc["report"]["stop.where"])
        self.assertIn("param:rnn.weight_ih_l0", doc["report"]["stop.where"])

    def test_ema_and_metric_modules_replay_to_the_nan(self):
        doc = self.check_nan("cnn", "--ema", "--metric")
        self.assertIn("param:conv1.weight", doc["report"]["stop.where"])

    def test_ema_and_metric_job_replays_to_the_end(self):
        trace, rec = self.record("--model", "cnn", "--ema", "--metric")
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("diverged", p.stderr)
        self.assertEqual(doc["verified_steps"], 32, p.stderr)
        # The job's own output (losses, EMA losses, accuracies) is the recording's.
        self.assertTrue(p.stdout.startswith(rec.stdout.rsplit("\n", 2)[0]), p.stdout[:400])


class SkorchTest(TraceTestCase):
    def setUp(self):
        super().setUp()
        if run([PY, "-c", "import skorch"]).returncode != 0:
            self.skipTest("python3-skorch is not installed here (scripts/setup.sh installs it on Debian 12; "
                          "the torch 2.6 chroot does not have it)")

    def test_fit_replays_to_the_end_bit_exact(self):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, SKORCH], env={"OMP_NUM_THREADS": "1"})
        self.assertEqual(rec.returncode, 0, rec.stderr)
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        m = re.search(r"(\d+) steps(?: \(\+(\d+) untrained\))?", rec.stderr)
        trained, untrained = int(m.group(1)), int(m.group(2) or 0)
        self.assertGreaterEqual(trained, 30)  # 3 epochs of 10 batches (320 training samples)
        self.assertEqual(doc["verified_steps"], trained + untrained, p.stderr)  # replay verifies both
        # skorch's epoch table and final loss, durations aside, are the recording's.
        strip = lambda out: [l.rsplit(None, 1)[0] for l in out.splitlines() if l.strip()]  # noqa: E731
        self.assertEqual(strip(p.stdout)[:5], strip(rec.stdout)[:5])
        self.assertIn(rec.stdout.splitlines()[-1], p.stdout)


class HogwildForkTest(TraceTestCase):
    """Trainers started with 'fork' (Linux's default): each forked trainer records its own stream
    (its parent's DataLoader workers, forked too, still record nothing), and replay gives the
    stream to the trainer the parent created in the same order."""

    def record(self, *args):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, HOGWILD, "--start", "fork"] + list(args))
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("exit codes [0", rec.stdout)
        return trace, rec

    def trainer_streams(self, trace):
        names = sorted(f[:-4] for f in os.listdir(trace) if f.endswith(".dls") and f.startswith("p"))
        out = []
        for name in names:
            p, doc = replay(trace, "--stream", name, "--until", "end")
            out.append((name, p, doc))
        return out

    def test_each_forked_trainer_is_its_own_stream_and_replays_bit_exact(self):
        trace, rec = self.record("--processes", "2", "--separate")
        trained = []
        for name, p, doc in self.trainer_streams(trace):
            if doc and doc["report"].get("recorded_steps", "0") != "0":  # the stream's own: not the parent's
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(doc["outcome"], "reached", p.stderr)
                self.assertEqual(doc["verified_steps"], 32, p.stderr)
                self.assertNotIn("never attached", p.stderr)
                trained.append(name)
        self.assertEqual(len(trained), 2, rec.stderr)

    def test_dataloader_workers_of_a_forked_trainer_record_nothing(self):
        trace, rec = self.record("--processes", "1", "--workers", "2")
        streams = [f for f in os.listdir(trace) if f.endswith(".dls") and f.startswith("p")]
        self.assertEqual(len(streams), 2, streams)  # the parent and its trainer, no worker
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["verified_steps"], 32, p.stderr)


class HogwildSpawnTest(TraceTestCase):
    """torch.multiprocessing trainers started with 'spawn' (issue 12, item 4): each is its own
    stream; replay gives each stream to the trainer the parent created in the same order
    (DLRR_PROCESS_ID), whatever descriptor numbers multiprocessing passes it this time."""

    def record(self, *args):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, HOGWILD, "--start", "spawn"] + list(args))
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("exit codes [0", rec.stdout)
        return trace

    def test_one_process_replays_bit_exact(self):
        p, doc = replay(self.record("--processes", "1"), "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        self.assertEqual(doc["verified_steps"], 32, p.stderr)

    def test_processes_that_do_not_race_replay_bit_exact(self):
        p, doc = replay(self.record("--processes", "2", "--separate"), "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["verified_steps"], 32, p.stderr)

    @unittest.skip("issue 12 item 4, open: whether two trainers race on the shared model in a given run is "
                   "itself not deterministic (a run without a race replays bit-exact), so this cannot be "
                   "asserted from one run (the stream a trainer claims is now fixed by its identity)")
    def test_racy_shared_model_updates_are_a_divergence_naming_step_and_process(self):
        trace = self.record("--processes", "2")
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 11, p.stderr)
        self.assertEqual(doc["outcome"], "divergence", p.stderr)
        self.assertRegex(p.stderr, r"replaying stream p\d+ to end")
        self.assertRegex(doc["message"], r"^diverged at step \d+: ")
        self.assertEqual(doc["report"]["stop.step"], doc["report"]["divergence.step"])
        self.assertLess(doc["verified_steps"], doc["recorded_steps"])
        self.assertNotIn("never attached", p.stderr)


if __name__ == "__main__":
    unittest.main()
