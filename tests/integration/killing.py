"""kill -9 of a recorded job at a chosen moment, and the checks of what it leaves.

Shared by test_hardening.py (a handful of kills in CI) and tests/stress/stress_kill.py (as
many as you like). One kill:

  1. dlrecord -o TRACE -- python3 jobs/tiny_train.py --steps N  (the job prints "step K ..."
     after each step and "done" at the end);
  2. SIGKILL to the job (dlrecord's child) at the moment asked: `delay` seconds after the
     launch (startup included: the interpreter, the library, the stream file), after the job
     printed "step K", or right after it printed "done" (the final flush and close);
  3. then: dlrecord exits 128+9 with the job, the trace opens (`dltrace info --json`),
     `dltrace verify` exits 0 (what is there is intact or a recovered tail), and the trace
     holds steps 0..K-1 in order when the job had printed "step K" (step K ends at the next
     batch delivery, so only step K may be in flight).
"""
import json
import os
import re
import signal
import subprocess
import threading
import time

from harness import PY, children, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "jobs", "tiny_train.py")
STEP_RE = re.compile(r"^step (\d+) loss ")


def kill_once(trace, delay=None, after_step=None, at_done=False, steps=40, extra_args=(), timeout=120):
    """Records tiny_train and kills the job at the moment given; returns a dict of facts.

    Exactly one of delay (seconds after launch), after_step (when "step K" is printed) and
    at_done (when "done" is printed) chooses the moment. Raises AssertionError on a broken
    promise, with what was seen."""
    argv = [tool("dlrecord"), "-q", "-o", trace, "--", PY, TINY, "--steps", str(steps)] + list(extra_args)
    env = dict(os.environ)
    env.pop("DLRR_MODE", None)
    t0 = time.monotonic()
    # Its own process group, so that what the killed job leaves behind can be cleaned up below.
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         env=env, text=True, start_new_session=True)
    lines = []
    seen = threading.Event()

    def reader():
        for line in p.stdout:
            lines.append(line)
            m = STEP_RE.match(line)
            if (after_step is not None and m and int(m.group(1)) >= after_step) or (at_done and line == "done\n"):
                seen.set()
        seen.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    job = None
    deadline = t0 + timeout
    killed_at = None
    while time.monotonic() < deadline:
        kids = children(p.pid)
        if kids:
            job = kids[0]
        ready = (delay is not None and time.monotonic() - t0 >= delay) or \
                (delay is None and seen.is_set())
        if ready and job is not None:
            try:
                os.kill(job, signal.SIGKILL)
                killed_at = time.monotonic() - t0
            except ProcessLookupError:
                pass  # it ended by itself first
            break
        if p.poll() is not None:
            break
        time.sleep(0.002)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("dlrecord did not end after the job was killed (hang?)")
    # dlrecord ended with the job. A DataLoader worker that the job forked just before the
    # kill can outlive it for good, holding our stdout/stderr pipes: torch 1.13's worker takes
    # its parent's pid when it starts (ManagerWatchdog), and one that starts after its parent
    # was killed records init's and never sees it die (seen: a worker polling its index queue
    # forever with getppid() == 1). The same happens without dlrr; reap them like a terminal's
    # hangup would, then read what dlrecord said.
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _, err = p.communicate(timeout=60)
    th.join(timeout=10)
    out = "".join(lines)
    printed = [int(m.group(1)) for m in (STEP_RE.match(l) for l in lines) if m]
    last = max(printed) if printed else -1
    facts = {"killed_at": killed_at, "rc": p.returncode, "last_printed": last, "done": "done\n" in lines,
             "stderr": err, "trace_steps": None, "verify": None, "state": None}
    finished = killed_at is None or (p.returncode == 0 and facts["done"])
    if not finished:
        assert p.returncode == 128 + signal.SIGKILL, "dlrecord exited %s, expected 137\n%s" % (p.returncode, err)
    if not os.path.isdir(trace):
        raise AssertionError("no trace directory after the kill at %.3fs" % (killed_at or -1))
    inf = run([tool("dltrace"), "info", trace, "--json"], timeout=60)
    assert inf.returncode == 0, "dltrace info exited %d: %s" % (inf.returncode, inf.stderr)
    doc = json.loads(inf.stdout)
    ver = run([tool("dltrace"), "verify", trace], timeout=60)
    facts["verify"] = ver.returncode
    facts["verify_out"] = ver.stdout
    assert ver.returncode == 0, "dltrace verify exited %d after a kill at %.3fs (last step printed %d):\n%s%s" % (
        ver.returncode, killed_at or -1, last, ver.stdout, ver.stderr)
    procs = [s for s in doc["processes"] if s["role"] == "process"]
    facts["state"] = ",".join("clean" if s["clean"] else "torn" if s["torn"] else "unclosed" for s in procs) or "none"
    if doc["main_stream"]:
        st = run([tool("dltrace"), "steps", trace, "--json"], timeout=60)
        assert st.returncode == 0, "dltrace steps exited %d: %s" % (st.returncode, st.stderr)
        got = [s["step"] for s in json.loads(st.stdout)["steps"]]
    else:
        got = []
    facts["trace_steps"] = len(got)
    assert got == list(range(len(got))), "steps are not 0..k-1 in order: %s" % got
    need = steps if finished and facts["done"] else max(last, 0)
    assert len(got) >= need, ("the job printed 'step %d' before the kill at %.3fs, so steps 0..%d were "
                              "committed, but the trace holds %d steps\n%s" % (
                                  last, killed_at or -1, last - 1, len(got), ver.stdout))
    facts["out"] = out
    return facts
