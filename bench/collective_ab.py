"""Hook cost per collective, in one recorded 2-rank gloo job, A/B by rounds.

    /usr/bin/python3 bench/collective_ab.py [--build build] [--rounds 200] [--calls 20]
                                            [--collectives digest|full] [--numel 4]

Runs a 2-rank job under dlrecord and torchrun (gloo, CPU).  Each rank does rounds of --calls
all_reduce calls on a --numel float tensor, with recording on and off in alternate rounds
(the same sequence on both ranks, so they stay in step; the hook's collective wrapper checks
`active` per call).  Per round, the calling thread's CPU time per call; the hook's cost per
collective is recorded minus plain, as min over rounds (other processes only ever add) and
median.  Wall time per call is printed too: a collective waits for the other rank, so on a
loaded 2-core machine it is mostly scheduling.  A benchmark, not a test.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dist_overhead  # noqa: E402  (its torchrun command line)

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOB = textwrap.dedent("""
    import os, statistics, sys, time
    import dlrr_hook
    import torch
    import torch.distributed as dist

    rec = dlrr_hook.current()
    assert rec is not None and rec.active, "not recording"
    dist.init_process_group("gloo")
    rounds, calls, numel = (int(v) for v in sys.argv[1:4])
    x = torch.ones(numel)
    cpu = {True: [], False: []}
    wall = {True: [], False: []}
    for r in range(rounds + 2):
        on = r % 2 == 0
        rec.active = on
        dist.barrier()
        c0, t0 = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(x)
        c1, t1 = time.thread_time(), time.perf_counter()
        if r >= 2:  # warm-up rounds
            cpu[on].append((c1 - c0) / calls * 1e6)
            wall[on].append((t1 - t0) / calls * 1e6)
    rec.active = True
    dist.barrier()
    if dist.get_rank() == 0:
        print("RESULT", repr({"cpu": cpu, "wall": wall}))
    dist.destroy_process_group()
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--numel", type=int, default=4)
    ap.add_argument("--collectives", choices=("digest", "full"), default="digest")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrr-coll-ab-")
    try:
        script = os.path.join(tmp, "job.py")
        with open(script, "w") as f:
            f.write(JOB)
        argv = [os.path.join(args.build, "bin", "dlrecord"), "-q", "--collectives", args.collectives,
                "-o", os.path.join(tmp, "trace"), "--"] + dist_overhead.torchrun(2, os.path.join(tmp, "logs")) + [
                script, str(args.rounds), str(args.calls), str(args.numel)]
        p = subprocess.run(argv, capture_output=True, text=True)
        m = re.search(r"RESULT (.*)", p.stdout)
        if p.returncode != 0 or m is None:
            sys.exit("job failed (exit %d):\n%s" % (p.returncode, (p.stdout + p.stderr)[-3000:]))
        r = eval(m.group(1))  # our own repr of floats
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all_reduce of %d floats, gloo, 2 ranks, --collectives %s, %d rounds of %d calls; load average %.2f"
          % (args.numel, args.collectives, args.rounds, args.calls, os.getloadavg()[0]))
    for clock in ("cpu", "wall"):
        plain, rec = sorted(r[clock][False]), sorted(r[clock][True])
        pairs = sorted(b - a for a, b in zip(r[clock][False], r[clock][True]))
        print("%-4s us/call: plain min %.1f median %.1f; recorded min %.1f median %.1f; hook min-min %.1f, "
              "median of round pairs %.1f (p10 %.1f, p90 %.1f)"
              % (clock, plain[0], plain[len(plain) // 2], rec[0], rec[len(rec) // 2], rec[0] - plain[0],
                 pairs[len(pairs) // 2], pairs[len(pairs) // 10], pairs[len(pairs) * 9 // 10]))


if __name__ == "__main__":
    sys.exit(main())
