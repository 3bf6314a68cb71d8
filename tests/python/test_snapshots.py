"""snapshots.py: the cadence option, and a snapshot tree restoring real torch objects exactly."""

import copy
import os
import unittest
from unittest import mock

import fake_native  # noqa: F401  (puts the hook on sys.path)
from dlrr_hook.snapshots import Registry, SnapshotTaker, build_tree, parse_cadence, restore_tree, tree_bytes

import torch
import torch.nn as nn

NOISE = None  # a module-level generator of a test (the job's own, for generators.py)


def make(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.5 ** k)
    reg = Registry()
    reg.note_root(model)
    reg.note_root(nn.CrossEntropyLoss())  # no state: not part of the snapshot
    reg.note_optimizer(opt)
    reg.note_scheduler(sched)
    return model, opt, sched, reg


def train(model, opt, sched, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
    # A half-accumulated gradient: part of the state at a step boundary.
    x, y = torch.randn(16, 4, generator=g), torch.randint(0, 2, (16,), generator=g)
    nn.functional.cross_entropy(model(x), y).backward()


class CadenceTest(unittest.TestCase):
    def test_values(self):
        self.assertEqual(parse_cadence("off"), ("off", 0))
        self.assertEqual(parse_cadence("1000steps"), ("steps", 1000))
        self.assertEqual(parse_cadence("90"), ("seconds", 90.0))
        self.assertEqual(parse_cadence("2.5s"), ("seconds", 2.5))
        self.assertEqual(parse_cadence(None), ("auto", 0))
        self.assertEqual(parse_cadence("auto"), ("auto", 0))
        self.assertEqual(parse_cadence("0steps"), ("off", 0))


class TakerTest(unittest.TestCase):
    def test_cadence_in_steps_and_the_cost_on_the_jobs_thread_is_recorded(self):
        model, opt, sched, reg = make(0)
        lib = fake_native.FakeLib()
        written = []
        values = mock.Mock(write=written.append)
        with mock.patch.dict(os.environ, {"DLRR_SNAPSHOT_EVERY": "2steps"}):
            taker = SnapshotTaker(lib, values, reg)
        for step in range(5):
            taker.at_step_start(step)
        self.assertEqual([c[1] for c in lib.calls if c[0] == "snapshot_begin"], [2, 4])
        self.assertEqual(len(written), 2)
        costs = [c[2] for c in lib.calls if c[0] == "runtime_info" and c[1] == "snapshot.job_seconds"]
        self.assertEqual(len(costs), 2)
        self.assertTrue(costs[-1].endswith(" in 2 snapshots"), costs)
        self.assertGreater(float(costs[-1].split()[0]), 0.0)
        self.assertAlmostEqual(float(costs[-1].split()[0]), taker.seconds, places=5)


    def test_a_snapshot_over_a_quarter_of_the_budget_is_not_taken(self):
        model, opt, sched, reg = make(0)
        size = tree_bytes(build_tree(reg))
        self.assertGreater(size, 0)
        for budget, taken in ((4 * size, [2, 4]), (4 * size - 1, [])):
            lib = fake_native.FakeLib()
            with mock.patch.dict(os.environ, {"DLRR_SNAPSHOT_EVERY": "2steps", "DLRR_BUDGET": str(budget)}):
                taker = SnapshotTaker(lib, mock.Mock(), reg)
            for step in range(5):
                taker.at_step_start(step)
            self.assertEqual([c[1] for c in lib.calls if c[0] == "snapshot_begin"], taken)
            notes = [c[2] for c in lib.calls if c[0] == "recorder_status"]
            self.assertEqual(len(notes), 0 if taken else 1, notes)  # said once
            if not taken:
                self.assertIn("over a quarter of the trace's budget", notes[0])

    def test_no_model_seen_and_a_failing_state_dict_are_said_once(self):
        lib = fake_native.FakeLib()
        with mock.patch.dict(os.environ, {"DLRR_SNAPSHOT_EVERY": "2steps"}):
            taker = SnapshotTaker(lib, mock.Mock(), Registry())  # no root module seen (compiled function)
        for step in range(7):
            taker.at_step_start(step)
        notes = [c[2] for c in lib.calls if c[0] == "recorder_status"]
        self.assertEqual(len(notes), 1, notes)
        self.assertTrue(notes[0].startswith("no snapshot at step 2: no module with parameters or buffers"), notes)
        self.assertEqual([c for c in lib.calls if c[0] == "snapshot_begin"], [])

        class Broken(nn.Linear):
            def state_dict(self, *a, **k):
                if not k.get("keep_vars"):
                    raise RuntimeError("no state here")
                return super().state_dict(*a, **k)
        reg = Registry()
        model = Broken(2, 2)  # the registry holds weak references only
        reg.note_root(model)
        lib = fake_native.FakeLib()
        with mock.patch.dict(os.environ, {"DLRR_SNAPSHOT_EVERY": "2steps"}):
            taker = SnapshotTaker(lib, mock.Mock(), reg)
        for step in range(7):
            taker.at_step_start(step)
        notes = [c[2] for c in lib.calls if c[0] == "recorder_status"]
        self.assertEqual(notes, ["snapshots off at step 2: RuntimeError: no state here"])
        self.assertEqual([c for c in lib.calls if c[0] == "snapshot_begin"], [])


class TreeTest(unittest.TestCase):
    def test_restore_makes_the_next_steps_bit_identical(self):
        model, opt, sched, reg = make(0)
        train(model, opt, sched, 5, seed=1)
        # Replay decodes a snapshot from the trace into tensors of its own: a copy here. (The
        # tree itself holds the live tensors; torch 2.x's Optimizer.load_state_dict keeps the
        # tensors it is given, so the two optimizers would share and double-step them.)
        tree = copy.deepcopy(build_tree(reg))
        self.assertEqual(len(tree["modules"]), 1)
        self.assertEqual(set(tree["optimizers"][0]["state"]), {"0", "1", "2", "3", "4", "5"})
        # Text keys and tuples survive; functions do not (LambdaLR's lambdas are code).
        self.assertTrue(all(not callable(v) for v in tree["schedulers"][0].values()))
        # Another process's objects, trained differently: the restore makes them the same.
        model2, opt2, sched2, reg2 = make(7)
        train(model2, opt2, sched2, 2, seed=9)
        self.assertEqual(restore_tree(reg2, tree, torch), [])
        train(model, opt, sched, 3, seed=5)
        train(model2, opt2, sched2, 3, seed=5)
        for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
            self.assertTrue(torch.equal(a, b))
        for a, b in zip(model.parameters(), model2.parameters()):
            self.assertTrue(torch.equal(a.grad, b.grad))
        self.assertEqual(sched.get_last_lr(), sched2.get_last_lr())

    def test_the_jobs_own_generators_are_restored_by_name(self):
        # A submodule's generator and a module-level one (this test module's NOISE): named, their
        # states in the tree, set back by restore_tree; one the replay lacks is reported.
        global NOISE
        model, opt, sched, reg = make(0)
        model[2].g = torch.Generator().manual_seed(3)
        NOISE = torch.Generator().manual_seed(4)
        tree = copy.deepcopy(build_tree(reg))
        self.assertEqual(set(tree["generators"]), {"module 0 2.g", "global %s.NOISE" % __name__})
        want = (torch.rand(3, generator=model[2].g), torch.rand(3, generator=NOISE))
        torch.rand(5, generator=model[2].g)  # drawn further, as fast-forward never does
        NOISE = torch.Generator().manual_seed(99)  # another object, same name
        self.assertEqual(restore_tree(reg, tree, torch), [])
        self.assertTrue(torch.equal(torch.rand(3, generator=model[2].g), want[0]))
        self.assertTrue(torch.equal(torch.rand(3, generator=NOISE), want[1]))
        del model[2].g
        problems = restore_tree(reg, tree, torch)
        self.assertEqual(problems, ["generator module 0 2.g: not found here"])

    def test_a_different_model_is_reported_not_loaded(self):
        model, opt, sched, reg = make(0)
        tree = build_tree(reg)
        other = Registry()
        linear = nn.Linear(3, 3)  # the registry holds weak references
        other.note_root(linear)
        problems = restore_tree(other, tree, torch)
        self.assertTrue(any("module Linear" in p for p in problems), problems)
        self.assertTrue(any("0 optimizers here, 1 in the snapshot" in p for p in problems), problems)


if __name__ == "__main__":
    unittest.main()
