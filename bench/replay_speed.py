"""Replay speed: time to reach step N in replay against the recorded run's time to step N.

    /usr/bin/python3 bench/replay_speed.py [--runs 5] [--build build] [--jobs example,slowload]

Jobs:
  example    examples/train.py as shipped (2 DataLoader workers, --seed 8, 128 steps, a NaN
             from step 30 on), N = 120: compute and loading both matter
  slowload   bench/slow_loader_job.py: ~5 ms of sleep and a NumPy augmentation per sample,
             no workers, 40 steps of 32 samples, N = 36: loading dominates

Each round records the job once (dlrecord, capture default) and replays that trace twice,
`dlreplay --until step=0` and `dlreplay --until step=N`, interleaved so that drift of a
shared machine hits both alike.  Recorded times come from the trace: the time stamp of the
StepBegin event of step 0 and of step N (nanoseconds since the recorded process started).
Replay times are the wall clock of dlreplay (launcher, trace loading, the replayed process
up to its stop, its exit).  Printed: medians over rounds (min..max) of

  to step 0    start-up: interpreter, torch, the job's set-up (and, in replay, trace loading)
  to step N    the whole way
  0 -> N       the N steps alone (replay: the difference of its two runs)

and replay/record ratios of each.  The replay must verify every step before N bit-exact
(outcome "target"); a round where it does not is reported.  A benchmark, not a test.
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

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def replay(dlreplay, trace, step):
    """(wall seconds, report) of dlreplay --until step=STEP."""
    t0 = time.perf_counter()
    p = subprocess.run([dlreplay, trace, "--until", "step=%d" % step, "--json", "-q"], capture_output=True,
                       text=True)
    wall = time.perf_counter() - t0
    report = {}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                report = json.loads(line)
                break
            except ValueError:
                continue
    report["exit"] = p.returncode
    return wall, report


def med(values):
    return "%7.2f (%5.2f..%5.2f)" % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", default="example,slowload")
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
            rec0, recn, rep0, repn, rec_wall = [], [], [], [], []
            problems = []
            for rnd in range(args.runs):
                trace = os.path.join(work, "%s-%d" % (name, rnd))
                t0 = time.perf_counter()
                subprocess.run([dlrecord, "-q", "-o", trace, "--"] + job, check=True, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                rec_wall.append(time.perf_counter() - t0)
                times = step_times(dltrace, trace, {0, n})
                rec0.append(times[0])
                recn.append(times[n])
                order = [0, n] if rnd % 2 == 0 else [n, 0]
                for step in order:
                    wall, report = replay(dlreplay, trace, step)
                    if report.get("outcome") != "target" or report["exit"] != 0:
                        problems.append("round %d step=%d: exit %s outcome %s: %s" % (
                            rnd, step, report["exit"], report.get("outcome"), report.get("message", "")[:200]))
                    elif step == n and report.get("verified_steps") != n:
                        problems.append("round %d: %s steps verified before step %d"
                                        % (rnd, report.get("verified_steps"), n))
                    (rep0 if step == 0 else repn).append(wall)
                shutil.rmtree(trace, ignore_errors=True)
                print("  %s: round %d/%d done (load %.2f)" % (name, rnd + 1, args.runs, os.getloadavg()[0]),
                      file=sys.stderr)
            steps_rec = [b - a for a, b in zip(rec0, recn)]
            steps_rep = [b - a for a, b in zip(rep0, repn)]
            print()
            print("job %s: N = %d; recorded run %s s wall in all (dlrecord, to its end)" % (name, n, med(rec_wall)))
            print("%-12s %24s %24s %24s" % ("seconds", "recorded", "replay", "replay / recorded"))
            for label, a, b in (("to step 0", rec0, rep0), ("to step N", recn, repn), ("0 -> N", steps_rec, steps_rep)):
                print("%-12s %24s %24s %24s" % (label, med(a), med(b), med([y / x for x, y in zip(a, b)])))
            print("%-12s %24s %24s" % ("ms per step", "%.1f" % (statistics.median(steps_rec) / n * 1e3),
                                         "%.1f" % (statistics.median(steps_rep) / n * 1e3)))
            for p in problems:
                print("  problem: " + p)
            sys.stdout.flush()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
