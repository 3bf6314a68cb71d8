"""The hook's triage facts: imported packages, GPU peaks, argparse usage errors."""

import argparse
import sys
import types
import unittest

import fake_native  # noqa: F401  (puts the hook on sys.path)
import dlrr_hook
from dlrr_hook import native, triage


class ImportedPackagesTest(unittest.TestCase):
    def test_top_level_third_party_modules_with_versions(self):
        import numpy
        import torch
        from importlib import metadata
        packages = {name: (version, path) for name, version, path in triage.imported_packages()}
        # Installed distributions: their metadata's version, as env-diff and replay read it.
        self.assertEqual(packages[numpy.__name__][0], metadata.version("numpy"))
        self.assertEqual(packages[torch.__name__][0], metadata.version("torch"))
        self.assertTrue(packages["torch"][1].endswith("torch"))  # the package directory
        for std in ("os", "sys", "json", "unittest", "collections"):
            self.assertNotIn(std, packages)
        self.assertFalse(any("." in name for name in packages))
        self.assertFalse(any(name.startswith("_") for name in packages))
        self.assertNotIn("dlrr_hook", packages)

    def test_a_stale_version_attribute_is_not_what_is_recorded(self):
        # cycler 0.11.0 says __version__ = "0.10.0": the recording said 0.10.0 and replay, reading
        # the metadata, warned "package.cycler differs" on the recording machine itself.
        from importlib import metadata
        import numpy
        stale = types.ModuleType("numpy")
        stale.__version__ = "0.0.1"
        stale.__file__ = numpy.__file__
        packages = triage.imported_packages({"numpy": stale})
        self.assertEqual(packages[0][1], metadata.version("numpy"))

    def test_versions_from_metadata_only_for_site_packages(self):
        fake = types.ModuleType("dlrr_local_module")
        fake.__file__ = "/home/u/job/dlrr_local_module.py"
        packages = triage.imported_packages({"dlrr_local_module": fake, "os.path": sys.modules["os.path"]})
        self.assertEqual(packages, [("dlrr_local_module", "", "/home/u/job/dlrr_local_module.py")])

    def test_odd_versions_do_not_break_it(self):
        weird = types.ModuleType("dlrr_weird")
        weird.__version__ = lambda: "1.0"  # callable: not a version string
        broken = types.ModuleType("dlrr_broken")

        class Bad:
            def __str__(self):
                raise RuntimeError("no")
        broken.__version__ = Bad()
        packages = dict((n, v) for n, v, _ in triage.imported_packages({"dlrr_weird": weird, "dlrr_broken": broken}))
        self.assertEqual(packages, {"dlrr_weird": "", "dlrr_broken": ""})

    def test_no_gpu_peaks_without_cuda(self):
        import torch
        self.assertEqual(triage.gpu_peaks(torch), [])
        self.assertEqual(triage.gpu_peaks(None), [])

    def test_gpu_peaks_when_cuda_was_initialised(self):
        props = types.SimpleNamespace(total_memory=16 << 30)
        cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 2,
                                     get_device_properties=lambda d: props,
                                     max_memory_allocated=lambda d: (d + 1) << 30,
                                     max_memory_reserved=lambda d: (d + 2) << 30)
        fake_torch = types.SimpleNamespace(cuda=cuda)
        self.assertEqual(triage.gpu_peaks(fake_torch), [(0, 1 << 30, 2 << 30, 16 << 30), (1, 2 << 30, 3 << 30, 16 << 30)])


class TriageReportTest(unittest.TestCase):
    def setUp(self):
        self.saved = sys.excepthook
        self.lib = fake_native.FakeLib()
        self.rec = dlrr_hook.install(lib=self.lib)

    def tearDown(self):
        dlrr_hook.uninstall()
        sys.excepthook = self.saved

    def test_failure_sends_packages_before_the_failure_and_only_once(self):
        try:
            raise KeyError("x")
        except KeyError:
            self.rec.failures.report(*sys.exc_info())
        names = self.lib.names()
        self.assertLess(names.index("packages"), names.index("failure_exception"))
        (packages,) = self.lib.of("packages")
        self.assertEqual(packages[1], "failure")
        self.assertIn("torch", [p[0] for p in packages[2]])
        self.rec.triage.report("exit")
        self.assertEqual(len(self.lib.of("packages")), 1)

    def test_argparse_usage_error_is_recorded_and_argparse_still_exits_2(self):
        parser = argparse.ArgumentParser(prog="train.py")
        parser.add_argument("--lr", type=float)
        with self.assertRaises(SystemExit) as cm, _quiet_stderr():
            parser.parse_args(["--lr", "abc"])
        self.assertEqual(cm.exception.code, 2)
        (call,) = self.lib.of("failure_exception")
        _, type_name, message, where, frames = call
        self.assertEqual(type_name, "argparse.ArgumentError")
        self.assertEqual(message, "train.py: error: argument --lr: invalid float value: 'abc'")
        self.assertTrue(where.startswith(__file__), where)  # the job's parse_args line, not argparse's
        self.assertFalse(any(f[0] == argparse.__file__ for f in frames))

    def test_uninstall_restores_argparse(self):
        wrapped = argparse.ArgumentParser.error
        dlrr_hook.uninstall()
        self.assertIsNot(argparse.ArgumentParser.error, wrapped)
        self.rec = dlrr_hook.install(lib=self.lib)

    def test_replay_mode_sends_nothing(self):
        dlrr_hook.uninstall()
        lib = fake_native.FakeLib(mode=native.MODE_REPLAY)
        rec = dlrr_hook.install(lib=lib)
        rec.triage.report("exit")
        self.assertEqual(lib.of("packages"), [])
        dlrr_hook.uninstall()
        self.rec = dlrr_hook.install(lib=self.lib)


class _quiet_stderr:
    def __enter__(self):
        self.saved = sys.stderr
        sys.stderr = open("/dev/null", "w")

    def __exit__(self, *exc):
        sys.stderr.close()
        sys.stderr = self.saved
        return False


if __name__ == "__main__":
    unittest.main()
