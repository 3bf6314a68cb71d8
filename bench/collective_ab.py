"""Hook cost per collective, in one recorded 2-rank gloo job, A/B by rounds.

    /usr/bin/python3 bench/collective_ab.py [--build build] [--rounds 200] [--calls 20]
                                            [--collectives digest|full] [--numel 4]
                                            [--job all_reduce|ddp] [--hidden 256]

Runs a 2-rank job under dlrecord and torchrun (gloo, CPU).  Each rank does rounds of --calls
all_reduce calls on a --numel float tensor, with recording on and off in alternate rounds
(the same sequence on both ranks, so they stay in step; the hook's collective wrapper checks
`active` per call).  Per round, the calling thread's CPU time per call; the hook's cost per
collective is recorded minus plain, as min over rounds (other processes only ever add) and
median.  Wall time per call is printed too: a collective waits for the other rank, so on a
loaded 2-core machine it is mostly scheduling.  With --job ddp, the example DDP job's steps
instead (examples/ddp_train.py's model and loop), recording on and off by blocks of 8 steps:
rank 0's main-thread CPU per step, recorded against plain.  A benchmark, not a test.
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

# The example DDP job's step (examples/ddp_train.py: Linear(8,H)-ReLU-Linear(H,4), SGD, a
# DistributedSampler DataLoader of 16 samples per rank), recording on and off in alternate
# blocks of 8 steps as bench/step_ab.py does: CPU of the main thread per step.
DDP_JOB = textwrap.dedent("""
    import os, sys, time
    import dlrr_hook
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    import torch.nn.modules.module as module_module

    rec = dlrr_hook.current()
    assert rec is not None and rec.active, "not recording"
    dist.init_process_group("gloo")
    blocks, hidden = (int(v) for v in sys.argv[1:3])
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    data = TensorDataset(torch.randn(4096, 8, generator=g), torch.randint(0, 4, (4096,), generator=g))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=16, sampler=sampler)
    model = DDP(nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()

    def set_recording(on):
        if on:
            rec.modules.install(module_module)
        else:
            rec.modules.uninstall()
        rec.active = on

    cpu = {True: [], False: []}
    on, n, epoch = False, 0, 0
    set_recording(False)
    while n < blocks * 8:
        sampler.set_epoch(epoch)
        epoch += 1
        it = iter(loader)
        while n < blocks * 8:
            if n % 8 == 0:
                on = not on
                set_recording(on)
            c0 = time.thread_time()
            try:
                x, y = next(it)
            except StopIteration:
                break
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if n >= 16:  # two warm-up blocks
                cpu[on].append((time.thread_time() - c0) * 1e6)
            n += 1
    set_recording(True)
    dist.barrier()
    if dist.get_rank() == 0:
        print("RESULT", repr({"cpu": cpu}))
    dist.destroy_process_group()
""")

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
    ap.add_argument("--job", choices=("all_reduce", "ddp"), default="all_reduce",
                    help="ddp: the example DDP job's steps instead, --rounds blocks of 8 steps")
    ap.add_argument("--hidden", type=int, default=256, help="--job ddp: the model's hidden width")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrr-coll-ab-")
    try:
        script = os.path.join(tmp, "job.py")
        with open(script, "w") as f:
            f.write(DDP_JOB if args.job == "ddp" else JOB)
        job_args = [str(args.rounds), str(args.hidden)] if args.job == "ddp" else [
            str(args.rounds), str(args.calls), str(args.numel)]
        argv = [os.path.join(args.build, "bin", "dlrecord"), "-q", "--collectives", args.collectives,
                "-o", os.path.join(tmp, "trace"), "--"] + dist_overhead.torchrun(2, os.path.join(tmp, "logs")) + [
                script] + job_args
        p = subprocess.run(argv, capture_output=True, text=True)
        m = re.search(r"RESULT (.*)", p.stdout)
        if p.returncode != 0 or m is None:
            sys.exit("job failed (exit %d):\n%s" % (p.returncode, (p.stdout + p.stderr)[-3000:]))
        r = eval(m.group(1))  # our own repr of floats
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.job == "ddp":
        plain, rec = sorted(r["cpu"][False]), sorted(r["cpu"][True])
        q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]  # noqa: E731
        print("examples/ddp_train.py's step (hidden %d), gloo, 2 ranks, rank 0, --collectives %s, %d/%d steps "
              "recorded/plain; load average %.2f" % (args.hidden, args.collectives, len(rec), len(plain),
                                                    os.getloadavg()[0]))
        print("cpu us/step: plain min %.0f p10 %.0f median %.0f; recorded min %.0f p10 %.0f median %.0f; "
              "ratio of medians %.3f, of p10s %.3f, +us/step (medians) %.0f"
              % (plain[0], q(plain, 0.1), q(plain, 0.5), rec[0], q(rec, 0.1), q(rec, 0.5),
                 q(rec, 0.5) / q(plain, 0.5), q(rec, 0.1) / q(plain, 0.1), q(rec, 0.5) - q(plain, 0.5)))
        return
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
