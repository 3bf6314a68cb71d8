"""A small unseeded training job for the integration tests.

--steps N             training steps (DataLoader over an in-memory dataset, 2 workers)
--segv-at N           dereference NULL through ctypes at step N (a native crash)
--raise-at N          raise KeyError at step N (an ordinary Python failure)
--raise-multiline-at N  raise RuntimeError at step N whose message has several lines (the
                      last with a terminal escape sequence)
--own-excepthook      install an excepthook that prints the exception without chaining to
                      the one before it (the hook then learns of the exception only at exit)
--no-loader           count steps by optimizer.step() with tensors made in the loop
DLRR_TEST_SCALE_FROM=S doubles step S's inputs (a replay then diverges at step S's first module).
The learning rate comes from DLRR_TEST_LR (default 0.05), so a test can make a replay
diverge by changing it.
"""
import argparse
import ctypes
import os
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __len__(self):
        return 512

    def __getitem__(self, i):
        x = torch.full((8,), float(i % 7)) + torch.from_numpy(np.random.normal(size=8).astype("float32"))
        return x * (1.0 if random.random() < 0.5 else -1.0), i % 3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--segv-at", type=int, default=-1)
    ap.add_argument("--raise-at", type=int, default=-1)
    ap.add_argument("--raise-multiline-at", type=int, default=-1)
    ap.add_argument("--own-excepthook", action="store_true")
    ap.add_argument("--no-loader", action="store_true")
    args = ap.parse_args()
    # A replay given the same argv can be made to end otherwise (dlreplay attaches by argv).
    args.steps = int(os.environ.get("DLRR_TEST_STEPS", args.steps))
    args.raise_at = int(os.environ.get("DLRR_TEST_RAISE_AT", args.raise_at))
    if args.own_excepthook:
        sys.excepthook = lambda t, e, tb: print("job: uncaught %s" % t.__name__, file=sys.stderr)
    lr = float(os.environ.get("DLRR_TEST_LR", "0.05"))
    scale_from = int(os.environ.get("DLRR_TEST_SCALE_FROM", "-1"))  # inputs doubled from this step
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()

    def batches():
        if args.no_loader:
            for _ in range(args.steps):
                yield torch.randn(16, 8), torch.randint(0, 3, (16,))
        else:
            loader = DataLoader(Noisy(), batch_size=16, shuffle=True, num_workers=2)
            step = 0
            while step < args.steps:
                for batch in loader:
                    yield batch
                    step += 1
                    if step >= args.steps:
                        return

    for step, (x, y) in enumerate(batches()):
        if step == args.segv_at:
            ctypes.string_at(0)
        if step == args.raise_at:
            raise KeyError("missing-key-%d" % step)
        if step == args.raise_multiline_at:
            raise RuntimeError("first-line of the message\nsecond-line\nlast-line \x1b[31mred")
        if step == scale_from:
            x = x * 2
        out = model(x)
        if scale_from >= 0:
            print("step %d forward done" % step, flush=True)
        loss = loss_fn(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
