#!/usr/bin/python3
"""Small, realistic PyTorch training job: the dlrr example workload.

Trains a tiny CNN on the dataset written by prepare_data.py:

    /usr/bin/python3 examples/prepare_data.py --out /tmp/exdata
    /usr/bin/python3 examples/train.py --data /tmp/exdata

Output on stdout, one line per optimizer step and one per epoch:

    step {global_step} loss {loss:.6f}     global_step counts from 0
    epoch {e} eval_acc {acc:.4f}           after each epoch
    done steps {n}                         at the end, then exit 0

Like most real jobs it seeds nothing, so two runs differ: the shuffle order,
the weight init and the dropout masks come from torch's default generator,
which torch seeds from OS entropy at startup; the augmentation noise
(np.random) and flips (random) are drawn inside Dataset.__getitem__, i.e.
in the DataLoader workers, which the DataLoader seeds from that same torch
generator (with --workers 0 they run in the main process and use numpy's and
Python's own entropy-seeded state instead).  --seed S seeds all of it, so a
run with --seed is repeatable and its NaN step is fixed.

The dataset holds one corrupted sample (+inf pixels, see prepare_data.py).
Each epoch is a random permutation, so the sample is drawn exactly once in
epoch 0, at a step uniform over 0..63 with the defaults (N=2048, batch 32):
the first NaN loss is always in epoch 0, in its middle half with
probability 1/2 and in steps 0-5 with probability 6/64 (about 9%).  The job
does not stop on NaN: the NaN gradients poison Adam's state and the weights,
every later loss is NaN, and it still finishes and exits 0, as an unguarded
real job would.  A malformed sample (prepare_data.py --malformed-index)
makes batch collation raise; the exception is not caught, so the job dies
with a traceback and exit status 1.

Note for record/replay: Dataset.__init__ does not touch the data directory;
sample files are np.load-ed in __getitem__ and labels.npy is memory-mapped
there (mmap_mode='r') on first use in each process.
"""

import argparse
import os
import random
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

EVAL_SAMPLES = 128
NUM_CLASSES = 10


class NpyImageDataset(Dataset):
    """Lazily loads DIR/samples/%05d.npy; labels from DIR/labels.npy."""

    def __init__(self, root, n, augment):
        # Deliberately no file access here (see module docstring): only the
        # path is kept and the length is taken from the command line.
        self.root = root
        self.n = n
        self.augment = augment
        self._labels = None  # memory-mapped lazily, once per process

    def __len__(self):
        return self.n

    def _label(self, index):
        if self._labels is None:
            self._labels = np.load(os.path.join(self.root, "labels.npy"),
                                   mmap_mode="r")
        return int(self._labels[index])

    def __getitem__(self, index):
        path = os.path.join(self.root, "samples", f"{index:05d}.npy")
        x = np.load(path)
        if self.augment:
            # Per-sample augmentation drawn from the global RNGs, as in
            # countless real input pipelines.
            noise = np.random.normal(0.0, 0.1, size=x.shape)
            x = x + noise.astype(np.float32)
            if random.random() < 0.5:
                x = x[..., ::-1]  # horizontal flip
        # from_numpy needs positive strides (the flip makes them negative).
        return torch.from_numpy(np.ascontiguousarray(x)), self._label(index)


class SmallCNN(nn.Module):
    """conv-relu-pool-conv-relu-fc-dropout-fc, for 3x16x16 inputs."""

    def __init__(self, num_classes=NUM_CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(16 * 8 * 8, 64)
        self.dropout = nn.Dropout(0.2)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        x = torch.flatten(x, 1)
        x = self.dropout(torch.relu(self.fc1(x)))
        return self.fc2(x)


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    model.train()
    return correct / max(total, 1)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Train a small CNN on prepare_data.py's dataset.")
    parser.add_argument("--data", required=True,
                        help="directory written by prepare_data.py")
    parser.add_argument("--n", type=int, default=2048,
                        help="number of samples in --data (default 2048)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2,
                        help="DataLoader worker processes (default 2)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps-print", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="print a 'step N loss L' line per step "
                             "(default on; --no-steps-print to silence)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed torch, numpy and random (default: none)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    if args.seed is not None:
        # Only for tests that need a fixed NaN step; see module docstring.
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)

    train_set = NpyImageDataset(args.data, args.n, augment=True)
    eval_set = Subset(NpyImageDataset(args.data, args.n, augment=False),
                      range(min(EVAL_SAMPLES, args.n)))
    train_loader = DataLoader(train_set, batch_size=args.batch_size,
                              shuffle=True, num_workers=args.workers)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size,
                             shuffle=False, num_workers=args.workers)

    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    global_step = 0
    for epoch in range(args.epochs):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            # No isfinite() guard on purpose: a NaN loss propagates into the
            # weights and the job carries on, as an unguarded real job would.
            optimizer.step()
            if args.steps_print:
                print(f"step {global_step} loss {loss.item():.6f}",
                      flush=True)
            global_step += 1
        acc = evaluate(model, eval_loader)
        print(f"epoch {epoch} eval_acc {acc:.4f}", flush=True)

    print(f"done steps {global_step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
