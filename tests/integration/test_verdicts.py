"""Verdicts decided only from what the replay computed (issue 28 items 1, 2 and 6; issue 27
item 5): `--check` and `--until nan|crash` against replays made to differ on purpose, and true
counts on traces that end early."""
import json
import os
import signal
import subprocess
import time
import unittest

from harness import PY, TraceTestCase, children, info, run, steps as steps_of, tool

HERE = os.path.dirname(os.path.abspath(__file__))
VERDICT_JOB = os.path.join(HERE, "jobs", "verdict_job.py")
MEMMAP_LM = os.path.join(HERE, "jobs", "memmap_lm.py")
IGNITE_LIKE = os.path.join(HERE, "jobs", "ignite_like.py")
HOGWILD = os.path.join(HERE, "jobs", "hogwild.py")


def replay(trace, *args, **kw):
    p = run([tool("dlreplay"), trace, "--json"] + list(args), **kw)
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    return p, (json.loads(last) if last.startswith("{") else None)


class CheckDecidesFromComputedValuesTest(TraceTestCase):
    def record(self, mode, code=0):
        trace = self.trace_path()
        p = run([tool("dlrecord"), "-o", trace, "--snapshot-every", "off", "--", PY, VERDICT_JOB, mode], cwd=self.tmp)
        self.assertEqual(p.returncode, code, p.stderr)
        return trace

    def differ_on_purpose(self):
        open(os.path.join(self.tmp, "fixed.flag"), "w").close()

    def check_non_finite_made_finite(self, mode, stop_text):
        trace = self.record(mode)
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("deterministic: reproduced at step 3", p.stderr)
        self.assertIn(stop_text, p.stderr)
        self.differ_on_purpose()
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 13, p.stderr)
        self.assertIn("not reproduced", p.stderr)
        self.assertNotIn("deterministic: reproduced", p.stderr)
        p, doc = replay(trace, "--until", "nan")
        self.assertEqual(p.returncode, 11, p.stderr)
        self.assertEqual(doc["outcome"], "divergence", doc)
        self.assertIn("diverged at step 3", doc["message"])

    def test_a_module_output_computed_finite_is_not_reproduced(self):
        # The old verdict stopped in the module's pre-hook: "reproduced" before computing it.
        self.check_non_finite_made_finite("module", "its output, computed by this replay, is non-finite")

    def test_a_loss_computed_finite_is_not_reproduced(self):
        self.check_non_finite_made_finite("loss", "before backward() of step 3")

    def test_the_verdict_starts_its_own_line_after_a_progress_bar(self):
        # A stop ends the job where tqdm's bar ("\r...") has no newline yet (issue 28 item 10).
        trace = self.trace_path()
        p = run([tool("dlrecord"), "-o", trace, "--", PY, VERDICT_JOB, "module", "--progress"], cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        bar = [l for l in p.stderr.split("\n") if "training " in l]
        self.assertTrue(bar, p.stderr)
        self.assertFalse(any("dlreplay" in l for l in bar), p.stderr)
        # A job that ends there too: dlreplay's verdict comes after it exits.
        p = run([tool("dlreplay"), trace, "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stderr)
        bar = [l for l in p.stderr.split("\n") if "training " in l]
        self.assertTrue(bar, p.stderr)
        self.assertFalse(any("dlreplay" in l for l in bar), p.stderr)

    def test_a_checkpoint_crash_fixed_in_a_loop_without_dataloader_is_not_reproduced(self):
        trace = self.record("ckpt", code=1)
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("deterministic: reproduced", p.stderr)
        os.mkdir(os.path.join(self.tmp, "ckpt"))  # the save succeeds: the job goes on to step 4
        p, doc = replay(trace, "--until", "crash")
        self.assertEqual(p.returncode, 10, p.stderr)
        self.assertIn("ran past the end of the recording", doc["message"])
        self.assertEqual(doc["verified_steps"], 4)  # never a step the trace does not hold
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 13, p.stderr)
        self.assertNotIn("deterministic: reproduced", p.stderr)

    def test_racing_trainers_are_never_called_a_deterministic_kind(self):
        trace = self.trace_path()
        p = run([tool("dlrecord"), "-o", trace, "--", PY, HOGWILD, "--nan-at", "5"])
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("reproduced at step 5", p.stderr)
        self.assertNotIn("deterministic: reproduced", p.stderr)
        # The triage line no longer says "a deterministic kind ... replay reproduces it bit for bit".
        self.assertIn("determinism cannot be claimed for this job", p.stderr)
        self.assertNotIn("a deterministic kind", p.stderr)

    def test_an_evaluation_crash_fixed_before_the_replay_is_not_reproduced(self):
        trace = self.record("save", code=1)
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("deterministic: reproduced", p.stderr)
        self.assertIn("FileNotFoundError", p.stderr)
        # mkdir results: the save succeeds and the job asks for the next epoch's first batch,
        # which the recording never loaded. That is the end of the trace, not the crash.
        os.mkdir(os.path.join(self.tmp, "results"))
        p, doc = replay(trace, "--until", "crash")
        self.assertEqual(p.returncode, 10, p.stderr)
        self.assertIn("ran past the end of the recording", doc["message"])
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 13, p.stderr)
        self.assertIn("not reproduced", p.stderr)
        self.assertNotIn("deterministic: reproduced", p.stderr)


def record_until_killed(trace, data, sig, after_iter=20, timeout=120):
    """Records memmap_lm.py (no DataLoader, runs practically forever) and sends `sig` to the job
    once it printed "iter after_iter": a kill -9, or the SIGTERM of a timeout."""
    p = subprocess.Popen([tool("dlrecord"), "-q", "-o", trace, "--", PY, MEMMAP_LM, data], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        for line in p.stdout:
            if line.startswith("iter %d " % after_iter) or time.monotonic() > deadline:
                break
        job = children(p.pid)
        assert job, "the job ended before it could be killed"
        os.kill(job[0], sig)
        p.stdout.read()
        p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


class CutTraceCountsTest(TraceTestCase):
    """A replay past the end of a cut trace stops there, counts only the steps the trace holds,
    and says where the trace ends and why (exit 14)."""

    def check_cut(self, sig, why):
        trace = self.trace_path()
        record_until_killed(trace, os.path.join(self.tmp, "data"), sig)
        recorded = info(trace)["steps"]
        self.assertGreaterEqual(recorded, 21)
        p, doc = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 14, p.stderr)
        self.assertEqual(doc["outcome"], "trace-cut")
        self.assertEqual(doc["verified_steps"], recorded)  # never more than the trace holds
        self.assertEqual(doc["recorded_steps"], recorded)
        self.assertIn("the trace was cut short (%s" % why, doc["message"])
        self.assertIn("step %d is not in the recording" % recorded, doc["message"])
        # The replayed job stopped there: it printed no iteration the recording did not.
        iters = [l for l in p.stdout.splitlines() if l.startswith("iter ")]
        self.assertLessEqual(len(iters), recorded + 1)
        # A target past the end is refused up front; --check of a trace without failure too.
        p = run([tool("dlreplay"), trace, "--until", "step=%d" % (recorded + 5)])
        self.assertEqual(p.returncode, 7, p.stderr)

    def test_a_loop_without_dataloader_killed_by_sigkill(self):
        self.check_cut(signal.SIGKILL, "the recorded job was killed by signal 9")

    def test_a_loop_without_dataloader_killed_by_a_timeout(self):
        self.check_cut(signal.SIGTERM, "the recorded job was killed by signal 15")

    @unittest.skipUnless(os.geteuid() == 0, "mounts a small tmpfs to fill")
    def test_a_trace_cut_by_a_full_disk(self):
        small = os.path.join(self.tmp, "small")
        os.mkdir(small)
        if run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", small]).returncode != 0:
            self.skipTest("cannot mount a tmpfs here")
        try:
            trace = os.path.join(small, "t.trace")
            p = run([tool("dlrecord"), "-o", trace, "--", PY, MEMMAP_LM, os.path.join(self.tmp, "data"),
                     "--iters", "300"])
            self.assertEqual(p.returncode, 0, p.stderr)  # the job is unharmed
            self.assertIn("No space left on device", p.stderr)
            recorded = info(trace)["steps"]
            self.assertLess(recorded, 300)
            p, doc = replay(trace, "--until", "end")
            self.assertEqual(p.returncode, 14, p.stderr)
            self.assertEqual(doc["verified_steps"], recorded)
            self.assertIn("the trace was cut short (recording stopped: No space left on device", doc["message"])
        finally:
            run(["umount", small])


class TrainingAndEvaluationOnOneLoaderTest(TraceTestCase):
    """ignite's evaluator.run(train_loader) at each epoch's end (issue 28 item 3): steps are
    training updates wherever the batch came from."""

    def test_every_training_update_is_a_step(self):
        trace = self.trace_path()
        p = run([tool("dlrecord"), "-o", trace, "--", PY, IGNITE_LIKE, "--epochs", "3"], check=True)
        updates = [l for l in p.stdout.splitlines() if l.startswith("iteration ")]
        self.assertEqual(len(updates), 12)
        doc = info(trace)
        self.assertEqual(doc["steps"], 12)  # was 4: the loader counted as evaluation for good
        # One batch of each evaluation pass was drawn with gradients enabled: untrained, not a step.
        self.assertEqual(doc["untrained_steps"], 4)
        trained = [s for s in steps_of(trace) if not s.get("untrained")]
        self.assertEqual(len(trained), 12)
        self.assertTrue(all(s["loss"] is not None for s in trained))
        p, rep = replay(trace, "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["verified_steps"], rep["recorded_steps"])
        # The root module's output is named <root> (as dlreplay names it), never '' (item 10).
        text = run([tool("dltrace"), "events", trace, "--kind", "digest", "--step", "0"], check=True).stdout
        self.assertIn("moduleOutput <root> ", text)
        self.assertNotIn("moduleOutput ''", text)

    def test_a_kept_root_output_is_named_root(self):
        # The tensors kept at a NaN: the root module's was `tensor: moduleOutput ''` (item 10).
        job = os.path.join(self.tmp, "nan_root.py")
        with open(job, "w") as f:
            f.write("import torch\ntorch.manual_seed(0)\nm = torch.nn.Linear(4, 1)\n"
                    "opt = torch.optim.SGD(m.parameters(), lr=0.1)\nfor i in range(4):\n"
                    "    x = torch.randn(8, 4)\n    x[0, 0] = float('nan') if i == 2 else x[0, 0]\n"
                    "    loss = m(x).pow(2).mean(); opt.zero_grad(); loss.backward(); opt.step()\n")
        trace = self.trace_path()
        run([tool("dlrecord"), "-q", "-o", trace, "--", PY, job], check=True)
        text = run([tool("dltrace"), "events", trace, "--kind", "tensor"], check=True).stdout
        self.assertIn("tensor: moduleOutput <root> float32[8,1]", text)
        self.assertNotIn("''", text)


if __name__ == "__main__":
    unittest.main()
