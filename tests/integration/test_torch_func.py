"""Functional training loops (torch.func.grad / grad_and_value, parameters in a dict, updated by
hand): the loss of every step, and jump replay (issue 28, item 9). torch 1.13 has no torch.func
(functorch was a separate module then): skipped there; CI runs this module on Debian 13's torch
2.6 (scripts/torch2.sh)."""
import json
import math
import os
import unittest

from harness import PY, ROOT, TraceTestCase, run, steps, tool

JOB = os.path.join(ROOT, "tests", "integration", "jobs", "func_loop.py")


def _has_torch_func():
    return run([PY, "-c", "import torch.func"], timeout=120).returncode == 0


@unittest.skipUnless(_has_torch_func(), "torch.func (torch 2.x)")
class TorchFuncLoopTest(TraceTestCase):
    def record(self, variant, *args):
        trace = self.trace_path(variant + ".trace")
        plain = run([PY, JOB, variant] + list(args), timeout=300)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        rec = run([tool("dlrecord"), "-q", "--snapshot-every", "2steps", "-o", trace, "--", PY, JOB, variant]
                  + list(args), timeout=300)
        self.assertEqual((rec.returncode, rec.stdout, rec.stderr), (0, plain.stdout, plain.stderr))
        return trace, rec.stdout.splitlines()

    def replay(self, trace, *args):
        p = run([tool("dlreplay"), trace, "--json"] + list(args), timeout=300)
        lines = p.stdout.splitlines()
        return p, lines[:-1], (json.loads(lines[-1]) if lines else {})

    def test_every_step_has_the_loss_the_transform_returned(self):
        for variant in ("grad-and-value", "grad-aux"):  # the job prints the loss the transform returned
            with self.subTest(variant):
                trace, printed = self.record(variant)
                trained = [s for s in steps(trace) if not s["untrained"]]
                self.assertEqual(len(trained), 8)  # one step per iteration, numbered as the job does
                self.assertEqual(["step %d loss %.6f" % (s["step"], s["loss"]) for s in trained], printed)
        # grad(): the loss never leaves the transform; the job logs another one after the update,
        # outside the transform, with gradients enabled: in the same step (one per iteration),
        # which digests the model's outputs inside the transform and in the logging forward
        trace, printed = self.record("grad")
        all_steps = steps(trace)
        self.assertEqual([(s["step"], s["untrained"]) for s in all_steps], [(i, False) for i in range(8)])
        self.assertTrue(all(math.isfinite(s["loss"]) for s in all_steps), all_steps)
        self.assertTrue(all(s["digests"] == 10 for s in all_steps), all_steps)

    def test_jump_replay_fast_forwards_through_the_transform(self):
        for variant in ("grad", "grad-and-value"):
            with self.subTest(variant):
                trace, printed = self.record(variant)
                recorded = len(steps(trace))
                p, out, rep = self.replay(trace, "--from", "step=4", "--until", "end")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertNotIn("requires_grad_", p.stderr)
                self.assertEqual(rep["jump_step"], 4)
                self.assertEqual(rep["verified_steps"], recorded - 4, p.stderr)
                self.assertEqual(out[3:], printed[3:])  # from the jump on (and the step before it, run
                # for real), every loss as the job printed it
                if variant == "grad-and-value":  # the fast-forwarded gradient calls computed, too
                    self.assertEqual(out, printed)

    def test_check_from_a_snapshot_reproduces_a_late_nan(self):
        trace, printed = self.record("grad-and-value", "10", "7")
        self.assertEqual(printed[7], "step 7 loss nan")
        p = run([tool("dlreplay"), trace, "--check", "--from", "step=4"], timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("jumping to the snapshot of step 4", p.stderr)
        self.assertIn("deterministic: reproduced at step 7", p.stderr)
        self.assertNotIn("requires_grad_", p.stderr)


if __name__ == "__main__":
    unittest.main()
