#!/usr/bin/python3
"""A training job whose data loading dominates: for bench/replay_speed.py.

    /usr/bin/python3 bench/slow_loader_job.py [--n 640] [--epochs 2] [--workers 0]
                                              [--sleep-ms 5] [--seed 1]

examples/train.py's SmallCNN on an in-memory synthetic dataset whose __getitem__ stands for
an expensive input pipeline: it sleeps --sleep-ms per sample (I/O: a network filesystem, a
remote store) and runs a heavy NumPy augmentation (a few blurs and a random crop of a
larger image, drawn from np.random).  Batches of 32: with the defaults ~160 ms of loading
per step against a few ms of compute.  Prints `step N loss L` per step and `done steps N`
at the end, like train.py.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train import SmallCNN  # noqa: E402  (the example job's model)


class SlowDataset(Dataset):
    def __init__(self, n, sleep_s, seed):
        rng = np.random.default_rng(seed)
        self.images = rng.normal(0.0, 1.0, size=(n, 3, 24, 24)).astype(np.float32)
        self.labels = rng.integers(0, 10, size=n)
        self.sleep_s = sleep_s

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        time.sleep(self.sleep_s)
        x = self.images[index]
        for _ in range(4):  # box blur, as an augmentation pipeline's filters would cost
            x = (x + np.roll(x, 1, axis=1) + np.roll(x, -1, axis=1) + np.roll(x, 1, axis=2)
                 + np.roll(x, -1, axis=2)) / 5.0
        top, left = np.random.randint(0, 9, size=2)
        x = x[:, top:top + 16, left:left + 16] + np.random.normal(0.0, 0.05, size=(3, 16, 16))
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), int(self.labels[index])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=640)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--sleep-ms", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    loader = DataLoader(SlowDataset(args.n, args.sleep_ms / 1000.0, args.seed), batch_size=32, shuffle=True,
                        num_workers=args.workers)
    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    step = 0
    for _ in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            print("step %d loss %.6f" % (step, loss.item()), flush=True)
            step += 1
    print("done steps %d" % step, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
