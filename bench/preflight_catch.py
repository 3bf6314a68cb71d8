"""Does preflight catch late failures faster than a short plain run?  (issue 28)

    /usr/bin/python3 bench/preflight_catch.py [--build build] [--jobs a,b,...] [--full]

A suite of late-failure jobs (tests/integration/jobs: a torchvision ResNet with a failure
planted after training, issue 28's loop shapes, a language-model loop without a DataLoader)
and one healthy job.  For each: the shortest plain run a user would try to catch it (the job's
own knob set low: one epoch, a few hundred iterations), and `dlpreflight` on the unchanged full
command (K = 2).  Caught: the run failed with the planted error in its output (dlpreflight:
exit 1 naming it; exit 10 INCOMPLETE counts as flagged, not caught).  A healthy job that does not
pass is a false alarm.  --full also times the full plain job until it fails.

Prints one line per job (seconds and outcome of each run) and the totals.  A benchmark, not a
test: it asserts nothing.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = os.path.join(ROOT, "tests", "integration", "jobs")


def suite(tmp):
    """name -> (full argv, short argv, planted error text or None for a healthy job)."""
    vision = [PY, os.path.join(JOBS, "preflight_vision.py"), "--out"]
    patterns = [PY, os.path.join(JOBS, "preflight_patterns.py"), "--out", os.path.join(tmp, "out")]
    tokens = os.path.join(tmp, "tokens.bin")
    np.random.RandomState(0).randint(0, 64, size=100000).astype(np.uint16).tofile(tokens)
    lm = [PY, os.path.join(JOBS, "preflight_lm.py"), "--data", tokens, "--meta", os.path.join(tmp, "no", "meta.json")]
    jobs = {}
    for fail, text in (("eval-path", "index.json"), ("metric-key", "top5"), ("ckpt-dir", "ckpt"),
                       ("export", "missing-export-dir")):
        out = os.path.join(tmp, "vision-" + fail)
        full = vision + [out, "--fail", fail]
        jobs["vision-" + fail] = (full, full + ["--epochs", "1"], text)
    out = os.path.join(tmp, "vision-healthy")
    jobs["vision-healthy"] = (vision + [out], vision + [out, "--epochs", "1"], None)
    jobs["eval-every-n"] = (patterns + ["--pattern", "eval-every-n", "--fail"], None, "validation at step 50")
    jobs["nested-nograd"] = (patterns + ["--pattern", "nested-nograd", "--fail"], None, "the job's own error")
    jobs["lm-meta"] = (lm + ["--max-iters", "5000"], lm + ["--max-iters", "200"], "meta.json")
    return jobs


def timed(argv, cwd):
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    return time.perf_counter() - t0, p


def outcome(p, text, preflight):
    out = p.stdout + p.stderr
    if text is None:
        return "passed" if p.returncode == 0 else "FALSE ALARM (exit %d)" % p.returncode
    if preflight and p.returncode == 10:
        return "flagged (INCOMPLETE)"
    return "caught" if p.returncode != 0 and text in out else "missed (exit %d)" % p.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", help="comma-separated subset")
    ap.add_argument("--full", action="store_true", help="also time the full plain job")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrr-preflight-catch-")
    rows, totals = [], {"preflight": 0, "short": 0, "n": 0, "false": 0}
    try:
        jobs = suite(tmp)
        names = args.jobs.split(",") if args.jobs else list(jobs)
        for name in names:
            full, short, text = jobs[name]
            os.makedirs(os.path.join(tmp, "out"), exist_ok=True)
            for argv in (full, short):
                if argv and "--out" in argv:
                    os.makedirs(argv[argv.index("--out") + 1], exist_ok=True)
            row = [name]
            if args.full:
                t, p = timed(full, tmp)
                row.append("full %.1f s %s" % (t, outcome(p, text, False)))
            if short is not None:
                t, p = timed(short, tmp)
                o = outcome(p, text, False)
                totals["short"] += o == "caught"
                row.append("short plain %.1f s %s" % (t, o))
            else:
                row.append("short plain: the job has no knob to shorten it")
            trace = os.path.join(tmp, "trace-" + name)
            t, p = timed([os.path.join(args.build, "bin", "dlpreflight"), "-o", trace, "--"] + full, tmp)
            o = outcome(p, text, True)
            totals["preflight"] += o == "caught"
            totals["false"] += o.startswith("FALSE")
            totals["n"] += text is not None
            row.append("dlpreflight %.1f s %s" % (t, o))
            shutil.rmtree(trace, ignore_errors=True)
            rows.append(row)
            print(" | ".join(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("caught by dlpreflight: %d of %d late failures, %d false alarms; by a short plain run: %d; load average %.2f"
          % (totals["preflight"], totals["n"], totals["false"], totals["short"], os.getloadavg()[0]))


if __name__ == "__main__":
    sys.exit(main())
