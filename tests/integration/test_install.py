"""Installed like a tool: `cmake --install` of the build into a temporary prefix, then a tiny
job recorded and replayed with the installed tools alone (they find PREFIX/lib/dlrr next to
their own bin). And dlrecord's warning when the job died importing numpy or torch."""
import os
import shutil
import unittest

from harness import BUILD, PY, TraceTestCase, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "jobs", "tiny_train.py")


class InstallTest(TraceTestCase):
    def test_installed_tools_record_and_replay(self):
        prefix = os.path.join(self.tmp, "prefix")
        p = run(["cmake", "--install", BUILD, "--prefix", prefix], timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        bindir = os.path.join(prefix, "bin")
        for name in ("dlrecord", "dlreplay", "dltrace", "dlpreflight"):
            self.assertTrue(os.access(os.path.join(bindir, name), os.X_OK), name)
        lib = os.path.join(prefix, "lib", "dlrr")
        self.assertTrue(os.path.exists(os.path.join(lib, "libdlrr.so")))
        self.assertTrue(os.path.exists(os.path.join(lib, "python", "sitecustomize.py")))
        native = [f for f in os.listdir(os.path.join(lib, "python", "dlrr_hook")) if f.startswith("_dlrr_native")]
        self.assertEqual(len(native), 1, "the native hook extension is installed")
        # The installed tools run from PATH, and use the installed library, not the build's.
        env = {"PATH": bindir + ":" + os.environ.get("PATH", "")}
        trace = self.trace_path()
        rec = run(["dlrecord", "-o", trace, "--", PY, TINY, "--steps", "4"], env=env, timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("4 steps", rec.stderr)
        dry = run(["dlreplay", trace, "--dry-run"], env=env)
        self.assertIn("LD_PRELOAD=" + os.path.join(lib, "libdlrr.so"), dry.stderr)
        self.assertIn("PYTHONPATH=" + os.path.join(lib, "python"), dry.stderr)
        rep = run(["dlreplay", trace], env=env, timeout=300)
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertIn("4 of 4 recorded steps verified", rep.stderr)
        info = run(["dltrace", "info", trace], env=env)
        self.assertEqual(info.returncode, 0, info.stderr)
        pre = run(["dlpreflight", "--", PY, TINY, "--steps", "4"], env=env, timeout=300)
        self.assertEqual(pre.returncode, 0, pre.stderr)
        # An installation missing its library says so (it never falls back on the build's).
        os.rename(os.path.join(lib, "libdlrr.so"), os.path.join(lib, "moved.so"))
        bad = run(["dlrecord", "-o", self.trace_path("u.trace"), "--", PY, TINY, "--steps", "1"], env=env)
        self.assertEqual(bad.returncode, 0)  # the job runs, unrecorded
        self.assertIn("cannot record: the interposer library %s is missing" % os.path.join(lib, "libdlrr.so"),
                      bad.stderr)
        shutil.rmtree(prefix)

    def test_job_dying_on_a_missing_numpy_is_named(self):
        # A Python without numpy (dist-packages taken off its path): what a venv or pyenv
        # python3 first on PATH does to a torch job.
        code = "import sys; sys.path[:] = [p for p in sys.path if 'dist-packages' not in p]; import numpy"
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(p.returncode, 1)
        self.assertIn("dlrecord: warning: the job died importing numpy", p.stderr)
        self.assertIn("Run the job with a Python that has torch", p.stderr)
        # Any other missing module is the job's own business: no such warning.
        p = run([tool("dlrecord"), "-o", self.trace_path("o.trace"), "--", PY, "-c", "import numpyx"])
        self.assertEqual(p.returncode, 1)
        self.assertNotIn("warning: the job died importing", p.stderr)


if __name__ == "__main__":
    unittest.main()
