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

from harness import PY, TraceTestCase, events, info, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "tv_mnist.py")
SKORCH = os.path.join(HERE, "jobs", "skorch_fit.py")
HOGWILD = os.path.join(HERE, "jobs", "hogwild.py")
WARMUP = os.path.join(HERE, "jobs", "warmup_forward.py")
SPECTROGRAM = os.path.join(HERE, "jobs", "spectrogram_frontend.py")
TWO_OPTIMIZERS = os.path.join(HERE, "jobs", "two_optimizers.py")
CLIP = os.path.join(HERE, "jobs", "clip_nonfinite.py")
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
        self.assertEqual(doc["report"]["stop.step"], SPIKE)
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


class WarmupForwardTest(TraceTestCase):
    """A forward before the optimizer exists (LazyLinear materialised, torch.jit.trace's runs) is
    part of the job's first iteration: dlrr's steps are the loop's iterations, not one more."""

    def record(self, *args):
        trace = self.trace_path()
        plain = run([PY, WARMUP] + list(args))
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, WARMUP] + list(args))
        self.assertEqual(rec.returncode, 0, rec.stderr)
        job_stderr = "".join(l for l in rec.stderr.splitlines(True) if not l.startswith("dlrecord: "))
        self.assertEqual((rec.stdout, job_stderr), (plain.stdout, plain.stderr))
        return trace, rec

    def test_steps_are_the_loops_iterations_and_replay_bit_exact(self):
        trace, _ = self.record("--steps", "4")
        self.assertEqual(info(trace)["steps"], 4)
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["verified_steps"], 4, p.stderr)
        self.assertNotIn("TracerWarning", p.stderr)  # the hook's own ops are not traced as the job's

    def test_the_nan_is_at_the_loops_step(self):
        trace, rec = self.record("--spike-step", "3")
        self.assertIn("step 3 loss 1.", rec.stdout)
        self.assertIn("step 4 loss nan", rec.stdout)
        failure = info(trace)["failure"]
        self.assertEqual((failure["step"], failure["where"]), (4, "Net.mlp"), failure)
        p, doc = replay(trace, "--until", "nan")
        self.assertEqual((p.returncode, doc["outcome"]), (0, "reached"), p.stderr)
        self.assertEqual((doc["verified_steps"], doc["report"]["stop.step"]), (4, 4), p.stderr)
        self.assertIn("Net.mlp", doc["report"]["stop.where"])


class TwoOptimizersTest(TraceTestCase):
    """A sparse and a dense optimizer stepping after one backward() (DLRM): one step per loop
    iteration, not one per optimizer.step(). The dense update is training work of the step
    after its backward's (steps end at the first update after a backward), so the last
    iteration's dense update is a step of its own: 6 iterations, 7 steps."""

    def test_steps_are_the_loops_iterations_and_the_inf_is_at_its_step(self):
        trace = self.trace_path()
        plain = run([PY, TWO_OPTIMIZERS, "--inf-at", "3"])
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, TWO_OPTIMIZERS, "--inf-at", "3"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertEqual(rec.stdout, plain.stdout)
        self.assertIn("step 3 loss inf", rec.stdout)
        doc = info(trace)
        self.assertEqual(doc["steps"], 7, doc)
        self.assertEqual(doc["failure"]["step"], 3, doc["failure"])
        p, rep = replay(trace, "--until", "nan")
        self.assertEqual((p.returncode, rep["outcome"]), (0, "reached"), p.stderr)
        self.assertEqual((rep["verified_steps"], rep["report"]["stop.step"]), (3, 3), p.stderr)
        p, rep = replay(trace, "--until", "end")
        self.assertEqual((p.returncode, rep["outcome"]), (0, "reached"), p.stderr)
        self.assertEqual(rep["verified_steps"], 7, p.stderr)


class ComplexOutputTest(TraceTestCase):
    def test_an_inf_in_a_complex_spectrogram_is_the_first_non_finite_value(self):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, SPECTROGRAM, "--inf-at", "2"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        failure = info(trace)["failure"]
        # Not the mel projection after it: the stft's complex output is where the Inf shows first.
        self.assertEqual((failure["step"], failure["where"]), (2, "spec"), failure)
        p, doc = replay(trace, "--until", "nan")
        self.assertEqual((p.returncode, doc["outcome"], doc["verified_steps"]), (0, "reached", 2), p.stderr)
        self.assertIn("at module spec (call 0) of step 2", doc["report"]["stop.where"])
        # replay counts the complex output's parts as the recording did
        counts = re.match(r"(\d+) NaN, (\d+) Inf in output of spec$", failure["message"]).groups()
        self.assertIn("(%s NaN, %s Inf)" % counts, doc["report"]["stop.where"])


class NanThenExceptionTest(TraceTestCase):
    """A NaN the job turns into an exception (clip_grad_norm_(error_if_nonfinite=True)): the
    trace's first failure is the NaN, the process ended with the exception."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="dlrr-clip-")
        cls.trace = os.path.join(cls.dir, "t")
        cls.rec = run([tool("dlrecord"), "-o", cls.trace, "--", PY, CLIP, "--nan-at", "2"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_recorded_as_the_nan_first(self):
        self.assertEqual(self.rec.returncode, 1, self.rec.stderr)
        self.assertIn("RuntimeError: The total norm", self.rec.stderr)
        failure = info(self.trace)["failure"]
        self.assertEqual((failure["kind"], failure["step"]), ("nonfinite", 2), failure)

    def test_replay_to_the_end_ends_as_the_recording_did(self):
        p, doc = replay(self.trace, "--until", "end")
        self.assertEqual((p.returncode, doc["outcome"]), (0, "reached"), p.stderr)
        self.assertNotIn("diverged", p.stderr)
        self.assertEqual(doc["verified_steps"], 3, p.stderr)

    def test_until_crash_reproduces_the_exception(self):
        p, doc = replay(self.trace, "--until", "crash")
        self.assertEqual((p.returncode, doc["outcome"]), (0, "reached"), p.stderr)
        self.assertEqual((doc["message"], doc["report"]["stop.step"]), ("reached crash", 2), p.stderr)

    def test_until_nan_stops_at_the_nan(self):
        p, doc = replay(self.trace, "--until", "nan")
        self.assertEqual((p.returncode, doc["outcome"], doc["report"]["stop.step"]), (0, "reached", 2), p.stderr)


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
            if doc and doc["report"].get("recorded_steps", 0) != 0:  # the stream's own: not the parent's
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(doc["outcome"], "reached", p.stderr)
                self.assertEqual(doc["verified_steps"], 32, p.stderr)
                self.assertNotIn("never attached", p.stderr)
                self.assertNotIn("RNG state", p.stderr)  # inherited states restored as it attaches
                trained.append(name)
        self.assertEqual(len(trained), 2, rec.stderr)

    def test_dataloader_workers_of_a_forked_trainer_record_nothing(self):
        trace, rec = self.record("--processes", "1", "--workers", "2")
        streams = [f for f in os.listdir(trace) if f.endswith(".dls") and f.startswith("p")]
        self.assertEqual(len(streams), 2, streams)  # the parent and its trainer, no worker
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["verified_steps"], 32, p.stderr)


class HogwildOsForkTest(TraceTestCase):
    """Trainers started with plain os.fork() (no multiprocessing; issue 12 item 4): the hook
    names each child by its parent's fork order ("fork1", "fork2"), so each records its own
    stream, the parent's Fork events say so (durably: committed at the fork), and replay gives
    each stream to the child forked in the same order."""

    def record(self, *args):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, HOGWILD, "--start", "os-fork"] + list(args))
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("exit codes [0", rec.stdout)
        return trace, rec

    def forks(self, trace):
        return [e["event"]["fork"] for e in events(trace, kind="fork")]

    def test_each_forked_trainer_is_its_own_stream_and_replays_bit_exact(self):
        trace, rec = self.record("--processes", "2", "--separate")
        forks = self.forks(trace)
        self.assertEqual([(f["kind"], f["childIdentity"]) for f in forks], [("recorded", "fork1"), ("recorded", "fork2")])
        doc = info(trace)
        names = {p["stream"] for p in doc["processes"] if p["role"] == "process"}
        for f in forks:
            self.assertIn(f["childStream"], names)  # the child's own stream, named by its parent
            p, rep = replay(trace, "--stream", f["childStream"], "--until", "end")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(rep["outcome"], "reached", p.stderr)
            self.assertEqual((rep["verified_steps"], rep["recorded_steps"]), (32, 32), p.stderr)
            self.assertNotIn("never attached", p.stderr)
            # Issue 12.4 (c): the generator states the trainer inherited are restored as it
            # attaches, so nothing differs at its first batch.
            self.assertNotIn("RNG state", p.stderr)
        # Two trainers, each with its own model (no parameter in shared memory): no race, no caveat.
        self.assertEqual(sorted(doc["concurrency"]["trainers"]), sorted(f["childStream"] for f in forks))
        self.assertEqual(doc["concurrency"]["determinism"], "", doc)
        self.assertNotIn("cannot be claimed", p.stderr)

    def test_trainers_sharing_a_model_make_determinism_unclaimable(self):
        # Issue 12.4 (b), 18.2: said once, plainly, by dltrace info, dlreplay and dltrace triage,
        # whichever way the race went in this recording (one replay may verify bit-exact).
        trace, rec = self.record("--processes", "2")
        doc = info(trace)
        want = ("determinism cannot be claimed: 2 processes trained at once without torch.distributed (%s), 2 of "
                "them updating parameters in shared memory (Hogwild, model.share_memory()): their updates race, "
                "so a replay of one of them can verify bit-exact while the recording raced"
                % ", ".join(doc["concurrency"]["trainers"]))
        self.assertEqual(doc["concurrency"]["determinism"], want)
        text = run([tool("dltrace"), "info", trace], check=True).stdout
        self.assertEqual(text.count("determinism cannot be claimed"), 1, text)
        self.assertIn("determinism " + want, text)
        p, rep = replay(trace, "--stream", self.forks(trace)[0]["childStream"], "--until", "end")
        self.assertIn(rep["outcome"], ("reached", "divergence"), p.stderr)  # which one is the scheduler's
        self.assertEqual(rep["determinism"], want)
        self.assertEqual(p.stderr.count("cannot be claimed"), 1, p.stderr)
        self.assertIn("dlreplay: note: " + want, p.stderr)

    def test_replaying_the_parent_counts_its_own_steps(self):
        # Issue 12.4 (d): the parent trained nothing; its replay is measured against its own
        # stream (0 steps), not against the trainer that trained most.
        trace, rec = self.record("--processes", "1")
        parent = [f for f in os.listdir(trace) if f.startswith("p")]
        forks = self.forks(trace)
        self.assertEqual(len(forks), 1)
        parent = [n[:-4] for n in parent if n[:-4] != forks[0]["childStream"]]
        self.assertEqual(len(parent), 1, parent)
        p, rep = replay(trace, "--stream", parent[0], "--until", "end")
        self.assertEqual(rep["recorded_steps"], 0, p.stderr)
        self.assertEqual((rep["outcome"], rep["verified_steps"]), ("reached", 0), p.stderr)
        # One trainer: nothing raced, nothing unrecorded.
        self.assertEqual(rep["determinism"], "", p.stderr)
        self.assertNotIn("cannot be claimed", p.stderr)

    def test_the_parents_fork_event_survives_its_kill_9(self):
        # The parent writes nothing else: the Fork event is durable because it is committed at
        # the fork, not at a step end that never comes.
        code = ("import os, signal, time, torch\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    torch.manual_seed(0)\n"
                "    time.sleep(60)\n"
                "    os._exit(0)\n"
                "time.sleep(0.5)\n"
                "os.kill(pid, signal.SIGKILL)\n"
                "os.kill(os.getpid(), signal.SIGKILL)\n")
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, "-c", code])
        self.assertEqual(rec.returncode, 128 + 9, rec.stderr)
        forks = self.forks(trace)
        self.assertEqual([(f["kind"], f["childIdentity"]) for f in forks], [("recorded", "fork1")], forks)


class UnrecordedProcessTest(TraceTestCase):
    """A process forked by native code (here libc's fork() through ctypes, as a C extension
    would) runs no Python at-fork callback, so it cannot be named and is not recorded: the
    trace says so, and neither dltrace nor dlreplay claims determinism (issues 12.4, 18.2)."""

    CODE = ("import ctypes, os, sys, torch\n"
            "pid = ctypes.CDLL(None).fork()\n"
            "if pid == 0:\n"
            "    torch.rand(3)\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n"
            "print('child', pid, flush=True)\n"
            "sys.exit(3)\n")

    def test_a_native_fork_is_said_to_be_unrecorded(self):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, "-c", self.CODE])
        self.assertEqual(rec.returncode, 3, rec.stderr)
        child = int(rec.stdout.split()[1])
        forks = [e["event"]["fork"] for e in events(trace, kind="fork")]
        self.assertEqual([(f["kind"], f["childPid"]) for f in forks], [("native", child)])
        doc = info(trace)
        self.assertEqual([u["pid"] for u in doc["concurrency"]["unrecorded"]], [child])
        self.assertEqual(doc["concurrency"]["determinism"],
                         "determinism cannot be claimed: 1 process of the job ran unrecorded (pid %d forked by "
                         "native code, not through Python's os.fork in %s): what it did is not in the trace"
                         % (child, doc["concurrency"]["unrecorded"][0]["parent_stream"]))
        tri = run([tool("dltrace"), "triage", trace]).stdout
        self.assertIn("not known, and cannot be claimed: 1 process of the job ran unrecorded (pid %d" % child, tri)


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

    @unittest.skip("chance, not a defect: whether two trainers' updates of the shared model interleave in a "
                   "given run is up to the scheduler (a run where they did not replays bit-exact, one where "
                   "they did diverges), so one run cannot assert either outcome; what is certain is said "
                   "instead: dltrace info and dlreplay note that determinism cannot be claimed "
                   "(HogwildOsForkTest checks it)")
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
