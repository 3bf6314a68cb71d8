"""Record overhead on a distributed job (2-rank gloo DDP under torchrun), in one run.

    /usr/bin/python3 bench/dist_overhead.py [--runs 5] [--build build] [--steps 300]
                                            [--hidden 256] [--nproc 2]

Job: examples/ddp_train.py (Linear(8,H)-ReLU-Linear(H,4), SGD, DistributedSampler), every
rank printing its training loop's wall time (--loop-time).
Variants, each run once per round in a shuffled order (so the drift of a shared machine
hits them alike):
  plain     torchrun ... ddp_train.py
  digest    dlrecord --collectives digest (the default): digests of what each rank sent
            and received, results kept for the failure ring only
  full      dlrecord --collectives full: every collective's results in the trace (what
            replaying one rank alone needs)
  debug     the peer: torch's own TORCH_DISTRIBUTED_DEBUG=DETAIL (checks every collective's
            shapes across ranks, no trace)
Reported per variant: the median over rounds of (variant / plain of the same round) for the
whole command's wall time and for each rank's training loop (min..max over rounds), and,
for the dlrecord variants, the trace bytes per step of each rank stream.
This is a benchmark, not a test: it asserts nothing.
"""
import argparse
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
VARIANTS = ("plain", "digest", "full", "debug")


def torchrun(nproc, log_dir):
    return [PY, "-m", "torch.distributed.run", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--nnodes=1",
            "--nproc_per_node=%d" % nproc, "--redirects", "1", "--tee", "1", "--log_dir", log_dir,
            "--monitor_interval", "0.2"]


def run_variant(variant, args, tmp, round_no):
    log_dir = os.path.join(tmp, "logs-%s-%d" % (variant, round_no))
    job = [os.path.join(ROOT, "examples", "ddp_train.py"), "--steps", str(args.steps), "--hidden", str(args.hidden),
           "--batch-size", "16", "--loop-time"]
    argv = torchrun(args.nproc, log_dir) + job
    env = dict(os.environ)
    trace = None
    if variant in ("digest", "full"):
        trace = os.path.join(tmp, "t-%s-%d.trace" % (variant, round_no))
        argv = [os.path.join(args.build, "bin", "dlrecord"), "-q", "--collectives", variant, "-o", trace, "--"] + argv
    if variant == "debug":
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    start = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit("%s failed (exit %d):\n%s" % (variant, p.returncode, p.stderr[-2000:]))
    loops = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"rank (\d+) loop (\S+)", p.stdout)}
    size = {}
    if trace:
        for name in os.listdir(trace):
            m = re.match(r"rank(\d+)\.dls$", name)
            if m:
                size[int(m.group(1))] = os.path.getsize(os.path.join(trace, name))
        shutil.rmtree(trace, ignore_errors=True)
    shutil.rmtree(log_dir, ignore_errors=True)
    return wall, loops, size


def spread(values):
    return "%.3f (%.3f..%.3f)" % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrr-dist-bench-")
    results = {v: [] for v in VARIANTS}
    try:
        for r in range(args.runs):
            order = list(VARIANTS)
            random.shuffle(order)
            for v in order:
                results[v].append(run_variant(v, args, tmp, r))
            print("round %d/%d done" % (r + 1, args.runs), file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    plain = results["plain"]
    print("job: examples/ddp_train.py, %d ranks (gloo, CPU), %d steps, hidden %d; %d rounds; ratios to plain, "
          "median (min..max)" % (args.nproc, args.steps, args.hidden, args.runs))
    print("plain: wall %.2f s; training loop %s s per rank" % (
        statistics.median(w for w, _, _ in plain),
        ", ".join("%.2f" % statistics.median(l[k] for _, l, _ in plain) for k in sorted(plain[0][1]))))
    print("%-8s %-26s %s" % ("variant", "wall (whole command)", "training loop, per rank"))
    for v in VARIANTS[1:]:
        walls = [results[v][i][0] / plain[i][0] for i in range(args.runs)]
        ranks = sorted(plain[0][1])
        per_rank = ["rank %d %s" % (k, spread([results[v][i][1][k] / plain[i][1][k] for i in range(args.runs)]))
                    for k in ranks]
        print("%-8s %-26s %s" % (v, spread(walls), "; ".join(per_rank)))
    for v in ("digest", "full"):
        sizes = results[v][0][2]
        if sizes:
            # Steps per rank: the job's --steps plus the batch fetched when the loop ends.
            print("trace bytes per step (%s): %s" % (v, ", ".join(
                "rank %d %.0f B" % (k, sizes[k] / (args.steps + 1)) for k in sorted(sizes))))


if __name__ == "__main__":
    main()
