"""Exception hooks chain to the previous ones; faulthandler goes to the pystack file."""

import faulthandler
import os
import subprocess
import sys
import tempfile
import threading
import unittest

from support import RecorderTestCase  # first: puts the hook on sys.path
import fake_native
import dlrr_hook
from dlrr_hook import failures


def _raise_here():
    raise KeyError("missing")


class ExceptHookTest(unittest.TestCase):
    def setUp(self):
        self.seen = []
        self.saved = (sys.excepthook, threading.excepthook)
        sys.excepthook = lambda *a: self.seen.append(("sys", a[0]))
        threading.excepthook = lambda args: self.seen.append(("thread", args.exc_type))
        self.lib = fake_native.FakeLib()
        self.rec = dlrr_hook.install(lib=self.lib)

    def tearDown(self):
        dlrr_hook.uninstall()
        restored = (sys.excepthook, threading.excepthook)
        sys.excepthook, threading.excepthook = self.saved
        self.assertEqual([f.__name__ for f in restored], ["<lambda>", "<lambda>"])

    def test_sys_excepthook_reports_then_chains(self):
        try:
            _raise_here()
        except KeyError:
            sys.excepthook(*sys.exc_info())
        self.assertEqual(self.seen, [("sys", KeyError)])
        (call,) = self.lib.of("failure_exception")
        _, type_name, message, where, frames = call
        self.assertEqual(type_name, "KeyError")
        self.assertEqual(message, "'missing'")
        self.assertEqual(frames[-1][2], "_raise_here")
        self.assertEqual(frames[-1][3], 'raise KeyError("missing")')
        self.assertEqual(where, "%s:%d" % (frames[-1][0], frames[-1][1]))
        self.assertTrue(where.startswith(os.path.abspath(__file__)))
        # at exit the same exception is not reported twice
        sys.last_value = sys.exc_info()[1]
        try:
            self.rec.failures.report_unhooked_exit_exception()
        finally:
            del sys.last_value
        self.assertEqual(len(self.lib.of("failure_exception")), 1)

    def test_thread_exception(self):
        thread = threading.Thread(target=_raise_here)
        thread.start()
        thread.join()
        self.assertEqual(self.seen, [("thread", KeyError)])
        self.assertEqual(self.lib.of("failure_exception")[0][1], "KeyError")

    def test_system_exit_is_not_a_failure(self):
        sys.excepthook(SystemExit, SystemExit(3), None)
        self.assertEqual(self.lib.of("failure_exception"), [])
        self.assertEqual(self.seen, [("sys", SystemExit)])

    def test_exception_that_bypassed_our_hook_is_reported_at_exit(self):
        class Custom(Exception):
            def __str__(self):
                raise RuntimeError("broken __str__")
        try:
            raise Custom()
        except Custom as exc:
            sys.last_value = exc
        try:
            self.rec._at_exit()
        finally:
            del sys.last_value
        (call,) = self.lib.of("failure_exception")
        self.assertTrue(call[1].endswith("Custom"))
        self.assertEqual(call[2], "<unprintable Custom>")


class StrippedTracebackTest(RecorderTestCase):
    def test_reported_frames_exclude_the_hook(self):
        import torch
        from torch.utils.data import DataLoader
        from support import IndexDataset

        class Broken(IndexDataset):
            def __getitem__(self, i):
                raise IndexError("broken %d" % i)

        try:
            next(iter(DataLoader(Broken(4), batch_size=2)))
        except IndexError:
            exc_type, exc, tb = sys.exc_info()
        names = []
        entry = tb
        while entry is not None:
            names.append(entry.tb_frame.f_code.co_filename)
            entry = entry.tb_next
        self.assertTrue(any("dlrr_hook" in n for n in names))  # our __next__ wrapper was there
        self.rec.failures.report(exc_type, exc, failures.strip_exception(exc, tb))
        (call,) = self.lib.of("failure_exception")
        files = [f[0] for f in call[4]]
        self.assertFalse(any("dlrr_hook" in f for f in files), files)
        self.assertEqual(call[4][-1][2], "__getitem__")
        self.assertTrue(any(f.endswith("dataloader.py") for f in files))
        del torch


class FaulthandlerTest(RecorderTestCase):
    def setUp(self):
        self.was_enabled = faulthandler.is_enabled()
        faulthandler.disable()
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "pystack.txt")
        self.lib = fake_native.FakeLib(pystack_path=self.path)
        self.rec = dlrr_hook.install(lib=self.lib)

    def tearDown(self):
        super().tearDown()
        self.assertFalse(faulthandler.is_enabled())
        if self.was_enabled:
            faulthandler.enable()
        self.lib.close_pystack()
        self.dir.cleanup()

    def test_enabled_to_pystack_path(self):
        self.assertTrue(faulthandler.is_enabled())
        fd = self.rec.failures._pystack_fd
        self.assertEqual(os.readlink("/proc/self/fd/%d" % fd), self.path)
        self.assertEqual(fd, self.lib.pystack_fd)  # the library's own descriptor, no second one

    def test_library_handler_in_front_until_disabled_or_exit(self):
        # In front once faulthandler is on; faulthandler back in front before it is disabled
        # (so that it restores the library's handler), and at exit (the interpreter goes away).
        # In front again once torch has imported: libraries it loads (UCX) install their own.
        self.assertEqual(self.lib.of("fatal_signals_first"), [("fatal_signals_first", 1)] * 2)
        self.lib.clear()
        self.rec._at_exit()
        self.rec._at_exit()
        self.assertEqual(self.lib.of("fatal_signals_first"), [("fatal_signals_first", 0)])
        self.assertTrue(faulthandler.is_enabled())
        self.lib.clear()
        self.rec.failures.disable_faulthandler()
        self.assertEqual(self.lib.of("fatal_signals_first"), [])  # already behind
        self.assertFalse(faulthandler.is_enabled())

    def test_fatal_signal_writes_python_stack(self):
        child_path = self.path + ".child"  # the library makes its file exclusively: a new name
        script = (
            "import sys, faulthandler; sys.path.insert(0, %r)\n"
            "import fake_native, dlrr_hook\n"
            "dlrr_hook.install(lib=fake_native.FakeLib(pystack_path=%r))\n"
            "def crash_here():\n"
            "    faulthandler._sigsegv()\n"
            "crash_here()\n" % (os.path.dirname(os.path.abspath(__file__)), child_path))
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=120)
        self.assertLess(result.returncode, 0)
        self.assertEqual(result.stderr, "")  # the stack went to the pystack file, not stderr
        with open(child_path) as f:
            text = f.read()
        self.assertIn("Segmentation fault", text)
        self.assertIn("crash_here", text)


class FaulthandlerAlreadyEnabledTest(unittest.TestCase):
    def test_user_faulthandler_left_alone(self):
        with tempfile.TemporaryFile("w+") as theirs:
            faulthandler.enable(file=theirs)
            try:
                lib = fake_native.FakeLib(pystack_path="/nonexistent/should-not-open")
                rec = dlrr_hook.install(lib=lib)
                self.assertIsNone(rec.failures._pystack_fd)
                self.assertTrue(rec.active)
                dlrr_hook.uninstall()
                self.assertTrue(faulthandler.is_enabled())
            finally:
                faulthandler.disable()


if __name__ == "__main__":
    unittest.main()
