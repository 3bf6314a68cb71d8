"""The native module hooks (_dlrr_native, pyhook/ext/ModuleHooks.cc) against the Python ones.

The same job runs twice on the fake library, once with each kind of hook, and the calls the
library sees must be identical, digests' bytes included: CPU outputs digested in C (a tensor, or
a flat tuple of tensors and Nones; a non-contiguous one through its contiguous copy, as the
Python path copies it), everything else (nested or half/complex outputs, unnamed modules, modules run
while a batch is fetched, a forward that raises, a non-finite output and its failure snapshot,
an internal error) through the Python functions the C hooks call.

The extension is the build's (DLRR_TEST_NATIVE_EXT, set by CMake when it was built for this
interpreter); without it these tests are skipped, saying so.
"""

import contextlib
import importlib.util
import math
import os
import sys
import threading
import unittest

import fake_native
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dlrr_hook
from dlrr_hook import native
from dlrr_hook.modules import native_extension

EXT = os.environ.get("DLRR_TEST_NATIVE_EXT", "")
NAME = "dlrr_hook._dlrr_native"


def load_extension():
    spec = importlib.util.spec_from_file_location(NAME, EXT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WithExtension:
    """A TestCase mixin: setUp loads the build's extension; installed(use_native, lib) is the hook
    installed on the fake `lib` with the extension importable (use_native) or not, uninstalled on
    leaving, so that one job can be recorded both ways and the calls compared."""

    def setUp(self):
        self.module = load_extension()
        self.addCleanup(dlrr_hook.uninstall)
        self.addCleanup(sys.modules.pop, NAME, None)

    @contextlib.contextmanager
    def installed(self, use_native, lib):
        if use_native:
            sys.modules[NAME] = self.module
        else:
            sys.modules.pop(NAME, None)
        rec = dlrr_hook.install(lib=lib)
        try:
            yield rec
        finally:
            dlrr_hook.uninstall()


class NanFake(fake_native.FakeLib):
    """The fake, counting NaNs and infinities of float32 digests as the library does."""

    def _dlrr_digest(self, kind, path, call_index, output, dtype, ndim, shape, data, nbytes, keep, out):
        rc = super()._dlrr_digest(kind, path, call_index, output, dtype, ndim, shape, data, nbytes, keep, out)
        if out and dtype == b"float32" and data and nbytes:
            values = np.frombuffer(fake_native._bytes_at(data, nbytes), dtype=np.float32)
            out[0].nan_count = int(np.isnan(values).sum())
            out[0].inf_count = int(np.isinf(values).sum())
        return rc


class Transposed(nn.Module):
    def forward(self, x):
        return x.t()  # not contiguous: the Python path copies it


class Pair(nn.Module):
    def forward(self, x):
        return x * 2, (x + 1).to(torch.float16)


class TransposedAndNone(nn.Module):
    def forward(self, x):
        return x.t(), None  # as MultiheadAttention(batch_first=True) returns without weights


class Nothing(nn.Module):
    def forward(self, x):
        return None


class Raises(nn.Module):
    def forward(self, x):
        raise ValueError("inner forward fails")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.seq = nn.Sequential(nn.ReLU(), Transposed(), Pair())
        self.nothing = Nothing()
        self.transposed_and_none = TransposedAndNone()
        self.raises = Raises()
        self.big = nn.Linear(4, 8192)  # 128 KiB out per row of 4: digested without the GIL

    def forward(self, x):
        y = self.lin(x)
        a, b = self.seq(y)
        self.nothing(y)
        t, _ = self.transposed_and_none(y)
        nn.Identity()(y)  # a module the root does not own: path "<root>.<Identity>"
        try:
            self.raises(y)
        except ValueError:
            pass
        c = self.big(y)
        d = y.to(torch.complex64) if hasattr(torch, "complex64") else y
        return c.sum() + a.sum() + t.sum() + b.float().sum() + nn.Identity()(d).real.sum() + y.long().sum()


class Interleaved(nn.Module):
    """A root whose forward lets `between` (another thread's whole root) run between its two
    sub-modules: each thread's module stack must stay its own."""

    def __init__(self, between):
        super().__init__()
        self.first = nn.Linear(3, 3)
        self.second = nn.Linear(3, 2)
        self.between = between

    def forward(self, x):
        y = self.first(x)
        self.between()
        return self.second(y)


def on_another_thread(action):
    thread = threading.Thread(target=action)
    thread.start()
    thread.join()


def two_threads():
    """Module calls on two threads, interleaved at fixed points (the calls' order is the same at
    every run): each switch is a thread other than the last one's in the hooks."""
    torch.manual_seed(0)
    x = torch.ones(2, 3)
    inner = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    outer = Interleaved(lambda: on_another_thread(lambda: inner(x)))
    nested = Interleaved(lambda: on_another_thread(lambda: outer(x)))
    for _ in range(2):
        outer(x)
        nested(x)
        on_another_thread(lambda: nested(x))
        inner(x)


class Raising(nn.Module):
    def forward(self, x):
        raise RuntimeError("a forward that raises")


def threads_that_end():
    """Threads one after another (the OS gives a new thread the ident of one that ended, and
    its stack memory): one dies in the middle of a forward, its stack left non-empty where torch
    has no always_call; each next thread starts with an empty stack of its own, and its first
    module is a root."""
    torch.manual_seed(0)
    x = torch.ones(2, 3)
    failing = nn.Sequential(nn.Linear(3, 3), Raising())
    good = nn.Sequential(nn.Linear(3, 4), nn.ReLU())

    def dies():
        try:
            failing(x)
        except RuntimeError:
            pass
    for _ in range(3):
        on_another_thread(dies)
        on_another_thread(lambda: good(x))
    good(x)


def concurrent_threads():
    """Two threads calling their own models at once, in no fixed order."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2))) for _ in range(2)]
    x = torch.ones(2, 3)
    for model in models:  # the paths named first, on one thread (naming is not what this checks)
        model(x)
    start = threading.Barrier(2)

    def calls(model):
        start.wait()
        for _ in range(300):
            model(x)
    threads = [threading.Thread(target=calls, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class Scaled(Dataset):
    """A data set whose samples go through an nn.Module while fetched (not the step's compute)."""

    def __init__(self):
        self.norm = nn.Identity()

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return self.norm(torch.full((3,), float(i)))


def job(nan_at=None):
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, x in enumerate(DataLoader(Scaled(), batch_size=3)):
        if i == nan_at:
            with torch.no_grad():
                model.lin.bias[0] = math.nan
        optimizer.zero_grad()
        loss = model(x)
        loss.backward()
        optimizer.step()
    with torch.no_grad():  # a root without gradients
        model.lin(torch.ones(2, 3))


@unittest.skipUnless(EXT, "the native hooks extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class NativeHooksTest(WithExtension, unittest.TestCase):
    def record(self, use_native, fake=NanFake, action=job, **kwargs):
        lib = fake()
        with self.installed(use_native, lib) as rec:
            self.assertEqual(rec.modules.native_hooks is not None, use_native)
            action(**kwargs)
            return [_untimed(c) for c in lib.calls], rec

    def assert_same_calls(self, **kwargs):
        python, _ = self.record(False, **kwargs)
        native_calls, rec = self.record(True, **kwargs)
        self.assertEqual([c for c in python if c[0] == "FAKE_ERROR"], [])
        self.assertEqual(len(python), len(native_calls))
        for i, (a, b) in enumerate(zip(python, native_calls)):
            self.assertEqual(repr(a), repr(b), "call %d differs" % i)  # repr: nan equals nan
        return python, rec

    def test_same_calls_as_the_python_hooks(self):
        calls, rec = self.assert_same_calls()
        outputs = [c for c in calls if c[0] == "digest" and c[1] == native.DIGEST_MODULE_OUTPUT]
        paths = {c[2] for c in outputs}
        for path in ("lin", "seq.0", "seq.1", "seq.2", "big", "<Identity>", ""):
            self.assertTrue(any(p == path or p.endswith(path) for p in paths), (path, sorted(paths)))
        self.assertFalse(any("norm" in p or p == "Identity" for p in paths), "fetch-time module digested")
        self.assertEqual([c for c in calls if c[0] == "recorder_status" and c[1] == 0], [])

    def test_failure_snapshot_at_a_non_finite_output(self):
        calls, _ = self.assert_same_calls(nan_at=1)
        snapshots = [c for c in calls if c[0] == "snapshot_begin"]
        self.assertEqual(len(snapshots), 1, snapshots)

    def test_internal_error_disables_capture_alike(self):
        def failing_job():
            dlrr_hook.current().modules.paths._index = _raise
            job()
        calls, rec = self.assert_same_calls(action=failing_job)
        status = [c for c in calls if c[0] == "recorder_status" and c[1] == 0]
        self.assertEqual(len(status), 1, status)
        self.assertIn("path naming fails", status[0][2])

    def test_native_digest_used_for_dense_cpu_outputs(self):
        """The C path really digests (the Python _on_output is not called for them)."""
        seen = []

        def counting_job():
            rec = dlrr_hook.current()
            original = rec.modules._on_output
            rec.modules.uninstall()
            rec.modules._on_output = lambda path, output: (seen.append(path), original(path, output))
            rec.modules.install(__import__("torch.nn.modules.module", fromlist=["Module"]))
            job()
        self.record(True, action=counting_job)
        self.assertIn(b"seq.2", seen)  # a tuple the C path does not take here (its float16 half): Python
        self.assertNotIn(b"lin", seen)  # dense float32: C
        self.assertNotIn(b"seq.1", seen)  # not contiguous: its contiguous copy, in C
        self.assertNotIn(b"transposed_and_none", seen)  # a tuple of a non-contiguous tensor and None: C

    def test_no_reference_leaks(self):
        """Hooks called directly many times leave every object's reference count as it was."""
        def calls_directly():
            rec = dlrr_hook.current()
            hooks = rec.modules.native_hooks
            model = nn.Sequential(nn.Linear(3, 4), Pair())
            x = torch.ones(2, 3)
            model(x)  # paths known, dtypes seen
            lin, pair = model[0], model[1]
            out, outs = lin(x), pair(x)
            path = rec.modules.paths.lookup(lin)
            info = rec.marshal.dtypes[torch.float32]
            watched = (model, lin, pair, x, out, outs, path, outs[0], info, info[0])
            hooks.pre(model, (x,))
            before = [sys.getrefcount(o) for o in watched]
            for _ in range(1000):
                hooks.pre(lin, (x,))
                hooks.post(lin, (x,), out)  # the native digest
                hooks.pre(pair, (x,))
                hooks.post(pair, (x,), outs)  # through _on_output
                hooks.pre(lin, (x,))
                hooks.post(lin, (x,), None)
            after = [sys.getrefcount(o) for o in watched]
            hooks.post(model, (x,), None)
            self.assertEqual(before, after)
        self.record(True, action=calls_directly)

    def test_threads_keep_their_own_stacks(self):
        """The C hooks keep the last thread's thread-local dicts: a module call on another thread
        (in the middle of a forward of this one, or after it) sees its own stack."""
        calls, _ = self.assert_same_calls(action=two_threads)
        self.assertGreater(len([c for c in calls if c[0] == "digest"]), 40)

    def test_a_new_thread_does_not_see_an_ended_threads_stack(self):
        """The C hooks keep each thread-local's dict with the thread state's id, which is never
        reused (a thread's ident is)."""
        calls, _ = self.assert_same_calls(action=threads_that_end)
        paths = [c[2] for c in calls if c[0] == "digest"]
        self.assertEqual(paths.count("Sequential"), 4, paths)  # `good` a root on each thread
        self.assertEqual([p for p in paths if "<" in p], [], paths)  # not under a dead stack

    def test_concurrent_threads(self):
        """Two threads calling modules at once: the same digests as the Python hooks (paths,
        shapes and bytes; not the call indices, nor the roots' step bookkeeping, which follow
        the threads' order), and no stack left behind."""
        def digests(use_native):
            calls, rec = self.record(use_native, action=concurrent_threads)
            self.assertEqual(rec.modules._local.__dict__.get("stack", []), [])
            return sorted(repr(c[:3] + c[4:]) for c in calls if c[0] == "digest")
        python = digests(False)
        self.assertEqual(len(python), 3010)
        self.assertEqual(python, digests(True))

    def test_patched_tensor_attribute_is_what_the_c_reads_see(self):
        """The C reads of a tensor's dtype, layout, is_cpu and shape call torch's getters directly,
        kept per type version tag: a property set on torch.Tensor while the job runs is what they
        see (and the library sees the same calls as with the Python hooks), torch's getter again
        once removed.  (torch's C base class is immutable: nothing can be patched there.)"""
        getter = torch.Tensor.is_cpu  # the getset descriptor, on torch's C base class
        reads = []

        def patch():
            torch.Tensor.is_cpu = property(lambda t: (reads.append(1), getter.__get__(t))[1])

        def unpatch():
            if "is_cpu" in torch.Tensor.__dict__:
                del torch.Tensor.is_cpu
        self.addCleanup(unpatch)

        def direct():
            hooks = dlrr_hook.current().modules.native_hooks
            x = torch.ones(2, 3)
            nn.Linear(3, 1)(x)  # float32 seen
            for _ in range(3):
                self.assertEqual(hooks.loss(x.sum(), 0, 0), 6.0)
            patch()
            for n in range(1, 4):
                self.assertEqual(hooks.loss(x.sum(), 0, 0), 6.0)
                self.assertEqual(len(reads), n)  # the property, not torch's getter
            unpatch()
            self.assertEqual(hooks.loss(x.sum(), 0, 0), 6.0)
            self.assertEqual(len(reads), 3)
        self.record(True, action=direct)

        def patched_job():
            job()
            patch()
            try:
                job()
            finally:
                unpatch()
            job()
        self.assert_same_calls(action=patched_job)

    @unittest.skipUnless(hasattr(torch, "compile") and hasattr(torch, "_dynamo"), "torch.compile: torch 2.x")
    def test_torch_compile_sees_no_graph_break(self):
        """On torch 2.x the C hooks sit behind the is_compiling shim: torch.compile's tracer inlines
        the global hooks, and a C function among them would break the graph at every module."""
        import torch._dynamo

        def explain():
            model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
            explanation = torch._dynamo.explain(model)(torch.ones(2, 3))
            self.assertEqual(explanation.graph_break_count, 0, explanation.break_reasons)
            self.assertEqual(explanation.graph_count, 1)
        self.record(True, action=explain)

    def test_hooks_stand_aside_while_exporting(self):
        """What torch.compiler.is_compiling() says outside dynamo (export's flag, set while it
        runs a model's Python for real) the shims read themselves: no module digested, no step
        bookkeeping, while it is set; digests again once it is cleared."""
        compiler = getattr(torch, "compiler", None)
        if not isinstance(getattr(compiler, "_is_compiling_flag", None), bool):
            self.skipTest("torch.compiler has no _is_compiling_flag (torch < 2.3)")
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        x = torch.ones(2, 3)

        def exporting():
            compiler._is_compiling_flag = True
            try:
                self.assertTrue(compiler.is_compiling())
                model(x)
            finally:
                compiler._is_compiling_flag = False
        calls, _ = self.record(True, action=exporting)
        self.assertEqual([c for c in calls if c[0] in ("digest", "step_begin")], [])
        calls, _ = self.record(True, action=lambda: model(x))
        self.assertEqual(len([c for c in calls if c[0] == "digest"]), 3)

    def test_losses_digested_in_c_with_the_python_paths_calls(self):
        """backward()'s tensors: a dense CPU loss is digested by ModuleHooks.loss, anything else by
        the Python path, and the library sees the same calls (the step ends carry the same loss)."""
        def losses():
            torch.manual_seed(0)
            model = nn.Linear(3, 2)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            for i, x in enumerate(DataLoader(Scaled(), batch_size=1)):
                optimizer.zero_grad()
                y = model(x)
                if i == 0:
                    y.sum().backward()  # float32 scalar: its value read in C
                elif i == 1:
                    y.double().sum().backward()  # float64 scalar
                elif i == 2:
                    y.half().sum().backward()  # float16: digested in C, its value by .item()
                elif i == 3:
                    y.backward(torch.ones_like(y))  # not a scalar: no loss value
                elif i == 4:
                    torch.autograd.backward([y.expand(3, 2), y.sum()], [torch.ones(3, 2), None])  # strided: Python
                else:
                    (y.sum() * math.nan).backward()  # non-finite: the failure snapshot
                optimizer.step()
        calls, _ = self.assert_same_calls(action=losses)
        loss_digests = [c for c in calls if c[0] == "digest" and c[1] == native.DIGEST_LOSS]
        self.assertEqual([(c[3], c[4], c[5]) for c in loss_digests],
                         [(0, 0, "float32"), (0, 0, "float64"), (0, 0, "float16"), (0, 0, "float32"),
                          (0, 0, "float32"), (0, 1, "float32"), (0, 0, "float32")])
        ends = [c for c in calls if c[0] == "step_end"]
        self.assertFalse(math.isnan(ends[0][2]))
        self.assertEqual(len([c for c in calls if c[0] == "snapshot_begin"]), 1)

        digested_in_python = []

        def spied():
            strategy = dlrr_hook.current().strategy
            original = strategy.digest
            strategy.digest = lambda kind, *a: (digested_in_python.append((kind, a[2], str(a[3].dtype))),
                                            original(kind, *a))[1]
            losses()
        self.record(True, action=spied)
        # In Python: float64 and float16 the first time each is seen (the Python path caches a
        # dtype's name and size for the C one), and the expanded (not contiguous) loss.
        self.assertEqual([(i, t) for kind, i, t in digested_in_python if kind == native.DIGEST_LOSS],
                         [(0, "torch.float64"), (0, "torch.float16"), (0, "torch.float32")])

    def test_replay_keeps_outputs_in_python(self):
        lib = fake_native.FakeLib(mode=native.MODE_REPLAY)
        sys.modules[NAME] = self.module
        rec = dlrr_hook.install(lib=lib)
        self.assertIsNotNone(rec.modules.native_hooks)
        self.assertIsNone(rec.strategy.native_digest())
        self.assertIsNone(rec.modules.native_hooks.loss(torch.ones(()), 0, 0))  # replay checks losses in Python

    def test_turned_off_by_the_environment(self):
        sys.modules[NAME] = self.module
        os.environ["DLRR_NATIVE_HOOKS"] = "0"
        try:
            self.assertIsNone(native_extension())
        finally:
            del os.environ["DLRR_NATIVE_HOOKS"]
        self.assertIs(native_extension(), self.module)


def _untimed(call):
    """A call without the seconds measured in it (snapshot.job_seconds)."""
    if call[0] == "runtime_info" and call[1] == "snapshot.job_seconds":
        return call[:2] + (call[2].split(" in ")[-1],)
    return call


def _raise(*args):
    raise RuntimeError("path naming fails")


if __name__ == "__main__":
    unittest.main()
