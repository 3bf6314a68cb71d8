"""A trace is data (issue 27, item 3; docs/reliability.md "What a replay can touch"): hostile
traces run no code of theirs. A recorded PYTHONPATH with a served sitecustomize.py, a served zip
archive (a sys.path entry), a trace whose header claims to be the user's while its files belong to
someone else, terminal escapes in the recorded command, and a placeholder bomb (a small trace that
unpacks to a large file)."""
import json
import os
import shutil
import zipfile

from harness import PY, TraceTestCase, run, tool

NOBODY = 65534
EVIL = "import sys; sys.stderr.write('PWNED by the trace\\n')\n"


def last_json(stdout):
    last = stdout.rstrip("\n").rsplit("\n", 1)[-1]
    return json.loads(last) if last.startswith("{") else None


def chown_tree(path, uid):
    for d, dirs, names in os.walk(path):
        for n in dirs + names:
            os.lchown(os.path.join(d, n), uid, uid)
    os.lchown(path, uid, uid)


class TraceIsDataTest(TraceTestCase):

    def record(self, argv, env=None, cwd=None):
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--"] + argv, env=env, cwd=cwd or self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def evil_pythonpath_trace(self):
        """A job recorded with PYTHONPATH=EVIL whose sitecustomize.py it read after importing torch
        (so the trace holds it), then EVIL removed, as on another machine."""
        evil = os.path.join(self.tmp, "evil")
        os.mkdir(evil)
        with open(os.path.join(evil, "sitecustomize.py"), "w") as f:
            f.write(EVIL)
        code = "import torch, os; open(os.path.join(%r, 'sitecustomize.py')).read(); print('job')" % evil
        p = self.record([PY, "-c", code], env={"PYTHONPATH": evil})
        self.assertIn("PWNED", p.stderr)  # the payload does run where it exists (the recording)
        shutil.rmtree(evil)
        return evil

    def test_own_trace_with_pythonpath_serves_no_sitecustomize(self):
        evil = self.evil_pythonpath_trace()
        mine = "import torch; print('mine')"
        p = run([tool("dlreplay"), self.trace_path(), "--json", "--", PY, "-c", mine], cwd=self.tmp)
        self.assertNotIn("PWNED", p.stderr + p.stdout)
        self.assertIn("mine", p.stdout, p.stderr)
        self.assertIn(os.path.join(evil, "sitecustomize.py"), last_json(p.stdout)["files"]["code_not_served"])
        # --serve-code serves it: the one way to get it, and the reason for the default.
        p = run([tool("dlreplay"), self.trace_path(), "--serve-code", "--", PY, "-c", mine], cwd=self.tmp)
        self.assertIn("PWNED", p.stderr)

    def test_foreign_trace_environment_never_chooses_the_code(self):
        evil = self.evil_pythonpath_trace()
        chown_tree(self.trace_path(), NOBODY)  # someone else's trace; its header still says ours
        mine = "import os, torch; print('mine', os.environ.get('PYTHONPATH'))"
        p = run([tool("dlreplay"), self.trace_path(), "--serve-code", "--", PY, "-c", mine], cwd=self.tmp)
        self.assertNotIn("PWNED", p.stderr + p.stdout)
        self.assertIn("mine", p.stdout, p.stderr)
        self.assertNotIn(evil, p.stdout)
        self.assertIn("PYTHONPATH", p.stderr)
        self.assertIn("are this machine's, not the trace's", p.stderr)

    def test_the_header_alone_does_not_make_a_trace_ours(self):
        marker = os.path.join(self.tmp, "ran")
        self.record([PY, "-c", "import torch; print('ran the recorded command')"])
        chown_tree(self.trace_path(), NOBODY)  # the header names us (as a patched uid would)
        p = run([tool("dlreplay"), self.trace_path()], cwd=self.tmp)
        self.assertEqual(p.returncode, 9, p.stderr)
        self.assertIn("files here belong to uid %d" % NOBODY, p.stderr)
        self.assertNotIn("ran the recorded command", p.stdout)
        self.assertFalse(os.path.exists(marker))

    def test_recorded_strings_are_printed_escaped(self):
        fake = "\x1b[2K\r\x1b[1Adlreplay: running /usr/bin/python3 harmless.py"
        self.record([PY, "-c", "import torch", fake])
        chown_tree(self.trace_path(), NOBODY)
        p = run([tool("dlreplay"), self.trace_path(), "--dry-run"], cwd=self.tmp)
        self.assertNotIn("\x1b", p.stderr)
        self.assertNotIn("\r", p.stderr)
        self.assertIn("\\x1b[2K", p.stderr)

    def test_a_served_zip_archive_is_code(self):
        lib = os.path.join(self.tmp, "zips")  # (the recorder skips paths like lib/python3*)
        os.mkdir(lib)
        archive = os.path.join(lib, "stdlib.zip")
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr("sitecustomize.py", EVIL)
        code = "import torch; open(%r, 'rb').read(); print('job')" % archive
        self.record([PY, "-c", code])
        shutil.rmtree(lib)
        # The archive on sys.path of the user's own command: not served, so nothing imported.
        mine = "import sys; sys.path.insert(0, %r); import sitecustomize; print('mine')" % archive
        p = run([tool("dlreplay"), self.trace_path(), "--json", "--", PY, "-c", mine], cwd=self.tmp)
        self.assertNotIn("PWNED", p.stderr + p.stdout)
        self.assertIn(archive, last_json(p.stdout)["files"]["code_not_served"], p.stderr)

    def test_a_placeholder_bomb_costs_no_disk_and_a_budget_bounds_the_rest(self):
        data = os.path.join(self.tmp, "data")
        os.mkdir(data)
        zeros, pattern = os.path.join(data, "zeros.bin"), os.path.join(data, "pattern.bin")
        size = 48 << 20
        with open(zeros, "wb") as f:
            f.truncate(size)
        with open(pattern, "wb") as f:
            f.write(b"dlrr" * (size // 4))
        code = "import torch; open(%r, 'rb').read(); open(%r, 'rb').read(); print('job')" % (zeros, pattern)
        self.record([PY, "-c", code])
        shutil.rmtree(data)
        trace_bytes = sum(os.path.getsize(os.path.join(self.trace_path(), n)) for n in os.listdir(self.trace_path()))
        self.assertLess(trace_bytes, 4 << 20)  # a small trace that unpacks to 96 MiB
        scratch = os.path.join(self.tmp, "scratch")
        p = run([tool("dlreplay"), self.trace_path(), "--scratch", scratch, "--json"], cwd=self.tmp)
        self.assertIn("job", p.stdout, p.stderr)
        served = os.path.join(scratch, "served") + zeros
        self.assertEqual(os.path.getsize(served), size)
        self.assertLess(os.stat(served).st_blocks * 512, 1 << 20)  # holes, not 48 MiB of zeros
        # A budget below what the pattern needs: refused before the job runs, saying why.
        scratch2 = os.path.join(self.tmp, "scratch2")
        p = run([tool("dlreplay"), self.trace_path(), "--scratch", scratch2, "--serve-budget", str(1 << 20)],
                cwd=self.tmp)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("would write more than 1048576 bytes", p.stderr)
        self.assertIn("--serve-budget", p.stderr)
        self.assertNotIn("job", p.stdout)
        # Nothing past the budget was written.
        used = sum(os.stat(os.path.join(d, n)).st_blocks * 512 for d, _, ns in os.walk(scratch2) for n in ns)
        self.assertLessEqual(used, 2 << 20)


if __name__ == "__main__":
    import unittest
    unittest.main()
