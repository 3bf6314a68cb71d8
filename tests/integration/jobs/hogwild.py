"""PyTorch's examples/mnist_hogwild pattern: model.share_memory(), N torch.multiprocessing
processes each training it with their own DataLoader and optimizer, no torch.distributed.
--separate gives each process its own model (no race). --start os-fork starts the trainers
with plain os.fork() (no multiprocessing), as hand-written Hogwild loops do. --nan-at K makes
the input of process 0's K-th step NaN."""
import argparse
import os

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(rank, model, args):
    torch.manual_seed(1 + rank)
    if args.separate:
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    x = torch.randn(256, 8)
    y = (x[:, 0] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, num_workers=args.workers)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(args.epochs):
        for step, (xb, yb) in enumerate(loader):
            if rank == 0 and epoch * len(loader) + step == args.nan_at:
                xb = xb * float("nan")
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
    print("process %d loss %.6f" % (rank, loss.item()), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--start", default="fork")
    ap.add_argument("--separate", action="store_true")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--nan-at", type=int, default=-1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model.share_memory()
    if args.start == "os-fork":
        pids = []
        for rank in range(args.processes):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    train(rank, model, args)
                    code = 0
                finally:
                    os._exit(code)
            pids.append(pid)
        print("exit codes", [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids])
        return
    ctx = mp.get_context(args.start)
    procs = [ctx.Process(target=train, args=(rank, model, args)) for rank in range(args.processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("exit codes", [p.exitcode for p in procs])


if __name__ == "__main__":
    main()
