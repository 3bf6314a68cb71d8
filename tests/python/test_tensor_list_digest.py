"""The native gradient and parameter digests (_dlrr_native.TensorListDigest,
pyhook/ext/TensorListDigest.cc) against the Python loops of session.py.

The same job runs twice on the fake library, with and without the extension, and the calls the
library sees must be identical, digests' bytes included: dense CPU tensors gathered in C, the
rest (None gradients, non-contiguous, half and complex tensors, parameters off the CPU, unnamed
optimizer parameters, tensors past 64 KiB digested without the GIL) where the Python loops send
them, in the same order.  A fake that notes each dlrr_digest_many call shows the C path is taken.

The extension is the build's (DLRR_TEST_NATIVE_EXT, set by CMake when it was built for this
interpreter); without it these tests are skipped, saying so.
"""

import os
import sys
import unittest

import fake_native
import torch
from torch import nn

import dlrr_hook
from dlrr_hook import gpu, native
from test_native_hooks import EXT, NAME, WithExtension

GRADIENT, PARAMETER = native.DIGEST_GRADIENT, native.DIGEST_PARAMETER


class ManyFake(fake_native.FakeLib):
    """The fake, noting each dlrr_digest_many call (kind, n) before the digests it stands for."""

    def _dlrr_digest_many(self, kind, n, items):
        self.calls.append(("many", kind, n))
        return super()._dlrr_digest_many(kind, n, items)


class Odd(nn.Module):
    """Parameters the C path hands to Python."""

    def __init__(self):
        super().__init__()
        self.transposed = nn.Parameter(torch.ones(4, 3).t())  # not contiguous, nor its gradient
        self.fp16 = nn.Parameter(torch.ones(3, dtype=torch.float16))
        self.cplx = nn.Parameter(torch.ones(3, dtype=torch.complex64))
        self.unused = nn.Parameter(torch.ones(2))  # its gradient stays None


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.big = nn.Linear(4, 8192)  # a 128 KiB weight: digested without the GIL
        self.odd = Odd()
        self.after = nn.Linear(4, 2)  # dense again after the Python ones: the order shows

    def forward(self, x):
        y = self.lin(x)
        odd = self.odd
        y = y + (x @ odd.transposed).sum() + (x * odd.fp16.float()).sum() + odd.cplx.real.sum()
        return self.big(y).mean() + self.after(y).sum()


def job(steps=3, extra=True):
    torch.manual_seed(0)
    model = Net()
    groups = [{"params": list(model.parameters())}]
    if extra:
        # A second group of parameters no root owns ("optimizer0.group1.<i>"), one of them on the
        # meta device (no bytes to read: skipped, as the Python loop does), between two dense ones.
        groups.append({"params": [nn.Parameter(torch.ones(2)), nn.Parameter(torch.empty(2, device="meta")),
                                  nn.Parameter(torch.ones(3, 2).t())], "lr": 0.0})
    optimizer = torch.optim.SGD(groups, lr=0.01)
    x = torch.ones(2, 3)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        model(x).backward()
        optimizer.step()


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class TensorListDigestTest(WithExtension, unittest.TestCase):
    def record(self, use_native, action=job, fake=ManyFake):
        lib = fake()
        with self.installed(use_native, lib) as rec:
            self.assertEqual(rec._native_lists() is not None, use_native)
            action()
            return lib.calls, rec

    def assert_same_digests(self, action=job, ignore=("many",)):
        """Both paths' calls, without the dlrr_digest_many notes (where batches are cut differs:
        the C path digests the dense items before each Python one)."""
        python, _ = self.record(False, action)
        native_calls, _ = self.record(True, action)
        self.assertEqual([c for c in python if c[0] == "FAKE_ERROR"], [])
        python = [c for c in python if c[0] not in ignore]
        native_only = [c for c in native_calls if c[0] not in ignore]
        self.assertEqual(len(python), len(native_only))
        for i, (a, b) in enumerate(zip(python, native_only)):
            self.assertEqual(repr(a), repr(b), "call %d differs" % i)
        return python, native_calls

    def test_same_calls_as_the_python_loops(self):
        calls, native_calls = self.assert_same_digests()
        grads = [c[2] for c in calls if c[0] == "digest" and c[1] == GRADIENT]
        params = [c[2] for c in calls if c[0] == "digest" and c[1] == PARAMETER]
        self.assertNotIn("odd.unused", grads)  # None gradient
        self.assertIn("odd.unused", params)
        for name in ("lin.weight", "big.weight", "odd.transposed", "odd.fp16", "odd.cplx", "after.bias"):
            self.assertEqual(grads.count(name), 3, name)
        self.assertEqual(params.count("optimizer0.group1.0"), 3)
        self.assertEqual(params.count("optimizer0.group1.2"), 3)
        self.assertNotIn("optimizer0.group1.1", params)  # the meta parameter: no bytes
        # call indices count per name within a step (steps reset them)
        self.assertEqual({c[3] for c in calls if c[0] == "digest" and c[1] in (GRADIENT, PARAMETER)}, {0})
        # the dtypes of the Python tensors
        dtypes = {c[2]: c[5] for c in calls if c[0] == "digest" and c[1] == GRADIENT}
        self.assertEqual((dtypes["odd.fp16"], dtypes["odd.cplx"], dtypes["lin.weight"]),
                         ("float16", "complex64", "float32"))
        # The C path gathered the dense ones: several items per crossing.
        self.assertTrue(any(c[0] == "many" and c[2] > 1 for c in native_calls), native_calls)

    def test_dense_items_before_a_python_one_are_digested_first(self):
        calls, _ = self.record(True)
        step = []
        for c in calls:
            if c[0] in ("many", "digest") and c[1] == GRADIENT:
                step.append(c)
            if len(step) and c[0] == "step_end":
                break
        names = [c[2] for c in step if c[0] == "digest"]
        cuts = [c[2] for c in step if c[0] == "many"]
        # lin.weight, lin.bias, big.weight, big.bias | odd.transposed | odd.fp16 | odd.cplx | after.weight, after.bias
        self.assertEqual(names, ["lin.weight", "lin.bias", "big.weight", "big.bias", "odd.transposed", "odd.fp16",
                                 "odd.cplx", "after.weight", "after.bias"])
        self.assertEqual(cuts, [4, 1, 1, 1, 2])

    def test_a_first_step_with_unseen_dtypes_and_a_lone_step(self):
        self.assert_same_digests(lambda: job(steps=1, extra=False))

    def test_python_path_when_gpu_routing_is_replaced(self):
        """Tests route CPU tensors through the GPU digests by replacing GpuDigests.applies; the C
        path, which sends only tensors off the CPU to Python, then stays out."""
        original = gpu.GpuDigests.__dict__["applies"]
        gpu.GpuDigests.applies = staticmethod(lambda t: False)
        try:
            sys.modules[NAME] = self.module
            rec = dlrr_hook.install(lib=ManyFake())
            self.assertIsNotNone(rec._tensor_lists)
            self.assertIsNone(rec._native_lists())
        finally:
            gpu.GpuDigests.applies = original
        self.assertIs(rec._native_lists(), rec._tensor_lists)

    def test_turned_off_by_the_environment(self):
        sys.modules[NAME] = self.module
        os.environ["DLRR_NATIVE_HOOKS"] = "0"
        try:
            rec = dlrr_hook.install(lib=ManyFake())
            self.assertIsNone(rec._tensor_lists)
        finally:
            del os.environ["DLRR_NATIVE_HOOKS"]

    def test_an_error_midway_ends_alike(self):
        """A parameter whose .grad raises: the gradients before it are digested, capture turns
        off, as with the loop's `finally`."""
        class BadGrad(nn.Parameter):
            @property
            def grad(self):
                raise RuntimeError("grad fails")

        class Holder(nn.Module):
            def __init__(self):
                super().__init__()
                self.bad = BadGrad(torch.ones(2))

        class Mid(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(3, 2)
                self.mid = Holder()  # named after lin's parameters
                self.after = nn.Linear(2, 1)

            def forward(self, x):
                return self.after(self.lin(x) * self.mid.bad).sum()

        def failing():
            model = Mid()
            with torch.no_grad():  # no manual_seed (its patch would end the step before backward)
                for p in model.parameters():
                    p.fill_(0.5)
            model(torch.ones(2, 3)).backward()  # the optimizer would read .grad itself
        calls, _ = self.assert_same_digests(failing, ignore=("many", "rng_state"))  # unseeded
        status = [c for c in calls if c[0] == "recorder_status" and c[1] == 0]
        self.assertEqual(len(status), 1, status)
        self.assertIn("grad fails", status[0][2])
        grads = [c[2] for c in calls if c[0] == "digest" and c[1] == GRADIENT]
        self.assertEqual(grads, ["lin.weight", "lin.bias"])

    def test_no_reference_leaks(self):
        """Both methods called many times leave every object's reference count as it was."""
        def calls_directly():
            rec = dlrr_hook.current()
            model = Net()
            optimizer = torch.optim.SGD([{"params": list(model.parameters())},
                                         {"params": [nn.Parameter(torch.ones(2))]}], lr=0.01)
            model(torch.ones(2, 3)).backward()  # gradients; dtypes seen
            lists = rec._tensor_lists
            params = list(model.named_parameters())
            pairs = [(name.encode(), p) for name, p in params]
            names = {id(p): name for name, p in pairs}
            grads = [p.grad for _, p in pairs if p.grad is not None]
            info = rec.marshal.dtypes[torch.float32]
            watched = [p for _, p in pairs] + grads + [name for name, _ in pairs] + [info, info[0]]
            grad_calls, param_calls = {}, {}
            lists.gradients(GRADIENT, pairs, grad_calls)
            lists.parameters(PARAMETER, optimizer.param_groups, names, 0, param_calls)
            before = [sys.getrefcount(o) for o in watched]
            counts = ([sys.getrefcount(v) for v in grad_calls.values()], len(grad_calls), len(param_calls))
            for _ in range(500):
                lists.gradients(GRADIENT, pairs, grad_calls)
                lists.parameters(PARAMETER, optimizer.param_groups, names, 0, param_calls)
            after = [sys.getrefcount(o) for o in watched]
            self.assertEqual(before, after)
            self.assertEqual((len(grad_calls), len(param_calls)), counts[1:])
            self.assertEqual(grad_calls[b"lin.weight"], 501)
            self.assertEqual(param_calls[b"optimizer0.group1.0"], 501)
        self.record(True, calls_directly, fake=fake_native.FakeLib)

    def test_bad_arguments_raise(self):
        sys.modules[NAME] = self.module
        lists = dlrr_hook.install(lib=ManyFake())._tensor_lists
        with self.assertRaises(TypeError):
            lists.gradients(GRADIENT, [(b"x",)], {})
        with self.assertRaises(TypeError):
            lists.parameters(PARAMETER, [], [], 0, {})
        with self.assertRaises(RuntimeError):
            self.module.TensorListDigest.__new__(self.module.TensorListDigest).gradients(GRADIENT, [], {})


if __name__ == "__main__":
    unittest.main()
