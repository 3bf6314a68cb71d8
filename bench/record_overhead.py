"""Record overhead of dlrr against the plain job and against peers, in one run.

    /usr/bin/python3 bench/record_overhead.py [--runs 5] [--build build]
                                              [--jobs example,cnn] [--variants ...]
                                              [--baseline OTHER_BUILD]

Jobs (examples/train.py on data written by examples/prepare_data.py):
  example        the example job as shipped: 2 DataLoader workers, 2 epochs (128 steps),
                 --seed 8, the dataset's corrupted sample gives a NaN loss at step 30
  example-clean  the same on a dataset without the corrupted sample (every peer, including
                 detect_anomaly, which raises at a NaN, runs all 128 steps)
  cnn            clean dataset, --workers 0, 3 epochs (192 steps): loading in the main thread
  tv-mnist-cnn   torchvision datasets.MNIST (2048 IDX samples), Compose([ToTensor(), Normalize()])
                 in the main thread, small CNN, 2 epochs (256 steps); tests/integration/jobs
  tv-mnist-rnn   the same data, an RNN over the image rows
  tv-mnist-ema-metric  the CNN plus an EMA copy and a metric module called every step

Variants: plain (python3 train.py), dlrecord --capture minimal|default|full, and the peers
of bench/peer_wrapper.py: the wrapper alone, torch.autograd.set_detect_anomaly(True), a
global forward hook checking torch.isfinite on every module output, torch.save of every
DataLoader batch.  With --baseline, base-minimal|base-default|base-full run the dlrecord
of another build (e.g. one of an earlier commit) in the same rounds, for before/after.

Every round runs every variant once, in a shuffled order (plus the plain job and dlrecord
default with --epochs 0, for start-up), so that the drift of a shared machine hits all
variants alike; ratios are computed per round (variant / plain of the same round) and
reported as the median with the min..max over rounds.  Two clocks:
  wall  elapsed time of the whole command, as a user sees it (start-up included);
  cpu   user+sys CPU time of the command and every process it waited for (DataLoader
        workers, dlrecord's writer thread): less sensitive to other load on the machine.
"steps" ratios subtract each side's start-up (its --epochs 0 run; the peers use the plain
job's), i.e. they compare the training loops only.  ms/step is the plain job's
(median wall - median start-up) / steps, evaluation passes and worker start-up included.
Trace bytes per step: the trace directory's file bytes / completed steps, and the batch
bytes per step (dltrace steps).

A variant that exits non-zero is reported as such (detect_anomaly raises at the example
job's NaN) and gets no ratio: it did not do the same work.
This is a benchmark, not a test: it asserts nothing.
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DLRR_MODES = ("minimal", "default", "full")
PEERS = ("wrapper", "anomaly", "isfinite", "save")
PEER_LABELS = {"wrapper": "peer wrapper only", "anomaly": "detect_anomaly",
               "isfinite": "isfinite hooks", "save": "torch.save batches"}


class Run:
    __slots__ = ("wall", "cpu", "rc", "steps", "trace", "stderr")

    def __init__(self, wall, cpu, rc, steps, trace, stderr):
        self.wall, self.cpu, self.rc, self.steps, self.trace, self.stderr = (
            wall, cpu, rc, steps, trace, stderr)


def run(argv, env, work, trace=None):
    """Runs argv to completion; wall time, CPU time of it and its reaped descendants."""
    out_path = os.path.join(work, "stdout.txt")
    with open(out_path, "w") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    with open(out_path) as f:
        done = re.findall(r"^done steps (\d+)$", f.read(), re.M)
    steps = int(done[-1]) if done else None
    return Run(wall, usage.ru_utime + usage.ru_stime, p.returncode, steps, trace, stderr)


def trace_sizes(dltrace, trace):
    """(steps, file bytes, batch bytes) of a trace."""
    info = json.loads(subprocess.run([dltrace, "info", trace, "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    steps = json.loads(subprocess.run([dltrace, "steps", trace, "--json"], capture_output=True,
                                      text=True, check=True).stdout)
    batch = sum(s.get("batch_bytes", 0) for s in steps.get("steps", []))
    return info["steps"], info["bytes"]["files"], batch


def dir_bytes(path):
    total = 0
    for base, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total


def med_range(values):
    return statistics.median(values), min(values), max(values)


def fmt_ratio(values):
    if not values:
        return "%20s" % "-"
    m, lo, hi = med_range(values)
    return "%6.3fx [%5.3f..%5.3f]" % (m, lo, hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="rounds (every variant once per round)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", default="example,cnn")
    ap.add_argument("--variants", default="plain,minimal,default,full," + ",".join(PEERS),
                    help="subset of plain,minimal,default,full,wrapper,anomaly,isfinite,save")
    ap.add_argument("--seed", type=int, default=0, help="seed of the per-round shuffle")
    ap.add_argument("--keep", metavar="DIR", help="keep the traces of the last round here")
    ap.add_argument("--baseline", metavar="BUILD",
                    help="build directory whose dlrecord the base-* variants run")
    args = ap.parse_args()
    dlrecord = os.path.join(args.build, "bin", "dlrecord")
    dltrace = os.path.join(args.build, "bin", "dltrace")
    for tool in (dlrecord, dltrace):
        if not os.access(tool, os.X_OK):
            sys.exit("%s not found: build first (or pass --build)" % tool)
    work = tempfile.mkdtemp(prefix="dlrr-bench-")
    shuffle = random.Random(args.seed)
    try:
        datasets = {"nan": os.path.join(work, "data-nan"), "clean": os.path.join(work, "data-clean")}
        subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out",
                        datasets["nan"]], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out",
                        datasets["clean"], "--corrupt-index", "-1"], check=True,
                       stdout=subprocess.DEVNULL)
        train = os.path.join(ROOT, "examples", "train.py")
        # torchvision's datasets.MNIST over IDX files, transforms run in the main process
        tv = os.path.join(ROOT, "tests", "integration", "jobs", "tv_mnist.py")
        mnist = os.path.join(work, "mnist")
        subprocess.run([PY, tv, "--root", mnist, "--write", "2048"], check=True)
        wrapper = os.path.join(ROOT, "bench", "peer_wrapper.py")
        jobs = {
            "example": [train, "--data", datasets["nan"], "--seed", "8"],
            "example-clean": [train, "--data", datasets["clean"], "--seed", "8"],
            "cnn": [train, "--data", datasets["clean"], "--seed", "8", "--epochs", "3",
                    "--workers", "0"],
            "tv-mnist-cnn": [tv, "--root", mnist, "--model", "cnn"],
            "tv-mnist-rnn": [tv, "--root", mnist, "--model", "rnn"],
            "tv-mnist-ema-metric": [tv, "--root", mnist, "--ema", "--metric"],
        }
        variants = args.variants.split(",")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DLRR_")}
        print("machine: %d cores, load average at start %.2f %.2f %.2f; %d rounds"
              % ((os.cpu_count(),) + os.getloadavg() + (args.runs,)))
        for name in args.jobs.split(","):
            job = jobs[name]
            counter = [0]

            def fresh():
                counter[0] += 1
                return os.path.join(work, "trace-%d" % counter[0])

            def command(variant, epochs0=False):
                j = job + (["--epochs", "0"] if epochs0 else [])
                trace = None
                if variant == "plain":
                    argv = [PY] + j
                elif variant in DLRR_MODES:
                    trace = fresh()
                    argv = [dlrecord, "-q", "--capture", variant, "-o", trace, "--", PY] + j
                elif variant.startswith("base-"):
                    trace = fresh()
                    argv = [os.path.join(args.baseline, "bin", "dlrecord"), "-q", "--capture",
                            variant[5:], "-o", trace, "--", PY] + j
                else:
                    argv = [PY, wrapper, "plain" if variant == "wrapper" else variant] + j
                return argv, trace

            results = {v: [] for v in variants}
            startup = {"plain": [], "default": []}
            sizes = {}
            save_bytes = []
            for rnd in range(args.runs):
                order = [(v, False) for v in variants] + [("plain", True), ("default", True)]
                shuffle.shuffle(order)
                for v, epochs0 in order:
                    argv, trace = command(v, epochs0)
                    renv = env
                    save_dir = None
                    if v == "save":
                        save_dir = os.path.join(work, "save")
                        renv = dict(env, PEER_SAVE_DIR=save_dir)
                    r = run(argv, renv, work, trace)
                    if epochs0:
                        startup[v].append(r)
                    else:
                        results[v].append(r)
                        if trace and r.rc == 0 and v not in sizes:
                            sizes[v] = trace_sizes(dltrace, trace)
                        if save_dir:
                            save_bytes.append((dir_bytes(save_dir), r.steps))
                    if save_dir:
                        shutil.rmtree(save_dir, ignore_errors=True)
                    if trace:
                        if args.keep and rnd == args.runs - 1 and not epochs0:
                            os.makedirs(args.keep, exist_ok=True)
                            dest = os.path.join(args.keep, "%s-%s" % (name, v))
                            shutil.rmtree(dest, ignore_errors=True)
                            shutil.move(trace, dest)
                        shutil.rmtree(trace, ignore_errors=True)
                print("  %s: round %d/%d done (load %.2f)" % (name, rnd + 1, args.runs,
                                                              os.getloadavg()[0]), file=sys.stderr)
            report(name, variants, results, startup, sizes, save_bytes, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def label(v):
    if v.startswith("base-"):
        return "baseline " + v[5:]
    return "dlrecord " + v if v in DLRR_MODES else PEER_LABELS.get(v, v)


def report(name, variants, results, startup, sizes, save_bytes, runs):
    plain = results["plain"]
    steps = plain[0].steps or 0
    s_plain_wall = statistics.median(r.wall for r in startup["plain"])
    s_plain_cpu = statistics.median(r.cpu for r in startup["plain"])
    s_rec_wall = statistics.median(r.wall for r in startup["default"])
    s_rec_cpu = statistics.median(r.cpu for r in startup["default"])
    plain_wall = statistics.median(r.wall for r in plain)
    plain_cpu = statistics.median(r.cpu for r in plain)
    print()
    print("job %s: %d steps; plain job %.2f s wall (start-up %.2f s), %.1f ms/step wall, "
          "%.1f ms/step cpu; dlrecord start-up %.2f s wall"
          % (name, steps, plain_wall, s_plain_wall, (plain_wall - s_plain_wall) / steps * 1e3,
             (plain_cpu - s_plain_cpu) / steps * 1e3, s_rec_wall))
    print("%-20s %9s %22s %22s %22s" % ("variant", "median s", "wall ratio", "steps ratio (wall)",
                                         "steps ratio (cpu)"))
    ok = {}
    for v in variants:
        rs = results[v]
        failed = [r for r in rs if r.rc != 0]
        if failed:
            last = failed[-1].stderr.strip().splitlines()
            print("%-20s exit %d in %d/%d rounds, no ratio: %s"
                  % (label(v), failed[-1].rc, len(failed), len(rs), last[-1][:100] if last else ""))
            continue
        recorded = v in DLRR_MODES or v.startswith("base-")
        s_wall = s_rec_wall if recorded else s_plain_wall
        s_cpu = s_rec_cpu if recorded else s_plain_cpu
        wall = [r.wall / p.wall for r, p in zip(rs, plain)]
        steps_wall = [(r.wall - s_wall) / (p.wall - s_plain_wall) for r, p in zip(rs, plain)]
        steps_cpu = [(r.cpu - s_cpu) / (p.cpu - s_plain_cpu) for r, p in zip(rs, plain)]
        ok[v] = rs
        print("%-20s %9.2f %22s %22s %22s" % (label(v), statistics.median(r.wall for r in rs),
                                               fmt_ratio(wall), fmt_ratio(steps_wall),
                                               fmt_ratio(steps_cpu)))
    peers = [v for v in PEERS if v in ok and v != "wrapper"]
    mine = [v for v in DLRR_MODES if v in ok]
    for m in DLRR_MODES:
        base = "base-" + m
        if m in ok and base in ok:
            print("%-20s %22s (wall, same round)" % (
                "%s / baseline" % m, fmt_ratio([a.wall / b.wall for a, b in zip(ok[m], ok[base])])))
            print("%-20s %22s (cpu, same round)" % (
                "", fmt_ratio([a.cpu / b.cpu for a, b in zip(ok[m], ok[base])])))
    if peers and mine:
        print("dlrecord wall time / peer wall time, same round (median [min..max]):")
        print("%-20s" % "" + "".join("%24s" % label(p) for p in peers))
        for v in mine:
            print("%-20s" % label(v) + "".join(
                "%24s" % fmt_ratio([a.wall / b.wall for a, b in zip(ok[v], ok[p])]) for p in peers))
    print("trace bytes per step:")
    for v in mine + [v for v in variants if v.startswith("base-")]:
        if v in sizes:
            s, files, batch = sizes[v]
            print("  %-18s %10.0f B/step on disk (%d steps, %.1f MiB); batches %.0f B/step raw"
                  % (label(v), files / max(s, 1), s, files / 2**20, batch / max(s, 1)))
    if save_bytes:
        b, s = save_bytes[0]
        if s:
            print("  %-18s %10.0f B/step on disk (%d steps, %.1f MiB; eval batches included)"
                  % (label("save"), b / s, s, b / 2**20))
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
