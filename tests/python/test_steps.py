"""StepTracker alone: the step rule, fed synthetic events."""

import math
import unittest

import fake_native  # noqa: F401  (puts the hook on sys.path)
from dlrr_hook import native
from dlrr_hook.steps import StepTracker


class Sink:
    def __init__(self):
        self.events = []
        self.snapshots = 0
        self.snapshot_steps = []

    def snapshot_rng(self, step):
        self.snapshots += 1
        self.snapshot_steps.append(step)
        return "rng%d" % self.snapshots

    def begin_step(self, step, loader, batch_index, epoch, by_optimizer, rng):
        self.events.append(("begin", step, loader, batch_index, epoch, by_optimizer, rng))

    def untrained_step(self, step):
        self.events.append(("untrained", step))

    def end_step(self, step, loss):
        self.events.append(("end", step, "nan" if math.isnan(loss) else loss))


class StepTrackerTest(unittest.TestCase):
    def setUp(self):
        self.sink = Sink()
        self.steps = StepTracker(self.sink)
        self.steps.note_optimizer_created()  # the jobs below construct one; see BackwardCountedTest

    def train_batch(self, loader, index, epoch, loss):
        training = self.steps.on_batch(loader, index, epoch, True)
        self.steps.on_root_forward(True)
        self.steps.on_backward()
        self.steps.on_loss(loss)
        self.steps.on_optimizer_step_begin()
        self.steps.on_optimizer_step_end()
        return training

    def test_loader_steps_end_at_next_batch_and_stop_iteration(self):
        self.assertTrue(self.train_batch(0, 0, 0, 1.0))
        self.assertTrue(self.train_batch(0, 1, 0, 2.0))
        self.steps.on_loader_end(0)
        self.assertTrue(self.train_batch(0, 2, 1, 3.0))
        self.steps.on_exit()
        self.assertEqual(self.sink.events, [
            ("begin", 0, 0, 0, 0, False, None), ("end", 0, 1.0),
            ("begin", 1, 0, 1, 0, False, None), ("end", 1, 2.0),
            ("begin", 2, 0, 2, 1, False, None), ("end", 2, 3.0)])

    def test_no_grad_batches_are_not_steps_and_end_the_open_step(self):
        self.train_batch(0, 0, 0, 1.0)
        self.assertFalse(self.steps.on_batch(1, 0, 0, False))
        self.assertEqual(self.sink.events[-1], ("end", 0, 1.0))
        self.assertIsNone(self.steps.current)

    def test_eval_classification(self):
        self.train_batch(0, 0, 0, 1.0)
        self.assertTrue(self.steps.on_batch(1, 0, 0, True))   # unknown yet: a step
        self.assertFalse(self.steps.on_batch(1, 1, 0, True))  # no backward since: eval
        self.assertTrue(self.steps.is_eval_loader(1))
        self.assertFalse(self.steps.is_eval_loader(0))
        self.assertTrue(self.train_batch(0, 1, 1, 2.0))
        self.assertEqual([e[1] for e in self.sink.events if e[0] == "begin"], [0, 1, 2])
        # the eval loader's one spurious step had no backward(): no loss, not a training step
        self.assertEqual([e for e in self.sink.events if e[0] == "untrained"], [("untrained", 1)])

    def test_a_training_loader_evaluated_trains_again_at_its_next_pass(self):
        # ignite: trainer.run(train_loader), then evaluator.run(train_loader) at each epoch's end;
        # the evaluator enters no_grad after the batch is delivered (grad enabled at delivery).
        for epoch in range(3):
            for k in range(2):
                self.assertTrue(self.train_batch(0, 4 * epoch + k, 2 * epoch, 1.0 + k))
            self.steps.on_loader_end(0)
            self.steps.on_batch(0, 4 * epoch + 2, 2 * epoch + 1, True)  # evaluation pass: no training
            self.assertFalse(self.steps.on_batch(0, 4 * epoch + 3, 2 * epoch + 1, True))
            self.steps.on_loader_end(0)
        self.steps.on_exit()
        trained = [e[1] for e in self.sink.events if e[0] == "end" and e[2] != "nan"]
        self.assertEqual(len(trained), 6)  # every training update is a step
        # one spurious (untrained) step per evaluation pass, never a training step
        self.assertEqual(len([e for e in self.sink.events if e[0] == "untrained"]), 3)
        self.assertFalse(self.steps.is_eval_loader(0))

    def test_loader_end_of_other_loader_keeps_step(self):
        self.train_batch(0, 0, 0, 1.0)
        self.steps.on_loader_end(1)
        self.assertEqual(self.steps.current, 0)

    def test_optimizer_steps(self):
        for k in range(3):
            self.steps.on_root_forward(True)
            self.steps.on_backward()
            self.steps.on_loss(float(k))
            self.steps.on_optimizer_step_begin()
            self.steps.on_optimizer_step_end()
        self.steps.on_root_forward(False)  # eval forward after training: no new step
        self.steps.on_exit()
        self.assertEqual(self.sink.events, [
            ("begin", 0, native.NO_LOADER, 0, -1, True, "rng1"), ("end", 0, 0.0),
            ("begin", 1, native.NO_LOADER, 1, -1, True, "rng2"), ("end", 1, 1.0),
            ("begin", 2, native.NO_LOADER, 2, -1, True, "rng3"), ("end", 2, 2.0)])

    def test_a_second_optimizer_after_one_backward_is_the_next_steps_work(self):
        # DLRM: a sparse and a dense optimizer step after one backward(): one step an iteration.
        for k in range(3):
            self.steps.on_root_forward(True)
            self.steps.on_backward()
            self.steps.on_loss(float(k))
            for _ in range(2):
                self.steps.on_optimizer_step_begin()
                self.steps.on_optimizer_step_end()
        self.steps.on_exit()
        self.assertEqual(self.sink.events, [
            ("begin", 0, native.NO_LOADER, 0, -1, True, "rng1"), ("end", 0, 0.0),
            ("begin", 1, native.NO_LOADER, 1, -1, True, "rng2"), ("end", 1, 1.0),
            ("begin", 2, native.NO_LOADER, 2, -1, True, "rng3"), ("end", 2, 2.0),
            ("begin", 3, native.NO_LOADER, 3, -1, True, "rng4"), ("end", 3, "nan")])

    def test_without_backward_every_optimizer_step_ends_a_step(self):
        # Gradients set by hand (no backward() ever): each update is a step, as before.
        for _ in range(2):
            self.steps.on_root_forward(True)
            for _ in range(2):
                self.steps.on_optimizer_step_begin()
                self.steps.on_optimizer_step_end()
        self.steps.on_exit()
        self.assertEqual([e[1] for e in self.sink.events if e[0] == "end"], [0, 1, 2, 3])

    def test_optimizer_step_rng_is_taken_when_previous_step_returns(self):
        self.steps.on_optimizer_step_begin()
        self.steps.on_optimizer_step_end()
        self.assertEqual(self.sink.snapshots, 2)  # step 0 at its begin, step 1 at step 0's end
        self.assertEqual(len(self.sink.events), 2)  # step 1 not announced yet
        self.steps.on_backward()
        self.assertEqual(self.sink.events[-1][6], "rng2")
        self.assertEqual(self.sink.snapshot_steps, [0, 1])

    def test_snapshot_taken_once_per_step_even_when_it_is_none(self):
        self.sink.snapshot_rng = lambda step: self.sink.snapshot_steps.append(step)  # replay's
        for _ in range(2):
            self.steps.on_root_forward(True)
            self.steps.on_optimizer_step_begin()
            self.steps.on_optimizer_step_end()
        self.assertEqual(self.sink.snapshot_steps, [0, 1, 2])
        self.assertEqual([e[6] for e in self.sink.events if e[0] == "begin"], [None, None])

    def test_dry_run_forward_does_not_steal_step_zero(self):
        self.steps.note_loader_created()
        self.steps.on_root_forward(True)  # dry run: tentative
        self.assertEqual(self.sink.events, [])
        self.assertTrue(self.train_batch(0, 0, 0, 1.0))
        self.steps.on_exit()
        self.assertEqual(self.sink.events, [("begin", 0, 0, 0, 0, False, None), ("end", 0, 1.0)])

    def test_tentative_step_zero_confirmed_by_backward(self):
        self.steps.note_loader_created()
        self.steps.on_root_forward(True)
        self.steps.on_backward()
        self.assertEqual(self.sink.events, [("begin", 0, native.NO_LOADER, 0, -1, True, "rng1")])

    def test_switch_from_optimizer_to_loader_steps(self):
        self.steps.on_backward()
        self.steps.on_optimizer_step_begin()
        self.steps.on_optimizer_step_end()
        self.steps.on_backward()  # step 1 (optimizer) open
        self.assertTrue(self.train_batch(0, 0, 0, 5.0))
        self.steps.on_exit()
        begins = [(e[1], e[5]) for e in self.sink.events if e[0] == "begin"]
        self.assertEqual(begins, [(0, True), (1, True), (2, False)])
        self.assertEqual(self.sink.events[3], ("end", 1, "nan"))
        # loader-driven for good: optimizer events no longer make steps
        self.steps.on_backward()
        self.steps.on_optimizer_step_end()
        self.assertEqual(len(self.sink.events), 6)

    def test_loss_outside_a_step_is_ignored(self):
        self.steps.on_loss(3.0)
        self.train_batch(0, 0, 0, 1.0)
        self.steps.on_exit()
        self.assertEqual(self.sink.events[-1], ("end", 0, 1.0))


class BackwardCountedTest(unittest.TestCase):
    """No DataLoader and no optimizer (an RNN LM updating p.data by hand): backward() counts."""

    def setUp(self):
        self.sink = Sink()
        self.steps = StepTracker(self.sink)

    def hand_update_batch(self, loss):
        self.steps.on_root_forward(True)
        self.steps.on_backward()
        self.steps.on_loss(loss)
        self.steps.on_backward_end()  # p.data.add_(p.grad, alpha=-lr) follows, between steps

    def test_each_backward_is_a_step(self):
        for loss in (1.0, 2.0, 3.0):
            self.hand_update_batch(loss)
        self.steps.on_exit()
        self.assertEqual([e for e in self.sink.events if e[0] == "end"],
                         [("end", 0, 1.0), ("end", 1, 2.0), ("end", 2, 3.0)])
        begins = [(e[1], e[5]) for e in self.sink.events if e[0] == "begin"]
        self.assertEqual(begins, [(0, native.STEP_BY_BACKWARD), (1, native.STEP_BY_BACKWARD),
                                  (2, native.STEP_BY_BACKWARD)])
        # the next step's RNG states are taken when backward() returns, before the next forward
        self.assertEqual(self.sink.snapshot_steps, [0, 1, 2, 3])

    def test_an_optimizer_makes_optimizer_steps(self):
        self.steps.note_optimizer_created()
        self.hand_update_batch(1.0)
        self.steps.on_optimizer_step_begin()
        self.steps.on_optimizer_step_end()
        self.steps.on_exit()
        self.assertEqual([e[0] for e in self.sink.events], ["begin", "end"])
        self.assertEqual(self.sink.events[0][5], native.STEP_BY_OPTIMIZER)

    def test_an_optimizer_made_after_a_forward_counts_that_step_by_its_update(self):
        self.steps.on_root_forward(True)  # lazy modules materialised, or torch.jit.trace's runs
        self.steps.note_optimizer_created()
        for loss in (1.0, 2.0):
            self.steps.on_root_forward(True)
            self.steps.on_backward()
            self.steps.on_loss(loss)
            self.steps.on_backward_end()  # does not end step 0: the optimizer will
            self.steps.on_optimizer_step_begin()
            self.steps.on_optimizer_step_end()
        self.steps.on_exit()
        self.assertEqual([e for e in self.sink.events if e[0] == "end"], [("end", 0, 1.0), ("end", 1, 2.0)])
        begins = [(e[1], e[5]) for e in self.sink.events if e[0] == "begin"]
        self.assertEqual(begins, [(0, native.STEP_BY_BACKWARD), (1, native.STEP_BY_OPTIMIZER)])

    def test_an_optimizer_made_after_a_hand_update_step_leaves_it_counted_by_backward(self):
        self.steps.on_root_forward(True)
        self.steps.on_backward()
        self.steps.note_optimizer_created()  # made inside the step, after its backward()
        self.steps.on_loss(1.0)
        self.steps.on_backward_end()
        self.assertEqual([e[:2] for e in self.sink.events], [("begin", 0), ("end", 0)])

    def test_a_trailing_forward_is_an_untrained_step(self):
        self.hand_update_batch(1.0)
        self.steps.on_root_forward(True)  # evaluation with gradients enabled, then exit
        self.steps.on_exit()
        self.assertEqual(self.sink.events[-2:], [("untrained", 1), ("end", 1, "nan")])
        self.assertNotIn(("untrained", 0), self.sink.events)



class GradientCallCountedTest(unittest.TestCase):
    """torch.func.grad loops: no optimizer, no backward(); each outermost gradient call is a step."""

    def setUp(self):
        self.sink = Sink()
        self.steps = StepTracker(self.sink)

    def functional_batch(self):
        self.steps.on_gradient_call()
        self.steps.on_root_forward(True)  # the transform runs the forward inside the call
        self.steps.on_gradient_call_end()  # params = {k: v - lr * g[k]} follows, in the same step
        self.steps.on_root_forward(True)  # the job prints the loss with the new parameters

    def test_each_gradient_call_is_a_step(self):
        for i in range(3):
            self.functional_batch()
            # the update and the logging forward after the call are in the call's step
            self.assertEqual(self.steps.current, i)
        self.steps.on_exit()
        begins = [(e[1], e[5]) for e in self.sink.events if e[0] == "begin"]
        self.assertEqual(begins, [(0, native.STEP_BY_GRADIENT_CALL), (1, native.STEP_BY_GRADIENT_CALL),
                                  (2, native.STEP_BY_GRADIENT_CALL)])
        # one step per loop iteration: the last loss print opens no untrained step
        self.assertEqual([e for e in self.sink.events if e[0] == "untrained"], [])
        self.assertEqual(self.sink.snapshot_steps, [0, 1, 2])

    def test_a_step_ends_where_the_next_gradient_call_begins(self):
        self.functional_batch()
        self.steps.on_loss(0.5)
        self.steps.on_gradient_call()
        self.assertEqual(self.sink.events[-2], ("end", 0, 0.5))
        self.assertEqual(self.sink.events[-1][:2], ("begin", 1))

    def test_a_forward_before_the_first_gradient_call_labels_step_0_by_backward(self):
        self.steps.on_root_forward(True)  # e.g. the job logs its initial loss
        self.steps.on_gradient_call()
        self.steps.on_gradient_call_end()
        self.functional_batch()
        self.steps.on_exit()
        begins = [(e[1], e[5]) for e in self.sink.events if e[0] == "begin"]
        self.assertEqual(begins, [(0, native.STEP_BY_BACKWARD), (1, native.STEP_BY_GRADIENT_CALL)])
        self.assertEqual(self.steps.current_rule, None)

    def test_backward_keeps_counting_when_a_job_uses_both(self):
        self.steps.on_root_forward(True)
        self.steps.on_backward()
        self.steps.on_backward_end()
        self.steps.on_gradient_call()  # e.g. a per-sample-gradient metric between steps
        self.steps.on_gradient_call_end()  # ends no step: backward() counts this job's steps
        self.steps.on_backward()
        self.steps.on_backward_end()
        self.steps.on_exit()
        begins = [(e[1], e[5]) for e in self.sink.events if e[0] == "begin"]
        self.assertEqual(begins, [(0, native.STEP_BY_BACKWARD), (1, native.STEP_BY_BACKWARD)])

    def test_an_optimizer_counts_optimizer_steps(self):
        self.steps.note_optimizer_created()
        self.steps.on_gradient_call()
        self.steps.on_gradient_call_end()
        self.steps.on_optimizer_step_begin()
        self.steps.on_optimizer_step_end()
        self.steps.on_exit()
        self.assertEqual([e[0] for e in self.sink.events], ["begin", "end"])
        self.assertEqual(self.sink.events[0][5], native.STEP_BY_OPTIMIZER)


if __name__ == "__main__":
    unittest.main()
