"""The hook's preflight side (dlrr_hook/preflight.py) on its own: finding the loop around an
update, leaving it after K updates (for, while with break, a helper function's caller), the
loops that cannot be left, DataLoader passes cut to K batches with their phase, and the paths
and environment variables the job's own code used."""

import os
import sys
import tempfile
import unittest

import torch
from torch.utils.data import DataLoader, TensorDataset

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
from dlrr_hook import preflight
from dlrr_hook.patching import Patcher


class Facts:
    def __init__(self):
        self.items = []

    def __call__(self, key, value):
        self.items.append((key, value))

    def values(self, kind):
        return [v for k, v in self.items if k.startswith("preflight.%s." % kind)]


def make(k=2):
    facts = Facts()
    return preflight.Preflight(None, k, facts), facts


LOOPS_UNSUPPORTED = sys.version_info[:2] not in preflight.LOOP_JUMP_VERSIONS
LOOPS_WHY = ("leaving a loop without a DataLoader depends on each Python's loop layout and is enabled on "
             "the versions it was checked on only (preflight.LOOP_JUMP_VERSIONS)")


class LoopTest(unittest.TestCase):
    def test_k_from_the_environment(self):
        self.assertEqual(preflight.preflight_batches({"DLRR_PREFLIGHT": "3"}), 3)
        for bad in ("", "0", "-1", "2x", " 2"):
            self.assertEqual(preflight.preflight_batches({"DLRR_PREFLIGHT": bad}), 0, bad)
        self.assertEqual(preflight.preflight_batches({}), 0)

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_find_loop_names_the_innermost_loop_and_its_break(self):
        def job(step):
            for epoch in range(3):
                n = 0
                while True:
                    step()
                    n += 1
                    if n > 5:
                        break
        code = job.__code__
        calls = [x.offset for x in __import__("dis").get_instructions(code) if x.opname in ("CALL", "CALL_FUNCTION")]
        start, exit_offset, break_line = preflight.find_loop(code, calls[-1])
        self.assertIsNotNone(break_line)
        self.assertEqual(__import__("linecache").getline(code.co_filename, break_line).strip(), "break")
        self.assertIsNone(preflight.find_loop(code, 0))  # before any loop

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_for_while_and_caller_loops_are_left_after_k_updates(self):
        pf, facts = make(3)
        ran = []

        def update():
            pf.on_update("step")

        def train_step():
            update()

        for i in range(100):
            train_step()  # the loop is here, one frame above the update's caller
            ran.append(("for", i))
        n = 0
        while True:
            update()
            n += 1
            if n >= 50:
                break
        ran.append(("while", n))
        self.assertEqual([r for r in ran if r[0] == "for"], [("for", 0), ("for", 1), ("for", 2)])
        self.assertEqual(ran[-1], ("while", 3))
        loops = facts.values("loop")
        self.assertEqual(len(loops), 2, loops)
        self.assertTrue(all(v.startswith("cut: test_preflight.py:") for v in loops), loops)

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_an_inner_loop_ending_its_epoch_is_left_by_its_break(self):
        # 3.13 compiles this break as a jump to the epoch loop's header and numbers the while's
        # exit with the header's line: jumping to that line would restart the epoch loop.
        pf, facts = make(2)
        per_epoch = []

        def train():
            for epoch in range(3):
                n = 0
                while True:
                    pf.on_update("step")
                    n += 1
                    per_epoch.append((epoch, n))
                    if n >= 50:
                        break

        train()
        self.assertEqual(per_epoch, [(e, n) for e in range(3) for n in (1, 2)])
        loops = facts.values("loop")
        self.assertEqual(len(loops), 3, loops)
        self.assertTrue(all(v.startswith("cut: test_preflight.py:") for v in loops), loops)

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_a_while_loop_on_its_condition_is_left(self):
        # 3.11 repeats `step < max_steps` at the loop's bottom with a conditional backward jump.
        pf, facts = make(2)
        step, max_steps = 0, 100
        while step < max_steps:
            pf.on_update("step")
            step += 1
        self.assertEqual(step, 2)
        self.assertEqual(len(facts.values("loop")), 1)
        self.assertTrue(facts.values("loop")[0].startswith("cut: test_preflight.py:"), facts.values("loop"))

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_a_loop_followed_by_a_with_block_is_not_jumped_into_the_withs_exit(self):
        # The with's line also numbers its exit code, where __exit__ would be the loop's
        # iterator: jumping there raised "'range_iterator' object is not callable".
        pf, facts = make(2)
        ran, entered = [], []

        class Block:
            def __enter__(self):
                entered.append(True)

            def __exit__(self, *exc):
                return False

        for epoch in range(2):
            for it in range(20):
                pf.on_update("step")
                ran.append(it)
            with Block():
                pass
        # Never into a false error: the inner loop runs its course, the with block runs, and the
        # epoch loop around them is left at its header.
        self.assertEqual(len(ran), 20)
        self.assertEqual(len(entered), 1)
        loops = facts.values("loop")
        self.assertEqual(len(loops), 2, loops)
        self.assertIn("the line after it also holds other code", loops[0])
        self.assertTrue(loops[1].startswith("cut: test_preflight.py:"), loops)

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_a_loop_with_no_line_after_it_is_reported_and_runs_to_its_end(self):
        pf, facts = make(2)
        count = []

        def loop_at_the_end():
            for i in range(10):
                pf.on_update("step")
                count.append(i)

        loop_at_the_end()
        loop_at_the_end()
        self.assertEqual(len(count), 20)
        loops = facts.values("loop")
        self.assertEqual(len(loops), 1, loops)  # said once, not at every K updates
        self.assertIn("not cut", loops[0])

    @unittest.skipIf(LOOPS_UNSUPPORTED, LOOPS_WHY)
    def test_backward_counts_only_without_an_optimizer(self):
        pf, facts = make(2)
        seen = []
        for i in range(10):
            pf.on_update("backward")  # first backward, then the job's first optimizer step:
            pf.on_update("step")      # one update, not two
            seen.append(i)
        self.assertEqual(seen, [0, 1])


    @unittest.skipUnless(LOOPS_UNSUPPORTED, "this Python leaves loops (tested above)")
    def test_on_other_pythons_loops_run_whole_and_the_report_says_so(self):
        pf, facts = make(2)
        ran = []
        for i in range(6):
            pf.on_update("step")
            ran.append(i)
        self.assertEqual(len(ran), 6)
        loops = facts.values("loop")
        self.assertEqual(len(loops), 1, loops)
        self.assertIn("not supported on Python", loops[0])


class PassTest(unittest.TestCase):
    def setUp(self):
        self.pf, self.facts = make(2)
        self.patcher = Patcher()
        import torch.utils.data.dataloader as dataloader
        self.pf.install_torch(self.patcher, torch, dataloader)

    def tearDown(self):
        self.patcher.restore()

    def test_passes_are_cut_to_k_batches_with_their_phase(self):
        data = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
        train, val = DataLoader(data, batch_size=4), DataLoader(data, batch_size=5)
        for epoch in range(2):
            got = []
            for x, y in train:
                got.append(y.tolist())
                self.pf.on_update("step")
            self.assertEqual(got, [[0, 1, 2, 3], [4, 5, 6, 7]])
            with torch.no_grad():
                self.assertEqual(sum(1 for _ in val), 2)
        passes = self.facts.values("pass")
        self.assertEqual(len(passes), 4)
        self.assertTrue(passes[0].startswith("loader=0 dataset=TensorDataset phase=training batches=2 of=5 cut=1"),
                        passes[0])
        self.assertTrue(passes[1].startswith("loader=1 dataset=TensorDataset phase=evaluation batches=2 of=4 cut=1"),
                        passes[1])

    def test_a_short_pass_is_not_cut(self):
        data = TensorDataset(torch.zeros(3, 1))
        self.assertEqual(sum(1 for _ in DataLoader(data, batch_size=2)), 2)
        self.assertIn("batches=2 of=2 cut=0", self.facts.values("pass")[0])

    def test_saves_and_their_paths(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.pt")
            torch.save({"a": 1}, path)
            with self.assertRaises(Exception):
                torch.save({"a": 1}, os.path.join(d, "missing", "m.pt"))
        saves = self.facts.values("save")
        self.assertEqual(len(saves), 2)
        self.assertTrue(saves[0].startswith("torch.save %s ok" % path), saves)
        self.assertIn("failed: ", saves[1])
        self.assertIn("write %s" % path, self.facts.values("path"))


class FakeCuda:
    """torch.cuda's peak statistics, scripted: a GPU this machine does not have."""

    def __init__(self):
        self.peak = 0

    def is_initialized(self):
        return True

    def device_count(self):
        return 1

    def max_memory_allocated(self, device):
        return self.peak


class GpuPeakTest(unittest.TestCase):
    def test_a_pass_reports_the_allocator_peak_and_whether_it_reached_it(self):
        pf, facts = make(2)
        cuda = FakeCuda()
        pf._torch = type("FakeTorch", (), {"cuda": cuda})
        it = type("It", (), {"_num_yielded": 0})()
        cuda.peak = 100
        p = pf._begin_pass(it)
        cuda.peak = 250  # the training pass allocated more
        pf._end_pass(it, p, True)
        it2 = type("It", (), {"_num_yielded": 0})()
        p2 = pf._begin_pass(it2)
        pf._end_pass(it2, p2, True)  # evaluation stayed below: no new peak
        passes = facts.values("pass")
        self.assertTrue(passes[0].endswith("gpu_peak=250 gpu_new_peak=1"), passes[0])
        self.assertTrue(passes[1].endswith("gpu_peak=250 gpu_new_peak=0"), passes[1])


class UseTest(unittest.TestCase):
    def test_paths_and_environment_read_by_the_jobs_code(self):
        pf, facts = make(2)
        pf.install()
        try:
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "x.txt"), "w") as f:
                    f.write("x")
                os.listdir(d)
                os.environ.get("DLRR_TEST_SURELY_UNSET")
                os.environ["PATH"]
                paths = facts.values("path")
                self.assertIn("write %s" % os.path.join(d, "x.txt"), paths)
                self.assertIn("list %s" % d, paths)
            env = facts.values("env")
            self.assertTrue(any(v.startswith("DLRR_TEST_SURELY_UNSET unset test_preflight.py:") for v in env), env)
            self.assertTrue(any(v.startswith("PATH set test_preflight.py:") for v in env), env)
            # Reads by the standard library and by installed packages are not the job's.
            import tempfile as _t
            _t.gettempdir()
            self.assertFalse(any(v.startswith("TMPDIR") for v in facts.values("env")), facts.values("env"))
        finally:
            pf.active = False  # an audit hook cannot be removed; this one is now inert
            type(os.environ).__getitem__ = type(os.environ).__getitem__.__dlrr_original__


if __name__ == "__main__":
    unittest.main()
