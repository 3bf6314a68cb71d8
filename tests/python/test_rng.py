"""RNG state serialisation (numpy, random) round trips and the per-step capture."""

import random
import unittest

import numpy as np
import torch

from support import RecorderTestCase  # first: puts the hook on sys.path
from dlrr_hook import native, rng


class SerialisationTest(unittest.TestCase):
    def test_numpy_round_trip_reproduces_draws(self):
        np.random.seed(1234)
        np.random.normal(size=3)  # leaves a cached gaussian behind
        np.random.standard_normal()
        state = np.random.get_state()
        data = rng.numpy_state_to_bytes(state)
        self.assertEqual(len(data), rng.NUMPY_STATE_SIZE)
        self.assertEqual(len(data), 2512)
        expected = np.random.normal(size=5).tolist() + np.random.randint(0, 1 << 30, 5).tolist()
        np.random.seed(99)
        restored = rng.numpy_state_from_bytes(data)
        np.random.set_state(restored)
        got = np.random.normal(size=5).tolist() + np.random.randint(0, 1 << 30, 5).tolist()
        self.assertEqual(got, expected)
        back = rng.numpy_state_from_bytes(data)
        self.assertEqual(rng.numpy_state_to_bytes(back), data)
        self.assertEqual(back[0], "MT19937")
        self.assertEqual(back[1].tolist(), state[1].tolist())
        self.assertEqual(back[2:], state[2:])

    def test_numpy_has_gauss_flag(self):
        np.random.seed(5)
        self.assertEqual(np.random.get_state()[3], 0)
        np.random.standard_normal()
        state = np.random.get_state()
        self.assertEqual(rng.numpy_state_from_bytes(rng.numpy_state_to_bytes(state))[3:], state[3:])

    def test_python_round_trip_reproduces_draws(self):
        r = random.Random(42)
        r.gauss(0, 1)  # gauss_next set
        for gauss_set in (True, False):
            state = r.getstate()
            self.assertEqual(state[2] is not None, gauss_set)
            data = rng.python_state_to_bytes(state)
            self.assertEqual(len(data), rng.PYTHON_STATE_SIZE)
            self.assertEqual(rng.python_state_from_bytes(data), state)
            expected = [r.random() for _ in range(3)] + [r.gauss(0, 1) for _ in range(3)]
            r2 = random.Random()
            r2.setstate(rng.python_state_from_bytes(data))
            self.assertEqual([r2.random() for _ in range(3)] + [r2.gauss(0, 1) for _ in range(3)], expected)
            r.gauss(0, 1)
            r.gauss(0, 1)  # consumes the pair: gauss_next None... or set again
            r = random.Random(7)

    def test_layout_is_documented_little_endian(self):
        state = (3, tuple(range(624)) + (624,), 0.25)
        data = rng.python_state_to_bytes(state)
        self.assertEqual(data[:4], (3).to_bytes(4, "little"))
        self.assertEqual(data[4:8], (0).to_bytes(4, "little"))
        self.assertEqual(data[2500:2504], (624).to_bytes(4, "little"))
        self.assertEqual(data[2504:2508], (1).to_bytes(4, "little"))

    def test_bad_sizes_raise(self):
        with self.assertRaises(ValueError):
            rng.numpy_state_from_bytes(b"x")
        with self.assertRaises(ValueError):
            rng.python_state_from_bytes(b"x")


class NumpyShortcutTest(unittest.TestCase):
    def test_reuse_only_while_nothing_moved(self):
        fast = rng.NumpyGlobalRng(np)
        self.assertIsNotNone(fast._address, "shortcut unavailable on this numpy")
        np.random.seed(11)
        cases = [lambda: None, lambda: np.random.rand(), lambda: None,
                 lambda: np.random.standard_normal(),   # generates a pair: caches one
                 lambda: np.random.standard_normal(),   # served from the cache: bitgen unmoved
                 lambda: None, lambda: np.random.seed(11), lambda: np.random.normal(size=3),
                 lambda: np.random.set_state(np.random.get_state())]
        for draw in cases:
            draw()
            self.assertEqual(fast.snapshot(), rng.numpy_state_to_bytes(np.random.get_state()))

    def test_other_bit_generator_layouts_fall_back(self):
        fast = rng.NumpyGlobalRng(np)
        fast._raw = b"stale"
        self.assertEqual(fast.snapshot(), rng.numpy_state_to_bytes(np.random.get_state()))


class PythonShortcutTest(unittest.TestCase):
    def test_memory_read_equals_getstate(self):
        fast = rng.PythonGlobalRng(random)
        self.assertIsNotNone(fast._address, "shortcut unavailable on this interpreter")
        random.seed(12)
        cases = [lambda: None, lambda: random.random(), lambda: None,
                 lambda: random.gauss(0, 1),   # draws a pair: caches one in gauss_next
                 lambda: random.gauss(0, 1),   # served from gauss_next: the state is unmoved
                 lambda: random.getrandbits(100), lambda: random.seed(12),
                 lambda: random.setstate(random.getstate()), lambda: random.shuffle(list(range(50)))]
        for draw in cases:
            draw()
            self.assertEqual(fast.snapshot(), rng.python_state_to_bytes(random.getstate()))

    def test_a_replaced_generator_falls_back(self):
        fast = rng.PythonGlobalRng(random)
        other = random.Random(5)
        saved = random.getstate
        random.getstate = other.getstate  # a job that swapped the module's generator
        try:
            self.assertEqual(fast.snapshot(), rng.python_state_to_bytes(other.getstate()))
        finally:
            random.getstate = saved


class CaptureTest(RecorderTestCase):
    def test_snapshot_has_every_imported_generator(self):
        torch.manual_seed(3)
        np.random.seed(4)
        random.seed(5)
        states = self.rec.rng.snapshot()
        kinds = [s[0] for s in states]
        self.assertEqual(kinds, [native.RNG_TORCH_CPU, native.RNG_NUMPY, native.RNG_PYTHON])
        self.rec.rng.write(states)
        calls = self.lib.of("rng_state")
        self.assertEqual(calls[0][3], torch.get_rng_state().numpy().tobytes())
        self.assertEqual(calls[0][2], native.NO_DEVICE)
        self.assertEqual(calls[1][3], rng.numpy_state_to_bytes(np.random.get_state()))
        self.assertEqual(calls[2][3], rng.python_state_to_bytes(random.getstate()))

    def test_states_cross_in_one_packed_call_read_back_exactly(self):
        self.assertTrue(rng.RngCapture._packed, "CPython's bytes layout expected on this interpreter")
        crossings = []
        packed = self.lib.dlrr_rng_states
        self.rec.rng._write_many = lambda n, items: (crossings.append(n), packed(n, items))
        wide = torch.arange(24, dtype=torch.uint8).reshape(4, 6)
        states = [(native.RNG_TORCH_CPU, native.NO_DEVICE, torch.arange(7, dtype=torch.uint8)),
                  (native.RNG_TORCH_CUDA, 1, wide.t()),  # not contiguous: written as its copy
                  (native.RNG_NUMPY, native.NO_DEVICE, b"numpy state"),
                  (native.RNG_PYTHON, native.NO_DEVICE, bytes(range(200)) * 13)]
        self.rec.rng.write(states)
        self.assertEqual(crossings, [4])
        self.assertEqual(self.lib.of("rng_state"),
                         [("rng_state", native.RNG_TORCH_CPU, native.NO_DEVICE, bytes(range(7))),
                          ("rng_state", native.RNG_TORCH_CUDA, 1, wide.t().contiguous().numpy().tobytes()),
                          ("rng_state", native.RNG_NUMPY, native.NO_DEVICE, b"numpy state"),
                          ("rng_state", native.RNG_PYTHON, native.NO_DEVICE, bytes(range(200)) * 13)])

    def test_more_states_than_the_packed_array_and_fork_states_go_one_by_one(self):
        many = [(native.RNG_TORCH_CUDA, d, bytes([d]) * 5) for d in range(9)]  # 9 devices > 8 items
        self.rec.rng.write(many)
        self.assertEqual([c[2:] for c in self.lib.of("rng_state")], [(d, bytes([d]) * 5) for d in range(9)])
        self.rec.rng.write(many[:2], at_fork=True)
        self.assertEqual([c[2:] for c in self.lib.of("rng_state_at_fork")], [(0, b"\0" * 5), (1, b"\1" * 5)])


if __name__ == "__main__":
    unittest.main()
