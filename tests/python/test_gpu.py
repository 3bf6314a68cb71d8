"""The hook's GPU side, exercised on CPU tensors: the device digest is device-agnostic (same
integer arithmetic on any device), so the algorithm, the deferred per-step transfer, the
failure ring of device tensors, OOM details and the GPU comparison are all testable here.
Runs the real thing on a GPU when one is there (test_device_digest_on_cuda_matches_cpu)."""

import ctypes
import math
import os
import unittest
import unittest.mock

import numpy as np
import torch
from torch import nn

from support import RecorderTestCase, small_model, train_step  # first: puts the hook on sys.path
from dlrr_hook import gpu, native

_M64 = (1 << 64) - 1


def reference_digest(t):
    """The algorithm of gpu.py's docstring, in plain numpy (uint64 arithmetic wraps mod 2^64)."""
    t = t.detach().contiguous()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    nbytes = len(raw)
    raw += b"\0" * ((-nbytes) % 4)
    words = np.frombuffer(raw, dtype="<i4").astype(np.int64).view(np.uint64)  # signed, widened
    idx = np.arange(len(words), dtype=np.uint64)
    with np.errstate(over="ignore"):
        w = (idx * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
        s1 = int(np.sum(words * w, dtype=np.uint64)) & _M64
        s2 = int(np.sum(words * words * w, dtype=np.uint64)) & _M64
    n = len(words)
    rot = ((s2 << 31) | (s2 >> 33)) & _M64
    return gpu._splitmix64(s1 ^ rot ^ ((n * 0x27D4EB2F165667C5) & _M64) ^ nbytes)


class DeviceDigestTest(unittest.TestCase):
    def setUp(self):
        self.d = gpu.DeviceDigester(torch)

    def test_matches_the_reference_for_every_dtype_and_odd_sizes(self):
        torch.manual_seed(0)
        cases = [torch.randn(7, 5), torch.randn(3).double(), torch.randn(9).half(), torch.randn(5).bfloat16(),
                 torch.randint(-1000, 1000, (11,)), torch.randint(0, 255, (13,), dtype=torch.uint8),
                 torch.tensor([True, False, True]), torch.randint(-5, 5, (6,), dtype=torch.int16),
                 torch.zeros(0), torch.tensor(3.5)]
        for t in cases:
            with self.subTest(dtype=t.dtype, shape=tuple(t.shape)):
                self.assertEqual(self.d.digest(t)[0], reference_digest(t))

    def test_complex_parts_are_counted_as_the_host_digest_counts_them(self):
        t = torch.tensor([complex(1.0, float("inf")), complex(float("nan"), -2.0), complex(0.5, 3.0)])
        h, nan, inf, lo, hi = self.d.digest(t)
        self.assertEqual((nan, inf, lo, hi), (1, 1, -2.0, 3.0))
        self.assertEqual(h, reference_digest(t))  # the same bytes hash the same
        self.assertEqual(self.d.digest(t.to(torch.complex128))[1:3], (1, 1))
        self.assertEqual(self.d.digest(t.conj())[1:3], (1, 1))  # a conjugate view: its values

    def test_statistics_follow_the_host_digest(self):
        t = torch.tensor([1.0, float("nan"), -3.0, float("inf"), 2.5, float("-inf")])
        h, nan, inf, lo, hi = self.d.digest(t)
        self.assertEqual((nan, inf, lo, hi), (1, 2, -3.0, 2.5))
        h, nan, inf, lo, hi = self.d.digest(torch.tensor([float("nan")] * 3))
        self.assertEqual((nan, inf), (3, 0))
        self.assertTrue(math.isnan(lo) and math.isnan(hi))
        _, nan, inf, lo, hi = self.d.digest(torch.tensor([4, -9, 2]))
        self.assertEqual((nan, inf, lo, hi), (0, 0, -9.0, 4.0))
        _, _, _, lo, hi = self.d.digest(torch.zeros(0, dtype=torch.int64))
        self.assertTrue(math.isnan(lo) and math.isnan(hi))
        _, nan, _, lo, hi = self.d.digest(torch.tensor([1.5, float("nan")], dtype=torch.float16))
        self.assertEqual((nan, lo, hi), (1, 1.5, 1.5))

    def test_bit_sensitive_and_layout_independent(self):
        t = torch.randn(64, 32)
        base = self.d.digest(t)[0]
        u = t.clone()
        u.view(-1)[1000] = torch.nextafter(u.view(-1)[1000], torch.tensor(math.inf))  # one ulp
        self.assertNotEqual(self.d.digest(u)[0], base)
        self.assertNotEqual(self.d.digest(t.flip(0))[0], base)  # positions matter
        self.assertEqual(self.d.digest(t.t().contiguous().t())[0], base)  # strides do not
        self.assertNotEqual(self.d.digest(t.double())[0], base)
        zero = torch.zeros(4)
        self.assertNotEqual(self.d.digest(zero)[0], self.d.digest(torch.zeros(5))[0])  # length counts

    def test_weights_are_cached_within_a_budget(self):
        cpu = torch.device("cpu")
        d = gpu.DeviceDigester(torch, weight_cache_bytes=8 * 1000)
        a = d.weights(100, cpu)
        self.assertIs(d.weights(100, cpu), a)
        signed = lambda v: v - (1 << 64) if v >= 1 << 63 else v  # noqa: E731
        self.assertEqual(a[:3].tolist(), [signed(((i * 0x9E3779B97F4A7C15) & _M64) | 1) for i in range(3)])
        for n in (200, 240, 250, 230):  # the last one is over budget: the least recently used goes
            d.weights(n, cpu)
        self.assertLessEqual(d._weight_bytes, 8 * 1000)
        self.assertNotIn((cpu, 100), d._weights)
        self.assertEqual(d.weights(5000, cpu).numel(), 5000)  # too big to cache
        self.assertNotIn((cpu, 5000), d._weights)

    def test_launch_does_not_synchronise_and_finish_is_pure(self):
        stats, numel, nbytes, name = self.d.launch(torch.arange(10.0))
        self.assertEqual(stats.dtype, torch.int64)
        self.assertEqual(tuple(stats.shape), (6,))
        self.assertEqual((numel, nbytes, name), (10, 40, "float32"))
        self.assertEqual(gpu.DeviceDigester.finish(stats.tolist(), numel, nbytes, name),
                         self.d.digest(torch.arange(10.0)))

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: the GPU half of this check is skipped")
    def test_device_digest_on_cuda_matches_cpu(self):
        torch.manual_seed(1)
        for t in (torch.randn(1000, 33), torch.randint(0, 7, (999,), dtype=torch.uint8), torch.randn(17).half()):
            self.assertEqual(self.d.digest(t.cuda()), self.d.digest(t))


def _ordered_key(x):
    """DigestKernel.cu's orderedKey of a float64."""
    b = int(np.array([x], dtype=np.float64).view(np.uint64)[0])
    return (~b & _M64) if b >> 63 else (b | (1 << 63))


def kernel_in_python(data, nbytes, numel, element, out, stream):
    """What DigestKernel.cu writes into its row, computed on the host from the CPU tensor's
    bytes: lets FusedDigester's slab, fetch and key decoding run here without a GPU."""
    raw = ctypes.string_at(data, nbytes) + b"\0" * ((-nbytes) % 4)
    words = np.frombuffer(raw, dtype="<i4").astype(np.int64).view(np.uint64)
    idx = np.arange(len(words), dtype=np.uint64)
    with np.errstate(over="ignore"):
        w = (idx * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
        y = words * w
        s1, s2 = int(np.sum(y, dtype=np.uint64)), int(np.sum(y * words, dtype=np.uint64))
    np_type = {1: "<f4", 2: "<f8", 3: "<f2", 5: "<i8", 6: "<i4", 7: "<i2", 8: "i1", 9: "u1"}.get(element)
    row = (ctypes.c_uint64 * 6).from_address(out)
    row[0] = (row[0] + s1) & _M64
    row[1] = (row[1] + s2) & _M64
    if element == 4:  # bfloat16: the high half of a float32
        values = (np.frombuffer(raw[:nbytes], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
    elif np_type is None:
        return 0
    else:
        values = np.frombuffer(raw[:nbytes], dtype=np_type)
    values = values.astype(np.float64)
    if element <= 4:
        row[2] += int(np.isnan(values).sum())
        row[3] += int(np.isinf(values).sum())
        values = values[np.isfinite(values)]
    for v in values:
        k = _ordered_key(v)
        row[4] = min(row[4], k)
        row[5] = max(row[5], k)
    return 0


class FusedDigesterTest(unittest.TestCase):
    """FusedDigester's host side (slab rows, one fetch a slab, presets, keys back to float64)
    with the kernel's arithmetic done in Python on CPU tensors; the kernel itself runs in
    test_fused_kernel_on_cuda_matches_the_torch_ops where a GPU is."""

    def setUp(self):
        self.ops = gpu.DeviceDigester(torch)
        self.fused = gpu.FusedDigester(torch, kernel_in_python, lambda index: 0, capacity=8)

    def cases(self):
        torch.manual_seed(3)
        x = torch.randn(64, 5)
        x[3, 1] = float("nan")
        x[7, 2] = float("-inf")
        return [x, torch.randn(17).half(), torch.randn(9).bfloat16(), torch.randn(33, dtype=torch.float64),
                torch.randint(-9, 9, (31,), dtype=torch.int64), torch.randint(0, 255, (13,), dtype=torch.uint8),
                torch.tensor([True, False, True]), torch.tensor([float("nan")] * 4), torch.zeros(0),
                torch.tensor(2.5), torch.randn(8, 6)[:, ::2], torch.tensor([-0.0, 1.0, -3.5])]

    def test_same_digest_as_the_torch_ops(self):
        for t in self.cases():
            self.assertEqual(self.fused.digest(t), self.ops.digest(t), t)

    def test_deferred_rows_fetched_together_then_preset_again(self):
        for _ in range(3):  # over a recycle each time, and past the slab's capacity within a round
            cases = self.cases()
            stats = [self.fused.launch(t) for t in cases[:8]]
            values = self.fused.fetch([s[0] for s in stats])
            got = [self.fused.finish(v, *s[1:]) for v, s in zip(values, stats)]
            self.assertEqual(got, [self.ops.digest(t) for t in cases[:8]])
            self.fused.recycle()
            slab, preset, used = self.fused._slabs[torch.device("cpu")]
            self.assertEqual(used, 0)
            self.assertTrue(torch.equal(slab, preset))
        # Immediate digests (replay) wrap around a full slab, presetting it whole.
        for t in self.cases() * 2:
            self.assertEqual(self.fused.digest(t), self.ops.digest(t))

    def test_a_failed_launch_raises(self):
        failing = gpu.FusedDigester(torch, lambda *a: 700, lambda index: 0)
        with self.assertRaisesRegex(RuntimeError, "CUDA error 700"):
            failing.launch(torch.ones(3))

    def test_no_kernel_without_a_driver_or_with_ops_asked_for(self):
        import fake_native
        self.assertIsNone(gpu.FusedDigester.load(torch, fake_native.FakeLib()))
        self.assertIn("fake", gpu.FusedDigester.why)
        self.assertIsInstance(gpu.make_digester(torch, fake_native.FakeLib()), gpu.DeviceDigester)
        with unittest.mock.patch.dict(os.environ, {"DLRR_GPU_DIGEST": "ops"}):
            self.assertIsNone(gpu.FusedDigester.load(torch, fake_native.FakeLib()))
            self.assertEqual(gpu.FusedDigester.why, "DLRR_GPU_DIGEST=ops")

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device: the GPU half of this check is skipped")
    def test_fused_kernel_on_cuda_matches_the_torch_ops(self):
        lib = native.load()
        if lib is None:
            self.skipTest("libdlrr is not preloaded (LD_PRELOAD=.../libdlrr.so: its thread-locals need it)")
        fused = gpu.FusedDigester.load(torch, lib)
        self.assertIsNotNone(fused, gpu.FusedDigester.why)
        for t in self.cases() + [torch.randn(1 << 20), torch.randn(4097, 3).half()]:
            self.assertEqual(fused.digest(t.cuda())[:3], self.ops.digest(t)[:3], t.dtype)
            self.assertEqual(fused.digest(t.cuda())[:3], self.ops.digest(t.cuda())[:3], t.dtype)


class _AllTensorsOnTheDevice:
    """Routes every tensor through the device path, as CUDA tensors would be."""

    def setUp(self):
        self._applies = gpu.GpuDigests.__dict__["applies"]  # the staticmethod itself
        gpu.GpuDigests.applies = staticmethod(lambda t: True)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        gpu.GpuDigests.applies = self._applies


class DeferredDigestsTest(_AllTensorsOnTheDevice, RecorderTestCase):
    def test_one_batch_of_device_digests_per_step_before_its_commit(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = [train_step(model, optimizer, torch.randn(8, 3)) for _ in range(3)]
        self.rec._at_exit()
        self.assertEqual(self.lib.of("digest"), [], "no host digest of a device tensor")
        values = self.lib.of("digest_values")
        self.assertTrue(values)
        self.assertTrue(all(c[7] == native.DIGEST_DEVICE_SUM for c in values))
        # Each step's digests arrive in one run right before its step_end, in the order taken.
        names = [c[0] for c in self.lib.calls if c[0] in ("digest_values", "step_end", "step_begin")]
        step_runs = "".join("d" if n == "digest_values" else "|" if n == "step_end" else "b" for n in names)
        self.assertEqual(step_runs.count("|"), 3)
        for run in step_runs.split("|")[:3]:
            self.assertRegex(run, r"^b?d+$")
        # The loss of each step is the CUDA loss, fetched with the step's digests.
        self.assertEqual([c[2] for c in self.lib.of("step_end")], losses)
        first = [c for c in values if c[1] == native.DIGEST_MODULE_OUTPUT][0]
        self.assertEqual(first[2:7], ("0 (Linear)", 0, 0, "float32", [8, 4]))
        self.assertTrue(0 <= first[8][0] < (1 << 64))
        # The digest kernels run paused: they are not part of the job's captured launches.
        pauses = [c[1] for c in self.lib.of("gpu_pause")]
        self.assertTrue(pauses)
        self.assertEqual(pauses, [1, 0] * (len(pauses) // 2))
        self.assert_no_status_errors()

    def test_device_tensors_of_a_failing_step_are_copied_to_the_ring_first(self):
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(model, optimizer, torch.randn(8, 3))
        self.assertEqual(self.lib.of("keep_tensor"), [])  # healthy steps copy nothing
        bad = torch.randn(8, 3)
        bad[2, 1] = float("nan")
        train_step(model, optimizer, bad)
        kept = self.lib.of("keep_tensor")
        self.assertTrue(kept)
        self.assertEqual({c[2] for c in kept if c[1] == native.DIGEST_MODULE_OUTPUT}, {"", "0 (Linear)", "1 (ReLU)", "2 (Linear)"})
        keep_at = self.lib.calls.index(kept[0])
        nan_at = next(i for i, c in enumerate(self.lib.calls) if c[0] == "digest_values" and c[8][1])
        self.assertLess(keep_at, nan_at, "ring bytes before the failing digest (the native ring flushes then)")
        out0 = [c for c in kept if c[2] == "0 (Linear)" and c[1] == native.DIGEST_MODULE_OUTPUT][0]
        self.assertEqual(len(out0[7]), 8 * 4 * 4)

    def test_the_ring_budget_bounds_what_is_held(self):
        self.rec.gpu.ring_bytes = 8 * 4 * 4  # room for one [8, 4] float32 output
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        bad = torch.full((8, 3), float("nan"))
        train_step(model, optimizer, bad)
        kept = self.lib.of("keep_tensor")
        self.assertEqual(len(kept), 1)

    def test_a_long_stretch_without_step_end_flushes_early(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(model, optimizer, torch.randn(8, 3))
        old, gpu.MAX_PENDING = gpu.MAX_PENDING, 10
        try:
            with torch.no_grad():
                for _ in range(10):  # evaluation after training: 4 module outputs each, no step end
                    model(torch.randn(2, 3))
        finally:
            gpu.MAX_PENDING = old
        self.assertLess(len(self.rec.gpu._pending), 10)
        self.assertGreaterEqual(len(self.lib.of("digest_values")), 30)

    def test_an_uncaught_exception_first_delivers_the_steps_digests(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(model, optimizer, torch.randn(8, 3))
        model(torch.randn(8, 3))  # step 1's forward, then the job dies
        n_before = len(self.lib.of("digest_values"))
        try:
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        except RuntimeError as exc:
            self.rec.failures.report(type(exc), exc, exc.__traceback__)
        self.assertGreater(len(self.lib.of("digest_values")), n_before)
        failure = self.lib.of("failure_exception")[0]
        names = self.lib.names()
        self.assertLess(max(i for i, n in enumerate(names) if n == "digest_values"), names.index("failure_exception"))
        self.assertIn("CUDA out of memory. Tried to allocate 20.00 GiB\n[dlrr] GPU out of memory", failure[2])


class FullCaptureKeepsTheHostPath(_AllTensorsOnTheDevice, RecorderTestCase):
    capture_level = native.CAPTURE_FULL

    def test_full_capture_copies_device_tensors_as_before(self):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_step(model, optimizer, torch.randn(8, 3))
        self.assertEqual(self.lib.of("digest_values"), [])
        self.assertTrue(self.lib.of("digest"))


class ImmediateDigestsTest(unittest.TestCase):
    def test_replay_checks_each_digest_at_once(self):
        import fake_native
        from dlrr_hook.tensors import TensorMarshal
        lib = fake_native.FakeLib(mode=native.MODE_REPLAY)
        lib.digest_values_result = 1
        g = gpu.GpuDigests(lib, torch, TensorMarshal(torch), deferred=False, keep_ring=False)
        rc = g.digest(native.DIGEST_MODULE_OUTPUT, b"fc", 0, 0, torch.ones(2, 2), 0)
        self.assertEqual(rc, 1)
        call = lib.of("digest_values")[0]
        self.assertEqual(call[1:8], (0, "fc", 0, 0, "float32", [2, 2], native.DIGEST_DEVICE_SUM))
        self.assertEqual(call[8][0], gpu.DeviceDigester(torch).digest(torch.ones(2, 2))[0] & ((1 << 64) - 1))
        self.assertIsNone(g.flush())


class OutOfMemoryTest(unittest.TestCase):
    def test_recognises_cuda_oom(self):
        self.assertTrue(gpu.is_out_of_memory(torch, RuntimeError("CUDA out of memory. Tried to allocate 2 MiB")))
        oom = getattr(torch.cuda, "OutOfMemoryError", None)
        if oom is not None:
            self.assertTrue(gpu.is_out_of_memory(torch, oom("CUDA out of memory.")))
        self.assertFalse(gpu.is_out_of_memory(torch, RuntimeError("shape mismatch")))
        self.assertFalse(gpu.is_out_of_memory(torch, MemoryError()))
        self.assertEqual(gpu.out_of_memory_detail(torch, ValueError("x")), ("", []))

    def test_figures_of_every_device(self):
        class FakeCuda:
            def is_initialized(self):
                return True

            def device_count(self):
                return 2

            def memory_allocated(self, d):
                return 100 << 20

            def max_memory_allocated(self, d):
                return (200 + d) << 20

            def memory_reserved(self, d):
                return 300 << 20

            def max_memory_reserved(self, d):
                return 400 << 20

            def get_device_properties(self, d):
                raise RuntimeError("broken")

            OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})

        class FakeTorch:
            cuda = FakeCuda()

        detail, items = gpu.out_of_memory_detail(FakeTorch, RuntimeError("CUDA out of memory."))
        self.assertIn("cuda:0: allocated 100.0 MiB, max allocated 200.0 MiB, reserved 300.0 MiB", detail)
        self.assertIn("cuda:1: allocated 100.0 MiB, max allocated 201.0 MiB", detail)
        self.assertIn(("cuda.oom.device.1.max_allocated", str(201 << 20)), items)


class GpuComparisonTest(unittest.TestCase):
    recorded = {"cuda.initialized": "1", "cuda.device_count": "1", "cuda.device.0": "NVIDIA H100 80GB HBM3",
                "cuda.device.0.sm_count": "132", "cuda.device.0.capability": "9.0", "cuda.driver": "580.65.06",
                "cudnn.version": "91002", "cudnn.benchmark": "0"}

    def lookup(self, key):
        return self.recorded.get(key)

    def test_same_gpu_no_warning(self):
        self.assertEqual(gpu.compare_gpu(self.lookup, dict(self.recorded)), [])

    def test_another_gpu_or_driver_is_named(self):
        here = dict(self.recorded, **{"cuda.device.0": "NVIDIA H200", "cuda.device.0.sm_count": "132",
                                      "cuda.driver": "575.1"})
        warnings = gpu.compare_gpu(self.lookup, here)
        self.assertEqual(len(warnings), 2)
        self.assertIn("cuda.device.0: recorded NVIDIA H100 80GB HBM3, here NVIDIA H200", warnings[0])
        self.assertIn("bit-exact replay cannot be expected", warnings[0])
        self.assertIn("cuda.driver differs: recorded 580.65.06, here 575.1", warnings[1])

    def test_no_gpu_here(self):
        warnings = gpu.compare_gpu(self.lookup, {"cuda.initialized": "0"})
        self.assertEqual(len(warnings), 1)
        self.assertIn("ran on NVIDIA H100 80GB HBM3", warnings[0])

    def test_cuda_facts_are_empty_without_a_driver(self):
        facts = dict(gpu.cuda_facts(torch))
        if not torch.cuda.is_available():
            self.assertNotIn("cuda.driver_api", facts)


if __name__ == "__main__":
    unittest.main()
