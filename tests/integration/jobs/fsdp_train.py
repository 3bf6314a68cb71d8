"""A 2-rank FSDP training job on CPU (gloo), ranks started by hand (env://): FSDP's own
all-gathers and reduce-scatters go through torch.distributed's Python functions.
    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=P python3 fsdp_train.py [--steps N]"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--nan-step", type=int, default=None)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    torch.manual_seed(0)
    model = FSDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)), device_id=torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(args.steps):
        x = torch.randn(8, 16, generator=g)
        if args.nan_step is not None and step == args.nan_step and rank == 1:
            x[0, 0] = float("nan")
        y = torch.randint(0, 4, (8,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("rank %d step %d loss %.6f" % (rank, step, loss.item()), flush=True)
    dist.destroy_process_group()
    print("rank %d done" % rank, flush=True)


if __name__ == "__main__":
    main()
