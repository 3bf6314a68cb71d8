"""Jump replay's fast-forward on real training patterns (issue 28 items 4 and 5): an optimizer
step taking a closure (LBFGS; skorch's NeuralNet), and a nanoGPT-style loop with dropout that
draws its next batch with torch.randint between forward and backward, and a job drawing from its own
torch.Generator objects inside its modules."""
import json
import os
import unittest

from harness import PY, TraceTestCase, info, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = os.path.join(HERE, "jobs")


class FastForwardTest(TraceTestCase):
    def record(self, every, *argv):
        trace = self.trace_path()
        p = run([tool("dlrecord"), "-q", "-o", trace, "--snapshot-every", every, "--", PY] + list(argv))
        self.assertEqual(p.returncode, 0, p.stderr)
        return trace, p.stdout

    def jump_to_the_end(self, trace, jump):
        p = run([tool("dlreplay"), trace, "--json", "--from", "step=%d" % jump, "--until", "end"])
        doc = json.loads(p.stdout.splitlines()[-1])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["jump_step"], jump)
        self.assertEqual(doc["verified_steps"], doc["recorded_steps"] - jump, p.stderr)
        return p

    def test_dropout_and_a_batch_drawn_between_forward_and_backward(self):
        # The step before the jump draws the jump step's batch after its dropout draws: skipped
        # stand-in modules drew nothing, so the batch differed (diverged at the jump step).
        trace, _ = self.record("20steps", os.path.join(JOBS, "memmap_lm.py"), os.path.join(self.tmp, "data"),
                               "--iters", "60")
        self.assertIn(40, [s["step"] for s in info(trace)["snapshots"]])
        self.jump_to_the_end(trace, 40)

    def test_the_jobs_own_generators(self):
        # Draws from the job's own torch.Generator objects inside stand-in modules (a submodule's
        # dropout generator, the root's, a module-level one) were skipped: each stood behind the
        # recording at the jump step (diverged there) until snapshots held and restored them.
        trace, out = self.record("10steps", os.path.join(JOBS, "own_generators.py"))
        p = self.jump_to_the_end(trace, 20)
        self.assertEqual([l for l in p.stdout.splitlines() if l.startswith("iter ")][20:],
                         [l for l in out.splitlines() if l.startswith("iter ")][20:])

    def test_lbfgs_step_with_a_closure(self):
        # optimizer.step(closure) returned None in fast-forward: the job's loss.item() failed.
        trace, out = self.record("4steps", os.path.join(JOBS, "lbfgs_seq.py"))
        p = self.jump_to_the_end(trace, 8)
        # The verified steps print the recording's losses.
        self.assertEqual([l for l in p.stdout.splitlines() if l.startswith("step ")][8:],
                         [l for l in out.splitlines() if l.startswith("step ")][8:])

    def test_skorch_neuralnet(self):
        if run([PY, "-c", "import skorch"]).returncode != 0:
            self.skipTest("python3-skorch is not installed here (scripts/setup.sh installs it on Debian 12)")
        # skorch's train_step reads what its step_fn closure stored: a TypeError at net.py when
        # fast-forward skipped the closure.
        trace, _ = self.record("10steps", os.path.join(JOBS, "skorch_fit.py"))
        self.jump_to_the_end(trace, 20)


if __name__ == "__main__":
    unittest.main()
