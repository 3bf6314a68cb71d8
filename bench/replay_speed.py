"""Replay speed: time to reach step N in replay against the recorded run's time to step N.

    /usr/bin/python3 bench/replay_speed.py [--runs 5] [--build build] [--jobs example,slowload]

Jobs:
  example    examples/train.py as shipped (2 DataLoader workers, --seed 8, 128 steps, a NaN
             from step 30 on), N = 120: compute and loading both matter
  slowload   bench/slow_loader_job.py: ~5 ms of sleep and a NumPy augmentation per sample,
             no workers, 40 steps of 32 samples, N = 36: loading dominates

Each round records the job once (dlrecord, capture default) and replays that trace with
`dlreplay --until step=N` (which verifies steps 0..N-1 and stops at the start of step N).
Both jobs print `step K loss L` after each step; the bench time-stamps those lines as they
arrive, from the launch of dlrecord / dlreplay.  Printed: medians over rounds (min..max) of

  to step 0    launch to the end of step 0: start-up (interpreter, torch, the job's set-up;
               for replay also reading the trace) and one step
  to step N-1  launch to the end of step N-1, the last step before the target
  steps 1..N-1 the N-1 steps between those lines: the training loop alone

and the replay/recorded ratio of each.  The recorded trace's own time stamps (StepBegin of
step 0 and step N, since the process started) are shown for comparison.  Replay must reach
the target with every step before it verified; a round where it does not is reported.
With --isolation, each round replays the trace twice more, in alternating order: in the
kernel sandbox (the default: namespaces over an overlay, tools/common/Sandbox.h) and with
DLRR_NO_SANDBOX=1 (the libc layer alone, as before the sandbox); printed: the medians of
launch-to-exit and launch-to-step-N-1 of each, the CPU time (user + system) of each replay's
whole process tree, and the sandbox/libc ratio of each.
A benchmark, not a test.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import re
import resource

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_LINE = re.compile(r"^step (\d+) ")


def step_times(dltrace, trace, steps):
    """{step: seconds since the recorded process started} of the StepBegin events."""
    out = subprocess.run([dltrace, "events", trace, "--kind", "stepBegin", "--json"], capture_output=True,
                         text=True, check=True).stdout
    times = {}
    for line in out.splitlines():
        doc = json.loads(line)
        if doc.get("kind") != "stepBegin":
            continue
        event = doc["event"]
        step = int(event.get("stepBegin", {}).get("step", event.get("step", -1)))
        if step in steps:
            times[step] = int(event["tNs"]) / 1e9
    return times


def run_timed(argv, env):
    """Runs argv; (seconds from launch to each `step K ...` line (and "exit": to its end), exit
    code, stdout lines)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    times, lines = {}, []
    for line in p.stdout:
        now = time.perf_counter() - t0
        lines.append(line)
        m = STEP_LINE.match(line)
        if m:
            times[int(m.group(1))] = now
    p.wait()
    times["exit"] = time.perf_counter() - t0
    # CPU seconds (user + system) of the whole process tree: every process below dlreplay is
    # waited for by its parent, so its time rolls up. Less disturbed by a busy machine than
    # wall time (it still pays for shared caches).
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    times["cpu"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return times, p.returncode, lines


def report_of(lines):
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return {}


def med(values):
    return "%7.2f (%5.2f..%5.2f)" % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", default="example,slowload")
    ap.add_argument("--isolation", action="store_true", help="compare the sandbox with the libc layer alone")
    args = ap.parse_args()
    dlrecord, dlreplay, dltrace = (os.path.join(args.build, "bin", t) for t in ("dlrecord", "dlreplay", "dltrace"))
    work = tempfile.mkdtemp(prefix="dlrr-replay-bench-")
    try:
        data = os.path.join(work, "data")
        subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", data], check=True,
                       stdout=subprocess.DEVNULL)
        jobs = {
            "example": ([PY, os.path.join(ROOT, "examples", "train.py"), "--data", data, "--seed", "8"], 120),
            "slowload": ([PY, os.path.join(ROOT, "bench", "slow_loader_job.py")], 36),
        }
        print("machine: %d cores, load average at start %.2f %.2f %.2f; %d rounds"
              % ((os.cpu_count(),) + os.getloadavg() + (args.runs,)))
        env = {k: v for k, v in os.environ.items() if not k.startswith("DLRR_")}
        for name in args.jobs.split(","):
            job, n = jobs[name]
            rec0, recn, rep0, repn, trace0, tracen = [], [], [], [], [], []
            iso = {"sandbox": {"exit": [], "n": [], "cpu": []}, "libc": {"exit": [], "n": [], "cpu": []}}
            problems = []
            for rnd in range(args.runs):
                trace = os.path.join(work, "%s-%d" % (name, rnd))
                times, rc, _ = run_timed([dlrecord, "-q", "-o", trace, "--"] + job, env)
                if rc != 0 or 0 not in times or n - 1 not in times:
                    sys.exit("recording failed (exit %d)" % rc)
                rec0.append(times[0])
                recn.append(times[n - 1])
                stamps = step_times(dltrace, trace, {0, n})
                trace0.append(stamps[0])
                tracen.append(stamps[n])
                times, rc, lines = run_timed([dlreplay, trace, "--until", "step=%d" % n, "--json", "-q"], env)
                report = report_of(lines)
                if rc != 0 or report.get("outcome") != "reached" or report.get("verified_steps") != n:
                    problems.append("round %d: exit %d, outcome %s, %s steps verified: %s" % (
                        rnd, rc, report.get("outcome"), report.get("verified_steps"), report.get("message", "")))
                if 0 in times and n - 1 in times:
                    rep0.append(times[0])
                    repn.append(times[n - 1])
                if args.isolation:
                    order = ("sandbox", "libc") if rnd % 2 == 0 else ("libc", "sandbox")
                    for how in order:
                        e = dict(env, DLRR_NO_SANDBOX="1") if how == "libc" else env
                        times, rc, lines = run_timed([dlreplay, trace, "--until", "step=%d" % n, "--json", "-q"], e)
                        report = report_of(lines)
                        if rc != 0 or report.get("verified_steps") != n or n - 1 not in times:
                            problems.append("round %d (%s): exit %d, %s steps verified" % (
                                rnd, how, rc, report.get("verified_steps")))
                            continue
                        iso[how]["exit"].append(times["exit"])
                        iso[how]["n"].append(times[n - 1])
                        iso[how]["cpu"].append(times["cpu"])
                shutil.rmtree(trace, ignore_errors=True)
                print("  %s: round %d/%d done (load %.2f)" % (name, rnd + 1, args.runs, os.getloadavg()[0]),
                      file=sys.stderr)
            print()
            print("job %s: N = %d; recorded trace's own stamps: StepBegin 0 at %s s, StepBegin N at %s s"
                  % (name, n, med(trace0), med(tracen)))
            if rep0:
                steps_rec = [b - a for a, b in zip(rec0, recn)]
                steps_rep = [b - a for a, b in zip(rep0, repn)]
                print("%-12s %24s %24s %24s" % ("seconds", "recorded", "replay", "replay / recorded"))
                for label, a, b in (("to step 0", rec0, rep0), ("to step N-1", recn, repn),
                                    ("steps 1..N-1", steps_rec, steps_rep)):
                    print("%-12s %24s %24s %24s" % (label, med(a), med(b), med([y / x for x, y in zip(a, b)])))
                print("%-12s %24s %24s" % ("ms per step", "%.1f" % (statistics.median(steps_rec) / (n - 1) * 1e3),
                                             "%.1f" % (statistics.median(steps_rep) / (n - 1) * 1e3)))
            if args.isolation and iso["sandbox"]["exit"] and iso["libc"]["exit"]:
                print("%-12s %24s %24s %24s" % ("isolation", "libc layer alone", "kernel sandbox",
                                                "sandbox / libc"))
                for label, key in (("to exit", "exit"), ("to step N-1", "n"), ("CPU s", "cpu")):
                    a, b = iso["libc"][key], iso["sandbox"][key]
                    print("%-12s %24s %24s %24s" % (label, med(a), med(b),
                                                    "%.3f" % (statistics.median(b) / statistics.median(a))))
            for p in problems:
                print("  problem: " + p)
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
