"""Verdicts decided only from what the replay computed (issue 28 items 1, 2 and 6; issue 27
item 5): `--check` and `--until nan|crash` against replays made to differ on purpose, and true
counts on traces that end early."""
import json
import os
import unittest

from harness import PY, TraceTestCase, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
VERDICT_JOB = os.path.join(HERE, "jobs", "verdict_job.py")


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


if __name__ == "__main__":
    unittest.main()
