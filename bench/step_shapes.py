"""Per-step recording cost of the two shapes of issue 33, whole processes, in one run.

    /usr/bin/python3 bench/step_shapes.py [--build build] [--shapes lm,cnn] [--pairs 8]
                                          [--steps lm=300,cnn=600] [--captures default,minimal]
                                          [--baseline OTHER_BUILD]

Shapes (bench/shape_job.py): *lm*, a 2-block transformer LM over np.memmap windows without a
DataLoader (batch 16x32), and *cnn*, a small CNN on a synthetic Dataset through a DataLoader.
Each round runs, in a shuffled order, the plain job and `dlrecord --capture C` for every C in
--captures (and the --baseline build's dlrecord, `base-C`, for before/after in the same run),
each for N steps and for 1 step.  `--captures hookless` adds dlrecord with the Python hook kept out
(PYTHONPATH unset for the job): the preloaded library's own cost, the floor of every level.  The 1-step run is the start-up (interpreter, torch, the
recorder's own start and end); the per-step figure of a variant in a round is
((its N-step run - its 1-step run) - (plain's N - plain's 1)) / (N - 1), and the ratio is
(its N - its 1) / (plain's N - plain's 1).  Both are reported as the median over rounds, with
the min..max.

Clocks: *cpu* is user+system CPU of the command and every process it reaped
(`os.wait4`'s rusage: the job, its threads, dlrecord, the recorder's writer thread), the figure
to trust on a shared machine; *sys* its system part alone; *wall* the elapsed time, which other
people's load on the 2 shared cores moves by tens of percent (noisy: read it as an indication).
At load 15 a round of both shapes took ~5-6 minutes (progress goes to stderr).
This is a benchmark, not a test: it asserts nothing.
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "bench", "shape_job.py")


def run(argv, env):
    """Runs argv to completion: (wall, cpu, sys) seconds, the CPU of it and its reaped children."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("%s failed:\n%s" % (" ".join(argv), err.decode(errors="replace")[-3000:]))
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_stime


def variant_argv(variant, build, baseline, trace):
    if variant == "plain":
        return [PY, JOB]
    base, capture = (baseline, variant[5:]) if variant.startswith("base-") else (build, variant)
    if capture == "hookless":
        # The preloaded library alone (entropy, files, processes, signals), without the Python
        # hook: the floor under every --capture level, which all load the hook.
        return [os.path.join(base, "bin", "dlrecord"), "-q", "-o", trace, "--", "env", "-u", "PYTHONPATH", PY, JOB]
    return [os.path.join(base, "bin", "dlrecord"), "-q", "--capture", capture, "-o", trace, "--", PY, JOB]


def spread(values, fmt):
    return (fmt + " (" + fmt + ".." + fmt + ")") % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--baseline", help="another build directory (bin/, lib/) whose dlrecord runs as base-C")
    ap.add_argument("--shapes", default="lm,cnn")
    ap.add_argument("--pairs", type=int, default=8, help="rounds (each runs every variant at N and 1 steps)")
    ap.add_argument("--steps", default="lm=300,cnn=600")
    ap.add_argument("--captures", default="default,minimal")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    steps = dict((k, int(v)) for k, v in (kv.split("=") for kv in args.steps.split(",")))
    captures = args.captures.split(",")
    variants = ["plain"] + captures + (["base-" + c for c in captures] if args.baseline else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLRR_") and k not in ("LD_PRELOAD",)}
    # One compute thread: OpenBLAS's and OpenMP's spinning workers would otherwise fill both
    # shared cores with busy-waiting (system time from sched_yield) that drowns the recorder's.
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    rnd = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="dlrr-step-shapes-")
    loads = []
    try:
        data = os.path.join(tmp, "data")
        subprocess.run([PY, JOB, "--prepare", "--data", data], check=True)
        for shape in args.shapes.split(","):
            n = steps[shape]
            results = {v: [] for v in variants}  # per round: {steps: (wall, cpu, sys)}
            for round_ in range(args.pairs):
                print("%s: round %d/%d, load average %.1f" % (shape, round_ + 1, args.pairs, os.getloadavg()[0]),
                      file=sys.stderr, flush=True)
                order = [(v, k) for v in variants for k in (n, 1)]
                rnd.shuffle(order)
                got = {}
                for v, k in order:
                    trace = os.path.join(tmp, "trace")
                    shutil.rmtree(trace, ignore_errors=True)
                    argv = variant_argv(v, args.build, args.baseline, trace)
                    got[v, k] = run(argv + ["--shape", shape, "--steps", str(k), "--data", data], env)
                loads.append(os.getloadavg()[0])
                for v in variants:
                    results[v].append((got[v, n], got[v, 1]))
            report(shape, n, variants, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("load average over the rounds: %.2f..%.2f (2 cores)" % (min(loads), max(loads)))


def report(shape, n, variants, results):
    print("\n%s: %d steps against 1, %d rounds; median (min..max) over rounds" % (shape, n, len(results["plain"])))
    plain = results["plain"]
    loop = lambda r, c: r[0][c] - r[1][c]  # noqa: E731  N-step run minus the 1-step run
    print("plain: start-up %s s wall; %s ms/step wall, %s ms/step cpu, %s ms/step sys" % (
        spread([r[1][0] for r in plain], "%.2f"),
        spread([loop(r, 0) / (n - 1) * 1e3 for r in plain], "%.2f"),
        spread([loop(r, 1) / (n - 1) * 1e3 for r in plain], "%.2f"),
        spread([loop(r, 2) / (n - 1) * 1e3 for r in plain], "%.2f")))
    print("%-16s %-26s %-26s %-26s %-24s %-24s" % ("variant", "cpu us/step", "cpu ratio", "sys us/step",
                                                     "wall ratio (noisy)", "start-up +s cpu"))
    for v in variants[1:]:
        rs = results[v]
        row = [spread([(loop(a, c) - loop(p, c)) / (n - 1) * 1e6 for a, p in zip(rs, plain)], "%.0f")
               for c in (1,)]
        row.append(spread([loop(a, 1) / loop(p, 1) for a, p in zip(rs, plain)], "%.3f"))
        row.append(spread([(loop(a, 2) - loop(p, 2)) / (n - 1) * 1e6 for a, p in zip(rs, plain)], "%.0f"))
        row.append(spread([loop(a, 0) / loop(p, 0) for a, p in zip(rs, plain)], "%.3f"))
        row.append(spread([a[1][1] - p[1][1] for a, p in zip(rs, plain)], "%.2f"))
        print("%-16s %-26s %-26s %-26s %-24s %-24s" % tuple([v] + row))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
