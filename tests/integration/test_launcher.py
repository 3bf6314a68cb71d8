"""dlrecord as a launcher: transparency to the job, exit codes, signals, failure to record,
entropy capture and replay, native crashes, and C++ exceptions through the interposer."""
import os
import re
import signal
import subprocess
import time
import unittest

from harness import PY, TraceTestCase, events, info, run, tool

RANDOMS = "import random, numpy as np; print(random.random(), np.random.rand(), hash('abc'), flush=True)"


class LauncherTest(TraceTestCase):
    def test_output_and_exit_code_pass_through(self):
        code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(7)"
        plain = run([PY, "-c", code])
        rec = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(plain.returncode, 7)
        self.assertEqual(rec.returncode, 7)
        self.assertEqual(rec.stdout, plain.stdout)
        self.assertEqual(rec.stderr, plain.stderr)  # -q: dlrecord adds nothing
        self.assertEqual(info(self.trace_path())["exit_code"], 7)

    def test_death_by_signal_is_128_plus_n(self):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", "sh", "-c", "kill -TERM $$"])
        self.assertEqual(p.returncode, 128 + signal.SIGTERM)
        self.assertEqual(info(self.trace_path())["exit_code"], 128 + signal.SIGTERM)

    def test_missing_command_is_127_and_leaves_no_trace(self):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", "no-such-command-dlrr"])
        self.assertEqual(p.returncode, 127)
        self.assertIn("cannot run 'no-such-command-dlrr'", p.stderr)
        self.assertFalse(os.path.exists(self.trace_path()))

    def test_usage_errors(self):
        for argv, needle in [([], "missing '--'"), (["python3"], "missing '--' before the command"),
                             (["--capture", "huge", "--", "true"], "--capture must be"),
                             (["--ring-steps", "-3", "--", "true"], "--ring-steps must be"),
                             (["--bogus", "--", "true"], "unknown option"), (["--"], "no command")]:
            p = run([tool("dlrecord")] + argv)
            self.assertEqual(p.returncode, 2, argv)
            self.assertIn(needle, p.stderr, argv)
        # The user's own text in a message is escaped: no terminal sequence, one line.
        for t, argv in (("dlrecord", ["--bogus\x1b[31m\nx", "--", "true"]),
                        ("dlreplay", ["t", "--until", "step=1\x1b[2J\nx"])):
            p = run([tool(t)] + argv)
            self.assertEqual(p.returncode, 2, argv)
            self.assertNotIn("\x1b", p.stderr)
            self.assertIn("\\x1b", p.stderr)
            self.assertEqual(len(p.stderr.splitlines()), 2, p.stderr)  # the error and the --help hint

    def test_output_path_that_cannot_be_created_is_a_usage_error_and_the_job_is_not_run(self):
        # Known before the start: like an existing trace, the user fixes -o; the job must not
        # run (for hours) unrecorded after one warning line.
        afile = os.path.join(self.tmp, "afile")
        with open(afile, "w") as fh:
            fh.write("x")
        locked = os.path.join(self.tmp, "locked")
        os.mkdir(locked, 0o500)
        marker = os.path.join(self.tmp, "job-ran")
        bads = [os.path.join(self.tmp, "no-such-dir", "t"),  # missing parent
                os.path.join(afile, "t"),  # parent is a regular file
                afile,  # the path itself is a file
                "/proc/dlrr-cannot-create-here"]
        if os.geteuid() != 0:  # root writes into a 0500 directory
            bads.append(os.path.join(locked, "t"))
        for bad in bads:
            p = run([tool("dlrecord"), "-o", bad, "--", PY, "-c", f"open({marker!r}, 'w')"])
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertFalse(os.path.exists(marker), bad)
            self.assertEqual(p.stdout, "")
            self.assertIn("dlrecord: -o: ", p.stderr)
            self.assertIn(bad, p.stderr)
            self.assertNotIn("running the job", p.stderr)
        with open(afile) as fh:
            self.assertEqual(fh.read(), "x")
        self.assertEqual(os.listdir(locked), [])

    def test_existing_trace_is_not_overwritten(self):
        run([tool("dlrecord"), "-o", self.trace_path(), "--", "true"], check=True)
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", "true"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("already holds a trace", p.stderr)

    def test_sigterm_to_dlrecord_reaches_the_job(self):
        # os.write, not print: a SIGTERM that lands while print('ready') is still returning would
        # run the handler's print inside it ("reentrant call inside BufferedWriter", seen on 3.13).
        code = ("import os, signal, sys, time\n"
                "signal.signal(signal.SIGTERM, lambda *a: (os.write(1, b'job got SIGTERM\\n'), sys.exit(3)))\n"
                "os.write(1, b'ready\\n')\n"
                "time.sleep(60)\n")
        p = subprocess.Popen([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline(), "ready\n")
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        self.assertIn("job got SIGTERM", out)
        self.assertEqual(p.returncode, 3)

    def test_the_jobs_own_preload_and_pythonpath_come_after_ours_once(self):
        # A job started with LD_PRELOAD already set (a malloc, an ASan runtime) is still
        # recorded: its environment holds each variable once, ours first (ld.so takes the
        # last LD_PRELOAD of an environment that holds two).
        theirs = os.environ.get("LD_PRELOAD") or "libm.so.6"
        code = ("import os, sys; env = open('/proc/self/environ', 'rb').read().split(b'\\0'); "
                "keys = [e.split(b'=')[0] for e in env if e]; print(sorted({k.decode() for k in keys if keys.count(k) > 1})); "
                "print([e.decode() for e in env if e.split(b'=')[0] in (b'LD_PRELOAD', b'PYTHONPATH')]); "
                "import torch; x = torch.zeros(2, requires_grad=True); o = torch.optim.SGD([x], lr=0.1)\n"
                "for _ in range(3): x.sum().backward(); o.step()")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code],
                env={"LD_PRELOAD": theirs, "PYTHONPATH": "/nonexistent-dlrr"}, check=True)
        dups, kept = p.stdout.splitlines()[:2]
        self.assertEqual(dups, "[]")
        lib = os.path.realpath(os.path.join(os.path.dirname(tool("dlrecord")), "..", "lib", "dlrr", "libdlrr.so"))
        preload = [v for v in eval(kept) if v.startswith("LD_PRELOAD=")]
        self.assertEqual(len(preload), 1, kept)
        first, rest = preload[0][len("LD_PRELOAD="):].split(":", 1)
        self.assertEqual(os.path.realpath(first), lib)
        self.assertEqual(rest, theirs)
        self.assertTrue(any(v.startswith("PYTHONPATH=") and v.endswith(":/nonexistent-dlrr") for v in eval(kept)), kept)
        self.assertEqual(info(self.trace_path())["steps"], 3)

    def test_entropy_is_recorded_and_replayed(self):
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", RANDOMS], check=True)
        ent = events(self.trace_path(), kind="entropy")
        self.assertGreaterEqual(len(ent), 2)  # hash seed, random, numpy at least
        rep = run([tool("dlreplay"), self.trace_path(), "--until", "end"])
        self.assertEqual(rep.returncode, 0, rep.stderr)
        self.assertEqual(rep.stdout, rec.stdout)
        fresh = run([PY, "-c", RANDOMS])
        self.assertNotEqual(fresh.stdout, rec.stdout)  # the values really are random

    def test_native_segfault_leaves_native_and_python_stacks(self):
        code = ("import ctypes, faulthandler\n"
                "def crash_here():\n"
                "    ctypes.string_at(16)\n"
                "crash_here()\n")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(p.returncode, 128 + signal.SIGSEGV)
        doc = info(self.trace_path())
        self.assertEqual(doc["failure"]["kind"], "signal")
        self.assertEqual(doc["failure"]["signal"], signal.SIGSEGV)
        fails = [e for e in events(self.trace_path(), kind="failure")]
        self.assertEqual(len(fails), 1)
        f = fails[0]["event"]["failure"]
        # The kernel's siginfo, not faulthandler's re-raise: dlrr's handler runs in front of it.
        self.assertEqual(f["signalCode"], 1)  # SEGV_MAPERR
        self.assertEqual(int(f["faultAddress"], 16), 16)
        self.assertGreater(len(f["nativeStack"]), 3)
        self.assertTrue(any("libc" in s or "python" in s for s in f["nativeSymbols"]), f["nativeSymbols"])
        self.assertIn("crash_here", f["pythonStack"])
        # `where` is the faulting frame (libc's strlen, called by ctypes, under ASan through its
        # interceptor), not a frame of the signal handling above it (faulthandler re-raises).
        syms = f["nativeSymbols"]
        self.assertIn(f["where"], syms)
        callers = syms[syms.index(f["where"]) + 1:]
        self.assertTrue(f["where"].startswith("libc.so"), syms)
        first_ctypes = next(i for i, s in enumerate(callers) if s.startswith("_ctypes"))
        self.assertTrue(all(s.startswith("libasan") for s in callers[:first_ctypes]), (f["where"], syms))
        run([tool("dltrace"), "verify", self.trace_path()], check=True)

    def test_native_segfault_after_the_job_disables_faulthandler(self):
        # faulthandler is behind dlrr's handler; once the job turns it off, a crash must still
        # be recorded and end the job as it would without dlrr (no Python stack, none printed).
        code = ("import ctypes, faulthandler\n"
                "faulthandler.disable()\n"
                "print('disabled', flush=True)\n"
                "ctypes.string_at(16)\n")
        plain = run([PY, "-c", code])
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(p.returncode, 128 + signal.SIGSEGV)
        self.assertEqual(plain.returncode, -signal.SIGSEGV)  # dlrecord reports a signal death as 128+N
        self.assertEqual((p.stdout, p.stderr), (plain.stdout, plain.stderr))
        f = events(self.trace_path(), kind="failure")[0]["event"]["failure"]
        self.assertEqual((f["signal"], f["signalCode"], int(f["faultAddress"], 16)), (signal.SIGSEGV, 1, 16))
        self.assertEqual(f["pythonStack"], "")

    def test_a_forked_child_crashes_as_without_dlrr(self):
        # The child inherits dlrr's handler in front of faulthandler; the hook puts faulthandler
        # back and disables it there, so the child dies of its fault and the parent goes on.
        code = ("import ctypes, os\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    ctypes.string_at(16)\n"
                "    os._exit(0)\n"
                "_, status = os.waitpid(pid, 0)\n"
                "print('child signal', os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)\n")
        plain = run([PY, "-c", code])
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(plain.stdout, "child signal %d\n" % signal.SIGSEGV)
        self.assertEqual((p.returncode, p.stdout, p.stderr), (plain.returncode, plain.stdout, plain.stderr))
        run([tool("dltrace"), "verify", self.trace_path()], check=True)

    def test_the_jobs_own_faulthandler_prints_as_without_dlrr(self):
        code = ("import ctypes, faulthandler, sys\n"
                "faulthandler.enable(file=sys.stderr)\n"
                "ctypes.string_at(16)\n")
        plain = run([PY, "-c", code])
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(p.returncode, 128 + signal.SIGSEGV)
        self.assertEqual(plain.returncode, -signal.SIGSEGV)
        self.assertIn("Fatal Python error: Segmentation fault", p.stderr)
        strip = lambda t: re.sub(r"0x[0-9a-f]+", "0x", t)  # thread ids differ between runs
        self.assertEqual(strip(p.stderr), strip(plain.stderr))
        f = events(self.trace_path(), kind="failure")[0]["event"]["failure"]
        self.assertEqual(f["signal"], signal.SIGSEGV)

    def test_abort_and_a_signal_sent_by_the_job_keep_their_python_stacks(self):
        for code, sig in (("import os\ndef stop():\n    os.abort()\nstop()\n", signal.SIGABRT),
                          ("import os, signal\ndef stop():\n    os.kill(os.getpid(), signal.SIGSEGV)\nstop()\n",
                           signal.SIGSEGV)):
            with self.subTest(sig=sig):
                trace = self.trace_path() + str(int(sig))
                p = run([tool("dlrecord"), "-q", "-o", trace, "--", PY, "-c", code])
                self.assertEqual(p.returncode, 128 + sig, p.stderr)
                self.assertEqual(p.stderr, "")
                f = events(trace, kind="failure")[0]["event"]["failure"]
                self.assertEqual(f["signal"], sig)
                self.assertLessEqual(f["signalCode"], 0)  # sent, not a fault: no address
                self.assertEqual(int(f["faultAddress"], 16), 0)
                self.assertIn("in stop", f["pythonStack"])

    def test_cpp_exception_through_the_interposer(self):
        code = ("import torch\n"
                "try:\n"
                "    torch.zeros(2, 3) @ torch.zeros(4, 5)\n"
                "except RuntimeError as e:\n"
                "    print('caught:', 'cannot be multiplied' in str(e))\n")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "caught: True\n")

    def test_secrets_never_reach_trace_bytes(self):
        secret = "s3cr3t-value-that-must-not-leak"
        run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", "print(1)"],
            env={"MY_API_TOKEN": secret, "DB_PASSWORD": secret, "AWS_SECRET_ACCESS_KEY": secret}, check=True)
        for name in os.listdir(self.trace_path()):
            with open(os.path.join(self.trace_path(), name), "rb") as f:
                self.assertNotIn(secret.encode(), f.read(), name)
        st = os.stat(self.trace_path())
        self.assertEqual(st.st_mode & 0o777, 0o700)
        for name in os.listdir(self.trace_path()):
            self.assertEqual(os.stat(os.path.join(self.trace_path(), name)).st_mode & 0o777, 0o600, name)

    def test_a_fork_warns_only_when_the_job_itself_has_threads(self):
        # Python 3.12+ warns on stderr at os.fork() from __main__ when /proc/self/stat counts
        # more than one thread: dlrr's writer thread must neither cause that warning nor hide it.
        fork = "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('forked')\n"
        threaded = ("import threading\ne = threading.Event()\nt = threading.Thread(target=e.wait)\nt.start()\n" +
                    fork + "e.set()\nt.join()\n")
        warns = run([PY, "-c", "import sys; print(sys.version_info >= (3, 12))"], check=True).stdout.strip() == "True"
        pids = lambda t: re.sub(r"pid=\d+", "pid=N", t)
        for name, code in (("single", fork), ("threaded", threaded)):
            with self.subTest(job=name):
                plain = run([PY, "-c", code])
                p = run([tool("dlrecord"), "-q", "-o", self.trace_path(name + ".trace"), "--", PY, "-c", code])
                self.assertEqual(plain.stdout, "forked\n")
                self.assertEqual(("multi-threaded" in plain.stderr), warns and name == "threaded", plain.stderr)
                self.assertEqual((p.returncode, p.stdout, pids(p.stderr)), (plain.returncode, plain.stdout, pids(plain.stderr)))

    def test_fork_without_exec_and_subprocess(self):
        code = ("import os, random, subprocess, sys\n"
                "pid = os.fork()\n"
                "if pid == 0:\n"
                "    random.random(); os._exit(5)\n"
                "_, st = os.waitpid(pid, 0)\n"
                "print('child', os.waitstatus_to_exitcode(st), flush=True)\n"
                "subprocess.run([sys.executable, '-c', 'import random; print(random.random() < 2)'], check=True)\n")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", code])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "child 5\nTrue\n")
        doc = info(self.trace_path())
        roles = [s["role"] for s in doc["processes"]]
        # The job, its exec'd subprocess, and the os.fork() child, which runs Python on and
        # draws entropy (random reseeds itself in a forked child): it records its own stream,
        # named in the parent's fork event (issue 12.4).
        self.assertEqual(roles.count("process"), 3)
        forks = [e["event"]["fork"] for e in events(self.trace_path(), kind="fork")]
        self.assertGreaterEqual(len(forks), 1)  # os.fork; subprocess may use vfork
        self.assertEqual((forks[0]["kind"], forks[0]["childIdentity"]), ("recorded", "fork1"))
        child = [s for s in doc["processes"] if s["stream"] == forks[0]["childStream"]]
        self.assertEqual([s["exit_code"] for s in child], [5])


if __name__ == "__main__":
    unittest.main()
