"""Shared helpers for the integration tests: run the real tools on real torch jobs.

The build directory comes from DLRR_BUILD (set by ctest); the example dataset is made once
per build directory and reused (it is deterministic)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

# The interpreter that runs the jobs: Debian's (torch 1.13) by default; DLRR_PYTHON names
# another (a GPU machine's venv, the torch 2.x chroot's).
PY = os.environ.get("DLRR_PYTHON", "/usr/bin/python3")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DLRR_BUILD", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin")
EXAMPLES = os.path.join(ROOT, "examples")


def tool(name):
    return os.path.join(BIN, name)


def run(argv, timeout=300, env=None, cwd=None, check=False, input=None):
    """Runs argv, returns CompletedProcess with text stdout/stderr. env: variables to set on top
    of ours; a value of None unsets that variable."""
    e = dict(os.environ)
    e.pop("DLRR_MODE", None)
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd, input=input,
                       stdin=None if input is not None else subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s" % (argv, p.returncode, p.stdout, p.stderr))
    return p


def dataset(name="data", **kwargs):
    """Path of an example dataset made by examples/prepare_data.py with these options."""
    tag = name + "".join("-%s%s" % (k, v) for k, v in sorted(kwargs.items()))
    path = os.path.join(BUILD, "test-data", tag)
    if not os.path.exists(os.path.join(path, "labels.npy")):
        shutil.rmtree(path, ignore_errors=True)
        args = [PY, os.path.join(EXAMPLES, "prepare_data.py"), "--out", path]
        for k, v in kwargs.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        run(args, check=True)
    return path


def info(trace):
    p = run([tool("dltrace"), "info", trace, "--json"], check=True)
    return json.loads(p.stdout)


def steps(trace):
    p = run([tool("dltrace"), "steps", trace, "--json"], check=True)
    doc = json.loads(p.stdout)
    return doc["steps"] if isinstance(doc, dict) else doc


# For a debugger the tests attach (gdb -p): it is not the job, so it gets none of the jobs'
# preloads (scripts/asan_integration.sh preloads libasan.so, which deadlocks gdb at start-up).
DEBUGGER_ENV = {"LD_PRELOAD": None}


def children(pid):
    """PIDs of the children of process `pid` (its main thread's), from /proc; [] if gone."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def events(trace, kind=None, step=None):
    args = [tool("dltrace"), "events", trace, "--json"]
    if kind:
        args += ["--kind", kind]
    if step is not None:
        args += ["--step", str(step)]
    p = run(args, check=True)
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


class TraceTestCase(unittest.TestCase):
    """Gives each test a private temporary directory."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dlrr-it-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def trace_path(self, name="t.trace"):
        return os.path.join(self.tmp, name)
