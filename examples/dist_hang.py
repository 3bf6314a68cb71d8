"""A 2-rank gloo job that stops meeting its peers on purpose (docs/distributed.md, hangs).

Each step all-reduces a tensor. --fault picks what --fault-rank does at --fault-step:
  sleep      sleeps (stuck in "data loading") before the step's all_reduce
  desync     calls broadcast where the other ranks call all_reduce
  fewer      runs one step fewer than the others, then leaves normally
  kill       kills itself with SIGKILL before the step's all_reduce
The process group times out after --timeout seconds, as a real job's watchdog would stop it.
"""
import argparse
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist


def load_batch(step, rank, args):
    if args.fault == "sleep" and rank == args.fault_rank and step == args.fault_step:
        time.sleep(args.sleep)  # a data loader that never returns
    return torch.full((4,), float(rank + step))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--fault", choices=["none", "sleep", "desync", "fewer", "kill"], default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=1)
    p.add_argument("--timeout", type=float, default=6.0)
    p.add_argument("--sleep", type=float, default=60.0)
    args = p.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    steps = args.steps - 1 if args.fault == "fewer" and rank == args.fault_rank else args.steps
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = load_batch(step, rank, args)
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        faulty = rank == args.fault_rank and step == args.fault_step
        if args.fault == "kill" and faulty:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.fault == "desync" and faulty:
            dist.broadcast(x, src=0)
        else:
            dist.all_reduce(x)
        opt.step()
        print("rank %d step %d sum %.1f" % (rank, step, float(x.sum())), flush=True)
    if steps < args.steps:
        return  # leaves with its process group open: its peers find out when the process is gone
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
