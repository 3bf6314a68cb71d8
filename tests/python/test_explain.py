"""explain.py: the first non-finite op of real torch code, its line and its cause, one kind of
fault at a time; the history's spike; the explainer's own work and in-place ops."""

import math
import unittest

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
import torch

from dlrr_hook.explain import Explainer, history


def first_bad(fn, samples=(), phase="forward"):
    """Runs fn() under an Explainer; its Finding."""
    e = Explainer(torch, lambda: phase, lambda: None, set(samples))
    e.enter()
    try:
        fn()
    finally:
        e.exit()
    return e.found


class CauseTest(unittest.TestCase):
    def cause(self, fn, **kw):
        f = first_bad(fn, **kw)
        self.assertIsNotNone(f)
        return f

    def test_sqrt_of_a_negative(self):
        x = torch.tensor([1.0, -2.0, 4.0])
        f = self.cause(lambda: x.sqrt())
        self.assertEqual((f.op, f.kind), ("aten::sqrt", "sqrt of a negative"))
        self.assertIn("1 element(s) of self below 0 (min -2)", f.cause)
        self.assertIn("test_explain.py", f.line)
        self.assertIn("lambda: x.sqrt()", f.line)

    def test_log_of_a_negative_and_of_zero(self):
        self.assertEqual(self.cause(lambda: torch.log(torch.tensor([-1.0, 2.0]))).kind, "log of a negative")
        self.assertEqual(self.cause(lambda: torch.log(torch.tensor([0.0, 2.0]))).kind, "log of zero")

    def test_division_by_zero_and_zero_over_zero(self):
        a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
        f = self.cause(lambda: a / b)
        self.assertEqual(f.kind, "division by zero")
        self.assertIn("1 element(s) of the divisor other were 0", f.cause)
        self.assertEqual(self.cause(lambda: torch.zeros(3) / torch.zeros(3)).kind, "0/0")

    def test_inf_minus_inf(self):
        a = torch.tensor([math.inf, 1.0])
        # A non-finite tensor made before the check (outside it), then inf - inf inside it.
        f = self.cause(lambda: a - a)
        self.assertEqual(f.kind, "inf - inf")

    def test_overflow_names_the_huge_input(self):
        w, x = torch.full((2, 2), 1e30), torch.full((2, 2), 1e20)
        f = self.cause(lambda: w @ x)
        self.assertEqual((f.op, f.kind), ("aten::mm", "overflow"))
        self.assertIn("the largest input was self with max |x| 1e+30", f.cause)

    def test_float16_cast(self):
        f = self.cause(lambda: torch.tensor([7e4, 1.0]).half())
        self.assertEqual(f.kind, "overflow")
        self.assertIn("the cast to float16 overflowed", f.cause)

    def test_python_inf_and_a_sample(self):
        x = torch.ones(2)
        f = self.cause(lambda: x * math.inf)
        self.assertEqual(f.kind, "non-finite scalar")
        bad = torch.tensor([[1.0, math.nan]])
        f = self.cause(lambda: bad + 1, samples=[bad.data_ptr()])
        self.assertEqual(f.kind, "non-finite input sample")
        f = self.cause(lambda: bad + 1)  # not from the batch: state from before the step
        self.assertEqual(f.kind, "non-finite input")

    def test_in_place_inputs_are_shown_as_before(self):
        p = torch.ones(3)
        f = self.cause(lambda: p.add_(torch.full((3,), 2.0), alpha=-3e38), phase="optimizer")
        self.assertEqual((f.op, f.phase), ("aten::add_", "optimizer"))
        self.assertIn("self (float32 [3]): finite, max |x| 1", f.inputs[0].describe())

    def test_finite_code_finds_nothing_and_paused_work_is_not_checked(self):
        self.assertIsNone(first_bad(lambda: torch.ones(3).exp()))
        e = Explainer(torch, lambda: "forward", lambda: None, set())
        e.enter()
        try:
            with e.paused():
                torch.zeros(1) / torch.zeros(1)
        finally:
            e.exit()
        self.assertIsNone(e.found)

    def test_backward_op_mapped_to_its_node_and_forward_line(self):
        w = torch.tensor([0.0, 4.0], requires_grad=True)
        e = Explainer(torch, lambda: "backward", lambda: None, set())
        e.enter()
        try:
            loss = torch.sqrt(w).sum()  # finite; d sqrt/dw at 0 is 1 / (2 * 0)
            e.hook_graph([loss])
            loss.backward()
        finally:
            e.exit()
        f = e.found
        self.assertEqual((f.op, f.phase, f.node, f.kind), ("aten::div", "backward", "SqrtBackward0", "division by zero"))
        self.assertIn("loss = torch.sqrt(w).sum()", f.forward_line)
        self.assertIn("backward of the forward line", f.line_text())


class HistoryTest(unittest.TestCase):
    def rows(self, losses):
        def of(step):
            if step >= len(losses):
                return []
            v = "%.9g" % losses[step]
            return [("loss", "loss", "0", "0", "0x0", "0", "0", v, v),
                    ("gradient", "w", "0", "0", "0x0", "0", "0", "-%d" % (step + 1), "%d" % (step + 1))]
        return of

    def test_spike_and_gradients(self):
        text = history(self.rows([1.0, 1.1, 0.9, 1.0, 50.0, 3e4]), 6, ["0.1 (SGD)"])
        self.assertIn("it spiked at step 4 (2 step(s) before the failure): 50, 50x the median 1", text)
        self.assertIn("largest |gradient| 1 (step 0) -> 6 (step 5, w)", text)
        self.assertIn("learning rate at the failing step: 0.1 (SGD)", text)

    def test_the_steps_recorded_loss_stands_for_a_scaled_one(self):
        # A GradScaler's loss times 1024 was digested; the step's recorded loss is the job's.
        scaled = [1024.0, 1126.4, 921.6, 1024.0]
        text = history(self.rows(scaled), 4, [], step_loss=lambda s: scaled[s] / 1024 if s < 4 else math.nan)
        self.assertIn("loss over the 4 recorded step(s) before: 1 (step 0) -> 1 (step 3)", text)
        text = history(self.rows([1.0, 2.0]), 2, [], step_loss=lambda s: math.nan)  # none recorded: the digest's
        self.assertIn("1 (step 0) -> 2 (step 1)", text)

    def test_no_spike(self):
        text = history(self.rows([1.0, 1.1, 0.9, 1.0]), 4, [])
        self.assertIn("no spike", text)


if __name__ == "__main__":
    unittest.main()
