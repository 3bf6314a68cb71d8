#!/usr/bin/python3
"""Tiny data-parallel training job with explicit collectives, no DDP (gloo, CPU).

Meant to be started by torchrun (see examples/ddp_train.py for the command):

    /usr/bin/python3 -m torch.distributed.run --rdzv_backend=c10d \
        --rdzv_endpoint=localhost:0 --nnodes=1 --nproc_per_node=2 \
        --redirects 1 --tee 1 --monitor_interval 0.2 \
        examples/collectives_train.py --steps 6

Every rank seeds torch with --seed + rank, so the ranks' initial parameters
differ until rank 0's are copied to all ranks with dist.broadcast.  Each step
every rank draws its own batch (torch.randn from a generator seeded with
(seed, rank, step)), runs forward/backward, averages the gradients by hand
(dist.all_reduce SUM on each .grad, then divide by the world size), calls
dist.all_gather on a checksum of its parameters to check that the ranks are
still in sync, dist.barrier(), and then the SGD step.

Output, flushed, one line per step and one at the end:

    rank {r} step {step} loss {loss:.6f}        step counts from 0
    rank {r} step {step} params out of sync     only if the check fails
    rank {r} done

--nan-rank R --nan-step S: x[0, 0] of rank R's batch is NaN at step S, so
that rank's loss and gradients are NaN at step S; the gradient all_reduce
spreads them, and every rank's loss is NaN from step S+1 on.  Exits 0.
Started without torchrun it runs as a single-rank job.
"""

import argparse
import os
import socket
import sys
from collections import OrderedDict

import torch
import torch.distributed as dist
from torch import nn

IN_FEATURES = 8
HIDDEN = 16
OUT = 4


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--nan-rank", type=int, default=None)
    p.add_argument("--nan-step", type=int, default=None)
    return p.parse_args(argv)


def default_single_rank_env():
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                      LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)
    default_single_rank_env()
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = dist.get_rank()
    world = dist.get_world_size()

    torch.manual_seed(args.seed + rank)  # different per rank on purpose
    model = nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(IN_FEATURES, HIDDEN)),
        ("act", nn.Tanh()),
        ("fc2", nn.Linear(HIDDEN, OUT)),
    ]))
    with torch.no_grad():
        for p in model.parameters():
            dist.broadcast(p, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()
    # fixed target map, the same in every rank
    w_true = torch.randn(IN_FEATURES, OUT,
                         generator=torch.Generator().manual_seed(4321))

    for step in range(args.steps):
        g = torch.Generator().manual_seed(
            (args.seed * 1000003 + rank) * 1000003 + step)
        x = torch.randn(args.batch_size, IN_FEATURES, generator=g)
        y = torch.tanh(x @ w_true)
        if rank == args.nan_rank and step == args.nan_step:
            x[0, 0] = float("nan")

        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(world)

        with torch.no_grad():
            checksum = torch.stack([p.sum() for p in model.parameters()]).sum()
        gathered = [torch.zeros_like(checksum) for _ in range(world)]
        dist.all_gather(gathered, checksum.reshape(()))
        in_sync = all(torch.allclose(t, checksum, rtol=0, atol=0, equal_nan=True)
                      for t in gathered)
        dist.barrier()
        opt.step()

        print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
        if not in_sync:
            print(f"rank {rank} step {step} params out of sync", flush=True)

    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
