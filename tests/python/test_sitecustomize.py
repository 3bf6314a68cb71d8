"""The entry point: the user's own sitecustomize still runs, output stays byte-identical.

These run real interpreters.  Tests marked 'real library' preload libdlrr.so (from
DLRR_TEST_LIBRARY or build/lib/dlrr) with the hook from this source tree; they are skipped
when the library has not been built.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from fake_native import HOOK_DIR, REPO

PYTHON = sys.executable


def _library():
    path = os.environ.get("DLRR_TEST_LIBRARY") or os.path.join(REPO, "build", "lib", "dlrr", "libdlrr.so")
    return path if os.path.exists(path) else None


def _run(args, pythonpath, extra_env=None, cwd=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DLRR_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    env.update(extra_env or {})
    return subprocess.run([PYTHON] + args, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=300)


class UserSitecustomizeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.user = os.path.join(self.tmp.name, "user")
        os.mkdir(self.user)

    def tearDown(self):
        self.tmp.cleanup()

    def write_user_sitecustomize(self, body):
        with open(os.path.join(self.user, "sitecustomize.py"), "w") as f:
            f.write(textwrap.dedent(body))

    def test_user_sitecustomize_runs_and_keeps_its_name(self):
        self.write_user_sitecustomize("""
            import sys
            print("user sitecustomize ran")
            sys.path.append("/added/by/user")
            MARKER = 7
        """)
        probe = ("import sys, sitecustomize, dlrr_hook; print(sitecustomize.MARKER); "
                 "print(sitecustomize.__file__); print(sys.path.index(%r) < sys.path.index(%r)); "
                 "print('/added/by/user' in sys.path)" % (HOOK_DIR, self.user))
        result = _run(["-c", probe], [HOOK_DIR, self.user])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.splitlines(), [
            "user sitecustomize ran", "7", os.path.join(self.user, "sitecustomize.py"), "True", "True"])
        self.assertEqual(result.stderr, "")

    def test_system_sitecustomize_still_found(self):
        probe = "import sitecustomize; print(getattr(sitecustomize, '__file__', None))"
        plain = _run(["-c", probe], [])
        hooked = _run(["-c", probe], [HOOK_DIR])
        self.assertEqual(hooked.stdout, plain.stdout)
        self.assertEqual(hooked.stderr, plain.stderr)

    def test_errors_in_user_sitecustomize_look_the_same(self):
        for body in ("raise ValueError('user bug')\n", "import dlrr_no_such_module\n"):
            self.write_user_sitecustomize(body)
            plain = _run(["-c", "print('job ran')"], [self.user])
            hooked = _run(["-c", "print('job ran')"], [HOOK_DIR, self.user])
            self.assertIn("Error in sitecustomize", plain.stderr)
            self.assertEqual((hooked.returncode, hooked.stdout, hooked.stderr),
                             (plain.returncode, plain.stdout, plain.stderr))

    def test_hook_without_library_is_inert(self):
        probe = ("import sys, dlrr_hook; print(dlrr_hook.current()); import torch; "
                 "print(hasattr(torch.Tensor.backward, '__dlrr_original__'))")
        result = _run(["-c", probe], [HOOK_DIR])
        self.assertEqual(result.stdout.splitlines(), ["None", "False"])
        self.assertEqual(result.stderr, "")


@unittest.skipUnless(_library(), "libdlrr.so not built")
class RealLibraryTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.lib = _library()

    def tearDown(self):
        self.tmp.cleanup()

    def recorded_env(self, name="trace"):
        trace = os.path.join(self.tmp.name, name)
        os.mkdir(trace)
        return trace, {"LD_PRELOAD": self.lib, "DLRR_MODE": "record", "DLRR_TRACE": trace,
                       "DLRR_CAPTURE": "default", "DLRR_LIBRARY": self.lib}

    def script(self, body):
        path = os.path.join(self.tmp.name, "job.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(body))
        return path

    def test_uncaught_exception_output_is_byte_identical(self):
        job = self.script("""
            import torch, threading
            def inner():
                raise ValueError("bad shape: %d" % torch.ones(2).numel())
            print("before", flush=True)
            t = threading.Thread(target=inner)
            t.start(); t.join()
            inner()
        """)
        plain = _run([job], [])
        trace, env = self.recorded_env()
        hooked = _run([job], [HOOK_DIR], env)
        self.assertEqual(plain.returncode, 1)
        self.assertIn("ValueError: bad shape: 2", plain.stderr)
        self.assertEqual((hooked.returncode, hooked.stdout, hooked.stderr),
                         (plain.returncode, plain.stdout, plain.stderr))
        self.assertTrue(os.listdir(trace))

    def test_exceptions_through_the_hooks_wrappers_print_the_same(self):
        job = self.script("""
            import sys, threading, torch
            from torch.utils.data import DataLoader, Dataset

            class Broken(Dataset):
                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    raise IndexError("sample %d is broken" % i)

            class Explodes(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * 2

                @staticmethod
                def backward(ctx, grad):
                    raise ValueError("backward exploded")

            def bad_backward():
                x = torch.ones(2, requires_grad=True)
                Explodes.apply(x).sum().backward()

            t = threading.Thread(target=bad_backward)
            t.start()
            t.join()
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
            try:
                next(iter(DataLoader(Broken(), batch_size=2)))
            except IndexError as exc:
                raise RuntimeError("loading failed") from exc
        """)
        plain = _run([job], [])
        trace, env = self.recorded_env()
        hooked = _run([job], [HOOK_DIR], env)
        self.assertIn("backward exploded", plain.stderr)
        self.assertIn("The above exception was the direct cause", plain.stderr)
        self.assertEqual((hooked.returncode, hooked.stdout, hooked.stderr),
                         (plain.returncode, plain.stdout, plain.stderr))

    def test_spawned_workers_record_nothing(self):
        report = os.path.join(self.tmp.name, "workers.txt")
        job = self.script("""
            import os, sys, torch
            from torch.utils.data import DataLoader, Dataset

            class Probe(Dataset):
                def __len__(self):
                    return 8

                def __getitem__(self, i):
                    hook = sys.modules.get("dlrr_hook")
                    rec = hook.current() if hook else None
                    with open(%r, "a") as f:
                        f.write("%%s %%s\\n" %% (rec is not None, rec is not None and rec.active))
                    return torch.tensor([float(i)])

            if __name__ == "__main__":
                loader = DataLoader(Probe(), batch_size=4, num_workers=2,
                                    multiprocessing_context="spawn")
                model = torch.nn.Linear(1, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
                for x in loader:
                    opt.zero_grad()
                    model(x).sum().backward()
                    opt.step()
                import dlrr_hook
                rec = dlrr_hook.current()
                print(rec.active, rec.steps.steps_begun)
        """ % report)
        trace, env = self.recorded_env()
        result = _run([job], [HOOK_DIR], env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(), ["True", "2"])
        with open(report) as f:
            lines = f.read().split("\n")
        self.assertEqual(set(filter(None, lines)), {"True False"})  # installed, then turned off

    def test_training_job_records_and_output_is_unchanged(self):
        job = self.script("""
            import torch
            from torch import nn
            from torch.utils.data import DataLoader, TensorDataset
            torch.manual_seed(0)
            data = TensorDataset(torch.randn(64, 3), torch.randn(64, 1))
            loader = DataLoader(data, batch_size=8, shuffle=True, num_workers=2)
            model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loader:
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    print("%.6f" % loss.item())
            import sys
            try:
                import dlrr_hook
                rec = dlrr_hook.current()
            except ImportError:
                rec = None
            print("recorder", rec is not None and rec.active, rec.steps.steps_begun if rec else -1,
                  file=sys.stderr)
        """)
        plain = _run([job], [])
        trace, env = self.recorded_env()
        hooked = _run([job], [HOOK_DIR], env)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(hooked.returncode, 0, hooked.stderr)
        self.assertEqual(hooked.stdout, plain.stdout)  # seeded: same losses, bit for bit
        self.assertIn("recorder True 16", hooked.stderr)
        self.assertIn("recorder False -1", plain.stderr)


if __name__ == "__main__":
    unittest.main()
