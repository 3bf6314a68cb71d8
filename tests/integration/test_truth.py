"""What dlrr prints about real jobs is true (issue 18): how steps were counted (backward() in a
loop with no DataLoader and no optimizer), steps that trained nothing (an evaluation loop with
gradients enabled), module names of nn.Sequential children, and RNG warnings on faithful
replays of a job that builds its evaluation DataLoader inside a function."""
import json
import os
import re
import unittest

from harness import PY, TraceTestCase, events, info, run, steps, tool

HERE = os.path.dirname(os.path.abspath(__file__))
RNN_LM = os.path.join(HERE, "jobs", "rnn_lm.py")
EVAL_IN_FUNCTION = os.path.join(HERE, "jobs", "eval_in_function.py")


def replay(trace, *args, **kw):
    p = run([tool("dlreplay"), trace, "--json"] + list(args), **kw)
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    return p, (json.loads(last) if last.startswith("{") else None)


class BackwardCountedStepsTest(TraceTestCase):
    """The word-language-model loop updates p.data by hand: no DataLoader, no optimizer."""

    def test_each_backward_is_a_step_in_record_and_replay(self):
        t = self.trace_path()
        rec = run([tool("dlrecord"), "-o", t, "--", PY, RNN_LM, "--batches", "6", "--nan-at", "3"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        # once one "step 0 (counted by optimizer.step)": the NaN of batch 3 was "step 0, call 3"
        self.assertIn("first non-finite value at step 3", rec.stderr)
        self.assertEqual(info(t)["steps"], 6)
        self.assertEqual([s["step"] for s in steps(t)], list(range(6)))
        begins = events(t, kind="stepBegin")
        self.assertEqual(len(begins), 6)
        self.assertTrue(all(e["event"]["stepBegin"].get("byBackward") for e in begins), begins)
        self.assertFalse(any(e["event"]["stepBegin"].get("byOptimizer") for e in begins), begins)
        text = run([tool("dltrace"), "events", t, "--kind", "stepBegin"], check=True).stdout
        self.assertIn("counted by backward()", text)
        self.assertNotIn("optimizer.step", text)  # a rule that did not apply is never printed

        # Replay counts the same steps and verifies each one up to the NaN.
        p, doc = replay(t, "--until", "nan")
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        self.assertEqual(doc["verified_steps"], 3, p.stderr)
        self.assertEqual(doc["recorded_steps"], 6, p.stderr)
        p = run([tool("dlreplay"), t, "--until", "end"])
        self.assertIn("6 of 6 recorded steps verified bit-exact", p.stderr)
        self.assertNotIn("RNG state", p.stderr)


class EvalLoopTest(TraceTestCase):
    """Training batches, then an evaluation DataLoader built inside a function each epoch and
    iterated with gradients enabled."""

    def test_untrained_eval_steps_have_no_loss_and_are_not_counted(self):
        t = self.trace_path()
        plain = run([PY, EVAL_IN_FUNCTION], check=True)
        rec = run([tool("dlrecord"), "-o", t, "--", PY, EVAL_IN_FUNCTION], check=True)
        self.assertEqual(rec.stdout, plain.stdout)
        st = steps(t)
        untrained = [s for s in st if s["untrained"]]
        # one per evaluation loader (a new one each epoch): its first batch looked like training
        self.assertEqual(len(untrained), 2, st)
        self.assertTrue(all(s["loss"] is None for s in untrained))
        self.assertTrue(all(s["loss"] is not None for s in st if not s["untrained"]))
        self.assertEqual(info(t)["steps"], 16)  # 2 epochs x 8 training batches
        self.assertEqual(info(t)["untrained_steps"], 2)
        text = run([tool("dltrace"), "steps", t], check=True).stdout
        rows = {int(l.split()[0]): l.split()[1] for l in text.splitlines() if re.match(r"^\d+ ", l)}
        for s in untrained:
            self.assertEqual(rows[s["step"]], "-")
        self.assertNotIn("nan", text)
        self.assertIn("-: no loss recorded", text)

    def test_sequential_children_are_named_with_their_class(self):
        t = self.trace_path()
        run([tool("dlrecord"), "-o", t, "--", PY, EVAL_IN_FUNCTION, "--epochs", "1"], check=True)
        paths = {e["event"]["digest"]["path"] for e in events(t, kind="digest", step=0)}
        self.assertIn("0 (Linear)", paths)
        self.assertIn("2 (Dropout)", paths)
        self.assertNotIn("0", paths)

    def test_rng_warning_only_when_the_job_draws_differently(self):
        t = self.trace_path()
        run([tool("dlrecord"), "-o", t, "--", PY, EVAL_IN_FUNCTION], check=True)
        # Faithful: no warning, in the text output nor in the report.
        p = run([tool("dlreplay"), t, "--until", "end"])
        self.assertIn("18 of 18 recorded steps verified", p.stderr)  # 16 training + 2 untrained
        self.assertNotIn("RNG state", p.stderr)
        p, doc = replay(t, "--until", "end")
        self.assertEqual(doc["outcome"], "reached", p.stderr)
        self.assertNotIn("RNG state", json.dumps(doc["report"]))
        # The same job drawing one more random number in its second evaluation: a real difference.
        p = run([tool("dlreplay"), t, "--until", "end", "--", "env", "DLRR_TEST_EXTRA_DRAW=1", PY,
                 EVAL_IN_FUNCTION])
        self.assertIn("RNG state (torch) at batch 0 of loader 2 differed from the recording", p.stderr)

    def test_no_rng_warning_for_draws_while_a_batch_loads_in_process(self):
        # A Dataset drawing random numbers in a loader without workers: replay serves the batch and
        # draws nothing there, so the generators differed before their restore at every delivery,
        # and a faithful replay warned that the job drew random numbers differently.
        t = self.trace_path()
        run([tool("dlrecord"), "-o", t, "--", PY, os.path.join(HERE, "jobs", "augmenting_dataset.py")], check=True)
        p = run([tool("dlreplay"), t, "--until", "end"])
        self.assertIn("12 of 12 recorded steps verified", p.stderr)
        self.assertNotIn("RNG state", p.stderr)
        self.assertNotIn("warning", p.stderr)

    def test_entropy_of_a_worker_loaders_machinery_is_not_the_jobs(self):
        # Its semaphore names and connection challenges draw entropy in the job's process when
        # recorded, never in a replay that serves the batches: the job's own next draws (an
        # atomic checkpoint's temporary name, a uuid) were out of step, and a faithful replay
        # warned "entropy request 7 differs (16 bytes asked, 20 recorded)" (issue 28 item 7).
        t = self.trace_path()
        out = os.path.join(self.tmp, "ckpt")
        run([tool("dlrecord"), "-o", t, "--", PY, os.path.join(HERE, "jobs", "worker_loader_entropy.py"), out],
            check=True)
        p = run([tool("dlreplay"), t, "--until", "end"])
        self.assertIn("8 of 8 recorded steps verified", p.stderr)
        self.assertNotIn("entropy request", p.stderr)
        self.assertNotIn("warning", p.stderr)


if __name__ == "__main__":
    unittest.main()
