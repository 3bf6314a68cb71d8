"""_dlrr_native.RngStates (pyhook/ext/RngStates.cc) against RngCapture's Python path.

A batch delivery writes RngCapture.write(snapshot()); RngStates does it in C.  An
optimizer-counted step takes RngCapture.step_snapshot() where the previous step ended and writes
it with write_step() as it begins: an RngSnapshot in C.  Both paths must make the same C API calls
with the same bytes, the states of the moment the snapshot was taken, in every case the Python
path handles: numpy and random imported or not, a replaced numpy bit generator or random
generator, seeds changed, gaussian caches set, CUDA states (a stand-in torch.cuda), more states
than one packed call.

The extension is the build's (DLRR_TEST_NATIVE_EXT, set by CMake when it was built for this
interpreter); without it these tests are skipped, saying so.
"""

import gc
import os
import random
import sys
import types
import unittest
import warnings

import numpy as np
import torch

import fake_native
from dlrr_hook import native, rng
from test_native_hooks import EXT, load_extension


class _Cuda:
    """torch.cuda's two calls RngCapture makes, with states the test chooses."""

    def __init__(self, states):
        self.states = states

    def is_initialized(self):
        return self.states is not None

    def get_rng_state_all(self):
        return list(self.states)


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class RngStatesTest(unittest.TestCase):
    def setUp(self):
        self.ext = load_extension()
        self.lib = fake_native.FakeLib()
        self.addCleanup(self.check_fake)
        random.seed(1)
        np.random.seed(2)
        torch.manual_seed(3)

    def check_fake(self):
        self.assertEqual(self.lib.of("FAKE_ERROR"), [])

    def captures(self, torch_module=torch):
        python = rng.RngCapture(self.lib, torch_module, native_ext=None)
        fast = rng.RngCapture(self.lib, torch_module, native_ext=self.ext)
        self.assertIsNone(python._native)
        self.assertIsNotNone(fast._native, "RngStates must take a test double's ctypes callback")
        return python, fast

    def calls_of(self, capture):
        self.lib.clear()
        capture.write_snapshot()
        calls = list(self.lib.calls)
        self.lib.clear()
        return calls

    def assert_same(self, python, fast, native_used=True):
        """Both paths write the same calls now; RngStates did it itself when native_used."""
        expected = self.calls_of(python)
        self.assertTrue(expected)
        self.assertEqual(self.calls_of(fast), expected)
        self.lib.clear()
        self.assertEqual(fast._native.write(), native_used)
        if native_used:
            self.assertEqual(self.lib.calls, expected)
        else:
            self.assertEqual(self.lib.calls, [])
        self.assert_same_steps(python, fast, expected, native_used)
        return expected

    @staticmethod
    def queued(calls):
        """`calls` (a delivery's states) as write_step() makes them: one packed call (8 states at
        most) to dlrr_rng_states_queued, the writer thread not woken; more, one call each as before."""
        return calls + [("rng_states_queued", len(calls))] if len(calls) <= 8 else calls

    def assert_same_steps(self, python, fast, expected, native_used):
        """step_snapshot() now, then every generator drawn from, then write_step(): both paths write
        `expected`, the states of the snapshot's moment, queued; in C when native_used."""
        taken_python, taken_fast = python.step_snapshot(), fast.step_snapshot()
        self.assertIs(type(taken_python), list)
        self.assertIs(type(taken_fast), list if not native_used else self.ext.RngSnapshot)
        generators = ((random._inst.getstate, random._inst.setstate),
                      (np.random.mtrand._rand.get_state, np.random.mtrand._rand.set_state),
                      (torch.get_rng_state, torch.set_rng_state))
        saved = [get() for get, _ in generators]  # the caller's checks go on from these states
        try:
            random.gauss(0, 1)
            torch.rand(1)
            with warnings.catch_warnings():  # get_state()'s on another bit generator
                warnings.simplefilter("ignore", RuntimeWarning)
                np.random.standard_normal()
                self.assertNotEqual(self.calls_of(python), expected)  # the generators did move
            for capture, taken in ((python, taken_python), (fast, taken_fast)):
                for _ in range(2):  # a snapshot can be written again: the same calls
                    self.lib.clear()
                    capture.write_step(taken)
                    self.assertEqual(self.lib.calls, self.queued(expected))
        finally:
            for (_, set_state), state in zip(generators, saved):
                set_state(state)
            self.lib.clear()

    def test_every_generator_as_the_python_path(self):
        python, fast = self.captures()
        self.assertEqual(self.calls_of(fast), self.calls_of(python))  # first: numpy, random found
        draws = [lambda: None, lambda: random.random(), lambda: np.random.rand(3), lambda: torch.rand(2),
                 lambda: random.gauss(0, 1),  # gauss_next set
                 lambda: np.random.standard_normal(),  # numpy's gaussian cache set
                 lambda: random.seed(12), lambda: np.random.seed(13), lambda: random.gauss(0, 1),
                 lambda: random.gauss(0, 1), lambda: np.random.normal(size=3), lambda: random.getrandbits(77),
                 lambda: random.setstate(random.getstate()), lambda: np.random.set_state(np.random.get_state())]
        for draw in draws:
            draw()
            calls = self.assert_same(python, fast)
            self.assertEqual([c[1:3] for c in calls], [(native.RNG_TORCH_CPU, native.NO_DEVICE),
                                                       (native.RNG_NUMPY, native.NO_DEVICE),
                                                       (native.RNG_PYTHON, native.NO_DEVICE)])
            self.assertEqual(calls[1][3], rng.numpy_state_to_bytes(np.random.get_state()))
            self.assertEqual(calls[2][3], rng.python_state_to_bytes(random.getstate()))
            self.assertEqual(calls[0][3], torch.get_rng_state().numpy().tobytes())

    def test_numpy_and_random_not_imported_then_imported(self):
        saved = {name: sys.modules.pop(name) for name in ("numpy", "random")}
        try:
            python, fast = self.captures()
            calls = self.assert_same(python, fast)
            self.assertEqual([c[1] for c in calls], [native.RNG_TORCH_CPU])
            sys.modules["random"] = saved["random"]
            self.assertEqual(self.calls_of(fast), self.calls_of(python))  # found: the Python path once
            calls = self.assert_same(python, fast)
            self.assertEqual([c[1] for c in calls], [native.RNG_TORCH_CPU, native.RNG_PYTHON])
            sys.modules["numpy"] = saved["numpy"]
            self.assertEqual(self.calls_of(fast), self.calls_of(python))
            calls = self.assert_same(python, fast)
            self.assertEqual([c[1] for c in calls], [native.RNG_TORCH_CPU, native.RNG_NUMPY, native.RNG_PYTHON])
            del sys.modules["random"]  # gone again: no python state, as the Python path
            self.assert_same(python, fast)
            sys.modules["numpy"] = None  # an import blocked: as not imported
            python, fast = self.captures()
            calls = self.assert_same(python, fast)
            self.assertEqual([c[1] for c in calls], [native.RNG_TORCH_CPU])
        finally:
            sys.modules.update(saved)

    def test_a_generator_imported_later_takes_one_python_step_snapshot(self):
        saved = sys.modules.pop("random")
        try:
            python, fast = self.captures()
            self.assertIs(type(fast.step_snapshot()), list)  # the first: numpy found in Python
            self.assertIs(type(fast.step_snapshot()), self.ext.RngSnapshot)
        finally:
            sys.modules["random"] = saved
        taken = fast.step_snapshot()  # random seen: the Python path, and RngStates told where it is
        self.assertIs(type(taken), list)
        expected = self.calls_of(python)
        self.assertEqual([c[1] for c in expected], [native.RNG_TORCH_CPU, native.RNG_NUMPY, native.RNG_PYTHON])
        fast.write_step(taken)
        self.assertEqual(self.lib.calls, self.queued(expected))
        self.assertIs(type(fast.step_snapshot()), self.ext.RngSnapshot)  # in C from then on
        self.assert_same(python, fast)

    def test_a_replaced_numpy_bit_generator(self):
        python, fast = self.captures()
        self.assert_same(python, fast)
        rand = np.random.mtrand._rand
        original = rand._bit_generator
        rand._bit_generator = np.random.PCG64(5)  # get_state() is no MT19937 tuple: no numpy state
        try:
            with warnings.catch_warnings():  # get_state()'s on another bit generator
                warnings.simplefilter("ignore", RuntimeWarning)
                calls = self.assert_same(python, fast, native_used=False)
            self.assertEqual([c[1] for c in calls], [native.RNG_TORCH_CPU, native.RNG_PYTHON])
        finally:
            rand._bit_generator = original
        np.random.rand()
        self.assert_same(python, fast)

    def test_a_replaced_random_generator(self):
        python, fast = self.captures()
        self.assert_same(python, fast)
        other = random.Random(5)
        other.gauss(0, 1)
        saved = random.getstate
        random.getstate = other.getstate
        try:
            calls = self.assert_same(python, fast, native_used=False)
            self.assertEqual(calls[-1][3], rng.python_state_to_bytes(other.getstate()))
        finally:
            random.getstate = saved
        self.assert_same(python, fast)
        module = types.ModuleType("random")  # another random module in sys.modules
        module.getstate = other.getstate
        sys.modules["random"] = module
        try:
            self.assertEqual(self.calls_of(fast), self.calls_of(python))
            calls = self.assert_same(python, fast, native_used=False)  # not CPython's _random: getstate()
            self.assertEqual(calls[-1][3], rng.python_state_to_bytes(other.getstate()))
        finally:
            sys.modules["random"] = random
        self.assertEqual(self.calls_of(fast), self.calls_of(python))
        self.assert_same(python, fast)

    def test_unvalidated_numpy_layout_keeps_get_state(self):
        python, fast = self.captures()
        self.assert_same(python, fast)
        fast._numpy._address = None  # as when NumpyGlobalRng's check at start fails
        fast._configure_native(fast._native)
        self.assert_same(python, fast, native_used=False)

    def test_cuda_states(self):
        wide = torch.arange(24, dtype=torch.uint8).reshape(4, 6)
        cuda = _Cuda(None)
        fake_torch = types.SimpleNamespace(get_rng_state=torch.get_rng_state, cuda=cuda)
        python, fast = self.captures(fake_torch)
        self.assertEqual(self.calls_of(fast), self.calls_of(python))
        self.assert_same(python, fast)
        cuda.states = [torch.arange(16, dtype=torch.uint8), torch.arange(5, 21, dtype=torch.uint8)]
        calls = self.assert_same(python, fast)
        self.assertEqual([c[1:3] for c in calls[:3]], [(native.RNG_TORCH_CPU, -1), (native.RNG_TORCH_CUDA, 0),
                                                       (native.RNG_TORCH_CUDA, 1)])
        self.assertEqual(calls[2][3], bytes(range(5, 21)))
        cuda.states = [wide.t()]  # not contiguous: the Python path copies it
        self.assert_same(python, fast, native_used=False)
        cuda.states = [torch.zeros(3, dtype=torch.uint8)] * 6  # 9 states: one call per generator
        calls = self.assert_same(python, fast, native_used=False)
        self.assertEqual(len(calls), 9)
        cuda.states = [torch.zeros(3, dtype=torch.uint8)] * 5  # 8: one packed call still
        self.assert_same(python, fast)
        cuda.states = [b"a state as bytes"]  # not torch's: RngCapture.write packs bytes itself
        calls = self.assert_same(python, fast, native_used=False)
        self.assertEqual(calls[1][1:], (native.RNG_TORCH_CUDA, 0, b"a state as bytes"))

    def test_a_snapshot_keeps_its_states_alone(self):
        python, fast = self.captures()
        self.assert_same(python, fast)
        taken = fast.step_snapshot()
        expected = self.calls_of(python)
        gc.collect()  # its torch state, held by the snapshot only, stays
        torch.manual_seed(7)
        np.random.seed(8)
        random.seed(9)
        self.lib.clear()
        fast.write_step(taken)
        self.assertEqual(self.lib.calls, self.queued(expected))
        self.assertTrue(gc.is_tracked(taken))
        del taken
        gc.collect()
        refs = sys.getrefcount(torch.get_rng_state())  # no reference leaked by the snapshot's tensor
        for _ in range(3):
            fast.step_snapshot()
        self.assertEqual(sys.getrefcount(torch.get_rng_state()), refs)

    def test_a_snapshot_written_in_a_forked_child(self):
        python, fast = self.captures()
        taken = fast.step_snapshot()
        expected = self.calls_of(python)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the same snapshot, its memory copied
            try:
                os.close(read)
                np.random.seed(4)
                self.lib.clear()
                fast.write_step(taken)
                ok = self.lib.calls == self.queued(expected)
                os.write(write, b"same" if ok else b"differ")
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            said = f.read()
        os.waitpid(pid, 0)
        self.assertEqual(said, b"same")

    def test_errors_are_the_python_paths(self):
        def broken():
            raise RuntimeError("no state")
        fake_torch = types.SimpleNamespace(get_rng_state=broken, cuda=None)
        python, fast = self.captures(fake_torch)
        with self.assertRaisesRegex(RuntimeError, "no state"):
            python.write_snapshot()
        with self.assertRaisesRegex(RuntimeError, "no state"):
            fast.write_snapshot()
        for capture in (python, fast):
            with self.assertRaisesRegex(RuntimeError, "no state"):
                capture.step_snapshot()
        self.assertEqual(self.lib.calls, [])

    def test_uninitialised_and_bad_arguments(self):
        states = self.ext.RngStates.__new__(self.ext.RngStates)
        with self.assertRaises(RuntimeError):
            states.write()
        with self.assertRaises(RuntimeError):
            states.snapshot()
        with self.assertRaises(TypeError):
            self.ext.RngSnapshot()
        with self.assertRaises(RuntimeError):  # not made by RngStates.snapshot(): nothing to write
            self.ext.RngSnapshot.__new__(self.ext.RngSnapshot).write()
        self.assertEqual(self.lib.calls, [])
        with self.assertRaises(ValueError):
            self.ext.RngStates(rng_states_address=0, torch=torch, cuda=None)
        python, fast = self.captures()
        with self.assertRaises(TypeError):
            fast._native.configure((1, 2), None)
        with self.assertRaises(ValueError):
            fast._native.configure(None, (random, random._inst, 0))


if __name__ == "__main__":
    unittest.main()
