"""torch 2.x features recorded and replayed bit-exactly (issue 19). Skipped on torch 1.x, where
these APIs (fused AdamW on CPU, torch.amp.autocast('cpu', bfloat16) with every op here) are
missing or different; CI runs this module on Debian 13's torch 2.6 (scripts/torch2.sh)."""
import os
import re
import shutil
import unittest

from harness import PY, TraceTestCase, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "torch2_features.py")


def _torch_major():
    p = run([PY, "-c", "import torch; print(torch.__version__.split('.')[0])"], timeout=120)
    return int(p.stdout.strip() or 0)


class FeatureCheck:
    def check(self, feature, steps=8, verified=None):
        trace = self.trace_path(feature + ".trace")
        plain = run([PY, JOB, feature], timeout=300)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, JOB, feature], timeout=300)
        self.assertEqual((rec.returncode, rec.stderr), (0, plain.stderr))
        self.assertEqual(len(rec.stdout.splitlines()), steps)
        rep = run([tool("dlreplay"), trace, "--until", "end"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertEqual(rep.stdout, rec.stdout)  # every loss, bit for bit as printed
        verified = steps if verified is None else verified
        self.assertIn("%d of %d recorded steps verified" % (verified, verified), rep.stderr)
        self.assertNotIn("warning", rep.stderr)  # none: environment (torch version), RNG, batches
        return rep


class BothPlatformsTest(FeatureCheck, TraceTestCase):
    """What torch 1.13 runs too (numpy 1.24 there, 2.2 on trixie)."""

    def test_numpy_array_batches(self):  # numpy arrays and a numpy scalar served back as themselves
        self.check("numpy-batches")

    def test_persistent_workers_two_epochs(self):  # no false "RNG state differed" at the 2nd epoch
        self.check("persistent-workers")


@unittest.skipIf(_torch_major() < 2, "torch 2.x features")
class Torch2FeaturesTest(FeatureCheck, TraceTestCase):

    def test_adamw_foreach(self):
        self.check("adamw-foreach")

    def test_adamw_fused(self):
        self.check("adamw-fused")

    def test_autocast_bf16_on_cpu(self):
        self.check("autocast-bf16")

    def test_scaled_dot_product_attention_with_dropout(self):
        self.check("sdpa")

    def test_numpy2_default_rng_dataset_with_workers(self):
        self.check("numpy-rng")


    def test_torch_compile(self):
        rep = self.check("compile")
        trace = self.trace_path("compile.trace")
        # Only the compiled module's own output is digested: the trace and dlreplay say what is not.
        self.assertIn("unverified: <root> is a torch.compile'd module: its submodules run inside the compiled "
                      "graph, so their outputs are not digested or verified", rep.stderr)
        info = run([tool("dltrace"), "info", trace], timeout=120)
        self.assertEqual(info.stdout.count("<root> is a torch.compile'd module"), 1, info.stdout)  # once, not per step
        env = run([tool("dltrace"), "env", trace], timeout=120)
        self.assertIn("unverified.compiled", env.stdout)
        # Names are the model's own, without torch.compile's _orig_mod.
        events = run([tool("dltrace"), "events", trace, "--step", "0"], timeout=120)
        self.assertEqual(events.returncode, 0, events.stderr)
        self.assertIn("0.weight", events.stdout)
        self.assertNotIn("_orig_mod", events.stdout)

    def test_torch_compile_fresh_then_cold_cache(self):
        # A recording that fills inductor's cache from empty: at replay the cache entries exist,
        # though the recording missed them at first (it created them): no "missing then, there
        # now" warning. Then the cache removed, as on another machine: replay compiles again and
        # inductor loads its .so from where the replay's writes go (the scratch overlay).
        cache = os.path.join(self.tmp, "inductor-cache")
        env = {"TORCHINDUCTOR_CACHE_DIR": cache}
        trace = self.trace_path("compile-fresh.trace")
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, JOB, "compile"], timeout=300, env=env)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertTrue(os.path.isdir(cache))
        env_diff = run([tool("dltrace"), "env-diff", trace], timeout=120)
        self.assertNotIn("inductor-cache", env_diff.stdout + env_diff.stderr)
        for state in ("warm", "cold"):
            if state == "cold":
                shutil.rmtree(cache)
            rep = run([tool("dlreplay"), trace, "--until", "end"], timeout=300)
            self.assertEqual(rep.returncode, 0, state + " cache:\n" + rep.stderr)
            self.assertEqual(rep.stdout, rec.stdout, state)
            self.assertIn("8 of 8 recorded steps verified", rep.stderr, state)
            self.assertNotIn("warning", rep.stderr, state)
        self.assertFalse(os.path.exists(cache))  # the replay's compilation went to its scratch overlay

    def test_compiled_forward_until_nan(self):  # NaNs made by compiled kernels compare by class
        trace = self.trace_path("compile-nan.trace")
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, JOB, "compile-nan"], timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("step 5 loss nan", rec.stdout)
        rep = run([tool("dlreplay"), trace, "--until", "nan"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)  # no false divergence at the NaN
        self.assertIn("dlreplay: reached nan", rep.stderr)
        self.assertIn("dlreplay:   step: 5\n", rep.stderr)
        # the compiled function's module calls run in the graph: said, not silently unverified
        self.assertIn("unverified: forward_loss is a torch.compile'd function: modules called inside it run in "
                      "the compiled graph", rep.stderr)
        end = run([tool("dlreplay"), trace, "--until", "end"], timeout=300)
        self.assertEqual(end.returncode, 0, end.stderr)
        self.assertEqual(end.stdout, rec.stdout)

    def test_jump_replay_of_a_compiled_model_and_none_for_a_compiled_step(self):
        # A compiled module's forward is seen (its output digested): snapshots hold it and the
        # replay jumps. A model called only inside a compiled function is never seen: no
        # snapshot, and the trace says why rather than leaving --snapshot-every unexplained.
        trace = self.trace_path("jump-compile.trace")
        rec = run([tool("dlrecord"), "-q", "--snapshot-every", "2steps", "-o", trace, "--", PY, JOB, "compile"],
                  timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        rep = run([tool("dlreplay"), trace, "--until", "end", "--from", "step=4"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertIn("replayed to the end; 4 of 8 recorded steps verified bit-exact (jumped to step 4", rep.stderr)
        self.assertEqual(rep.stdout.splitlines()[4:], rec.stdout.splitlines()[4:])  # fast-forwarded steps print stand-ins
        trace = self.trace_path("jump-compile-step.trace")
        rec = run([tool("dlrecord"), "-q", "--snapshot-every", "2steps", "-o", trace, "--", PY, JOB,
                   "compile-step-nan"], timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        info = run([tool("dltrace"), "info", trace], timeout=120).stdout
        self.assertIn("no snapshot at step 2: no module with parameters or buffers ran a forward outside "
                      "torch.compile'd code", info)
        self.assertEqual(info.count("no snapshot at step"), 1)
        rep = run([tool("dlreplay"), trace, "--until", "nan", "--from", "snapshot"], timeout=120)
        self.assertEqual(rep.returncode, 7, rep.stderr)
        self.assertIn("the trace holds no snapshot", rep.stderr)

    def test_compiled_whole_step_until_nan(self):
        # zero_grad, forward, backward() and optimizer.step() in one compiled function: dynamo
        # traces the hook's wrappers; their bookkeeping runs eagerly (graph breaks) and the update
        # stays in the graph, so the weights are the plain job's to the bit.
        plain = run([PY, JOB, "compile-step-nan"], timeout=300)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        trace = self.trace_path("compile-step-nan.trace")
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, JOB, "compile-step-nan"], timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertEqual(rec.stdout, plain.stdout)
        # dynamo's log lines carry a time, a pid and a frame number (the graph breaks add frames)
        log = re.compile(r"^W\d{4} [\d:.]+ \d+ (\S+) \[\d+/\d+\]", re.M)
        self.assertEqual(log.sub(r"W \1 [frame]", rec.stderr), log.sub(r"W \1 [frame]", plain.stderr))
        self.assertIn("step 5 loss nan", rec.stdout)
        info = run([tool("dltrace"), "info", trace], timeout=120)
        self.assertIn("steps       8", info.stdout)
        self.assertIn("first non-finite value at step 5: loss", info.stdout)
        self.assertNotIn("internal error", info.stdout)
        rep = run([tool("dlreplay"), trace, "--until", "nan"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertIn("dlreplay: reached nan; 5 of 8 recorded steps verified bit-exact", rep.stderr)
        self.assertIn("dlreplay:   step: 5\n", rep.stderr)
        self.assertIn("unverified: train_step is a torch.compile'd function", rep.stderr)
        self.assertEqual(rep.stdout, "".join(rec.stdout.splitlines(True)[:5]))
        end = run([tool("dlreplay"), trace, "--until", "end"], timeout=300)
        self.assertEqual(end.returncode, 0, end.stderr)
        self.assertEqual(end.stdout, rec.stdout)

    def test_grad_scaler_job_jumps_past_a_skipped_update(self):
        # torch.amp.GradScaler("cpu"): batch 1's Inf makes the scaler skip that update and halve
        # its scale. A jump replay fast-forwards steps 0-3 (no backward, so no gradients for
        # the scaler's unscale_ to check, which asserts it found some) and restores the
        # scaler's scale from the snapshot (the fast-forward cannot redo the skip): steps 4-7
        # are then the recording's, scaled loss and gradients included.
        job = os.path.join(HERE, "jobs", "amp_scaler.py")
        plain = run([PY, job], timeout=300)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertIn("step 1 loss nan scale 512", plain.stdout)
        trace = self.trace_path("amp-scaler.trace")
        rec = run([tool("dlrecord"), "-q", "--snapshot-every", "2steps", "-o", trace, "--", PY, job], timeout=300)
        self.assertEqual((rec.returncode, rec.stdout, rec.stderr), (0, plain.stdout, plain.stderr))
        rep = run([tool("dlreplay"), trace, "--until", "end", "--from", "step=4"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertIn("replayed to the end; 4 of 8 recorded steps verified bit-exact (jumped to step 4", rep.stderr)
        self.assertEqual(rep.stdout.splitlines()[4:], rec.stdout.splitlines()[4:])
        self.assertNotIn("warning", rep.stderr)

    def test_grad_scaler_skipped_update_still_ends_a_step(self):
        # No DataLoader: steps are counted by the optimizer, and the scaler skips batch 1's
        # optimizer.step(). The iteration still ends a step: 8 iterations are 8 steps, and the
        # NaN is at step 1, as the job counts (not steps 1 and 2 merged, every later one off by one).
        job = os.path.join(HERE, "jobs", "amp_scaler.py")
        trace = self.trace_path("amp-scaler-loop.trace")
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, job, "--loop"], timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("step 1 loss nan scale 512", rec.stdout)
        info = run([tool("dltrace"), "info", trace], timeout=120)
        self.assertIn("steps       8", info.stdout)
        self.assertIn("first non-finite value at step 1:", info.stdout)
        rep = run([tool("dlreplay"), trace, "--until", "nan"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertIn("dlreplay: reached nan; 1 of 8 recorded steps verified bit-exact", rep.stderr)
        self.assertIn("dlreplay:   step: 1\n", rep.stderr)
        end = run([tool("dlreplay"), trace, "--until", "end"], timeout=300)
        self.assertEqual(end.returncode, 0, end.stderr)
        self.assertEqual(end.stdout, rec.stdout)
        self.assertIn("8 of 8 recorded steps verified bit-exact", end.stderr)

    def test_grad_scaler_steps_carry_the_jobs_loss(self):
        # backward() gets the loss times the scale (1024, then 512): each step's loss is the
        # one the job computed (and prints), not the scaled one, which no curve, no spike
        # test and no history line should show (a halved scale would read as a halved loss).
        job = os.path.join(HERE, "jobs", "amp_scaler.py")
        trace = self.trace_path("amp-scaler-loss.trace")
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, job], timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        printed = re.findall(r"^step (\d+) loss (\S+)", rec.stdout, re.M)
        self.assertEqual(len(printed), 8)
        events = run([tool("dltrace"), "events", trace, "--kind", "stepEnd"], timeout=120)
        recorded = [(k, "%.6f" % float(v)) for k, v in re.findall(r"stepEnd: step (\d+) loss (\S+)", events.stdout)]
        self.assertEqual(recorded, printed, events.stdout)
        rep = run([tool("dlreplay"), trace, "--until", "nan"], timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertIn("history: loss over the 1 recorded step(s) before: 0.8456 (step 0) -> 0.8456 (step 0)",
                      rep.stderr)

    def test_torch_func_grad_loop(self):  # no optimizer, no backward(): a step per gradient call
        # 8 gradient calls, 8 steps: the loss printed after each update is in its call's step
        self.check("func-grad")
        events = run([tool("dltrace"), "events", self.trace_path("func-grad.trace"), "--kind", "stepBegin"],
                     timeout=120)
        self.assertEqual(events.returncode, 0, events.stderr)
        self.assertIn("(counted by torch.func gradient calls: no optimizer, no backward())", events.stdout)
        self.assertNotIn("counted by backward()", events.stdout)
        self.assertNotIn("counted by optimizer.step", events.stdout)


if __name__ == "__main__":
    unittest.main()
