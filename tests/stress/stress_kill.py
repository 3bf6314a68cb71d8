#!/usr/bin/env python3
"""kill -9 stress: records tests/integration/jobs/tiny_train.py COUNT times and kills the job
at a random moment each time (startup, mid-run, right after "done" during the final flush),
then checks every trace as tests/integration/killing.py describes (it opens, dltrace verify
exits 0, every step the job had printed as completed is there). Not run by CI (too long).

    DLRR_BUILD=build /usr/bin/python3 tests/stress/stress_kill.py 100 [--seed S] [--replay-every K]

Prints one line per kill and the figures at the end; exits 1 on the first broken promise
(the trace is kept and its path printed)."""
import argparse
import collections
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
os.environ.setdefault("DLRR_BUILD", os.path.join(HERE, "..", "..", "build"))

from harness import run, tool  # noqa: E402
import killing  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("count", type=int)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--replay-every", type=int, default=10,
                    help="also replay every K-th recovered trace to its last step (0: never)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    print("stress_kill: %d kills, seed %d, tiny_train --steps %d" % (args.count, seed, args.steps), flush=True)
    work = tempfile.mkdtemp(prefix="dlrr-stress-")
    moments = collections.Counter()
    states = collections.Counter()
    replays = 0
    t_start = time.time()
    for i in range(args.count):
        trace = os.path.join(work, "k%04d.trace" % i)
        r = rng.random()
        if r < 0.3:
            kw, what = {"delay": rng.uniform(0.0, 1.6)}, "startup"      # interpreter, imports, library
        elif r < 0.85:
            k = rng.randrange(0, args.steps)
            kw, what = {"after_step": k}, "step"
        else:
            kw, what = {"at_done": True}, "final-flush"
        try:
            f = killing.kill_once(trace, steps=args.steps, **kw)
        except AssertionError as e:
            print("FAIL kill %d (%s %s): %s\ntrace kept: %s" % (i, what, kw, e, trace), flush=True)
            return 1
        moments[what] += 1
        states[f["state"]] += 1
        line = "kill %4d %-11s at %6.3fs rc=%s printed=%3d trace_steps=%3d streams=%s" % (
            i, what, f["killed_at"] if f["killed_at"] is not None else -1, f["rc"], f["last_printed"],
            f["trace_steps"], f["state"])
        if args.replay_every and f["trace_steps"] and i % args.replay_every == 0:
            rep = run([tool("dlreplay"), trace, "--until", "step=%d" % (f["trace_steps"] - 1), "-q"], timeout=300)
            if rep.returncode != 0:
                print("FAIL replay of kill %d exited %d:\n%s\ntrace kept: %s" % (i, rep.returncode, rep.stderr, trace))
                return 1
            replays += 1
            line += " replayed"
        print(line, flush=True)
        shutil.rmtree(trace, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    print("stress_kill: %d kills survived (%s); job streams %s; %d recovered traces replayed; seed %d; %.0f s"
          % (args.count, dict(moments), dict(states), replays, seed, time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
