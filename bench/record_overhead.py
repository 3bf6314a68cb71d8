"""Record overhead of dlrr against the plain job and against peers, in one run.

    /usr/bin/python3 bench/record_overhead.py [--runs 5] [--build build] [--jobs example,cnn]

For each job, every variant runs --runs times, interleaved (plain, dlrecord default,
dlrecord minimal, peers, plain, ...) so that machine drift hits all variants alike. Prints
the median wall time, the ratio to the plain job's median, the per-step time, and for
dlrecord the trace bytes per step. Wall time includes interpreter start-up, as a user sees
it; the per-step column subtracts the plain job's start-up (its time with --epochs 0).
This is a benchmark, not a test: it asserts nothing.
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


def run(argv, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit("failed (%d): %s\n%s" % (p.returncode, " ".join(argv), p.stderr[-2000:]))
    return dt


def trace_steps_bytes(dltrace, trace):
    doc = json.loads(subprocess.run([dltrace, "info", trace, "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    total = doc.get("bytes", {})
    stored = total.get("stored") if isinstance(total, dict) else total
    return doc["steps"], stored


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", default="example,cnn")
    args = ap.parse_args()
    dlrecord = os.path.join(args.build, "bin", "dlrecord")
    dltrace = os.path.join(args.build, "bin", "dltrace")
    work = tempfile.mkdtemp(prefix="dlrr-bench-")
    data = os.path.join(work, "data")
    subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", data], check=True,
                   stdout=subprocess.DEVNULL)
    train = os.path.join(ROOT, "examples", "train.py")
    wrapper = os.path.join(ROOT, "bench", "peer_wrapper.py")
    jobs = {
        # The example job: small CNN, 2 workers, 128 steps, NaN mid-run.
        "example": [train, "--data", data, "--seed", "8"],
        # A cleaner CNN job: same model, no corrupted sample, more steps per process start.
        "cnn": [train, "--data", data, "--seed", "8", "--epochs", "3", "--workers", "0"],
    }
    env = dict(os.environ)
    print("job      variant            median s   ratio   ms/step   trace B/step")
    for name in args.jobs.split(","):
        job = jobs[name]
        variants = {
            "plain": lambda: [PY] + job,
            "dlrecord default": lambda: [dlrecord, "-q", "-o", fresh(), "--", PY] + job,
            "dlrecord minimal": lambda: [dlrecord, "-q", "--capture", "minimal", "-o", fresh(), "--", PY] + job,
            "peer wrapper only": lambda: [PY, wrapper, "plain"] + job,
            "detect_anomaly": lambda: [PY, wrapper, "anomaly"] + job,
            "isfinite hooks": lambda: [PY, wrapper, "isfinite"] + job,
            "torch.save batches": lambda: [PY, wrapper, "save"] + job,
        }
        traces = []

        def fresh():
            t = os.path.join(work, "t%d" % len(traces))
            traces.append(t)
            return t
        times = {v: [] for v in variants}
        startup = []
        for _ in range(args.runs):
            for v, make in variants.items():
                times[v].append(run(make(), env))
            startup.append(run([PY] + job[:1] + job[1:] + ["--epochs", "0"], env))
        base = statistics.median(times["plain"])
        steps, stored = trace_steps_bytes(dltrace, traces[0])
        start = statistics.median(startup)
        for v in variants:
            m = statistics.median(times[v])
            per_step = (m - start) / steps * 1000 if steps else float("nan")
            extra = ""
            if v == "dlrecord default":
                extra = "%10.0f" % (stored / max(steps, 1))
            elif v == "dlrecord minimal":
                s2, b2 = trace_steps_bytes(dltrace, traces[1])
                extra = "%10.0f" % (b2 / max(s2, 1))
            print("%-8s %-18s %8.3f  %6.3fx  %8.2f  %s" % (name, v, m, m / base, per_step, extra))
        for t in traces:
            shutil.rmtree(t, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
