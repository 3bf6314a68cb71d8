"""The canonical torchvision MNIST pattern: datasets.MNIST over IDX files,
Compose([ToTensor(), Normalize()]) run in the main process (num_workers=0), a small CNN or an
RNN over rows; --spike-step sets a huge LR there so the loss goes NaN a little later.
--ema keeps an EMA copy updated and evaluated after every optimizer.step; --metric runs a
metric module (an nn.Module accumulating accuracy) on every batch's outputs."""
import argparse
import copy
import gzip
import os
import struct

import numpy as np
import torch
from torch import nn
from torchvision import datasets, transforms


def write_idx(root, n, seed):
    """MNIST's raw files (IDX, big-endian headers) as torchvision reads them."""
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    images[np.arange(n), labels * 2, :] = 255  # a learnable signal
    for prefix in ("train", "t10k"):
        with open(os.path.join(raw, prefix + "-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + images.tobytes())
        with open(os.path.join(raw, prefix + "-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + labels.tobytes())


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 2)
        self.fc = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv1(x)).flatten(1))


class RowRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(28, 16, batch_first=True)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        out, _ = self.rnn(x.squeeze(1))
        return self.fc(out[:, -1])


class Accuracy(nn.Module):
    """A torchmetrics-like metric: state in buffers, updated by calling it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("correct", torch.zeros((), dtype=torch.int64))
        self.register_buffer("total", torch.zeros((), dtype=torch.int64))

    def forward(self, logits, target):
        self.correct += (logits.argmax(1) == target).sum()
        self.total += target.numel()
        return self.correct.float() / self.total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--model", choices=("cnn", "rnn"), default="cnn")
    ap.add_argument("--write", type=int, default=0, help="write N IDX samples and exit")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--spike-step", type=int, default=-1)
    ap.add_argument("--ema", action="store_true")
    ap.add_argument("--metric", action="store_true")
    args = ap.parse_args()
    if args.write:
        write_idx(args.root, args.write, 1)
        return
    torch.manual_seed(0)
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    data = datasets.MNIST(args.root, train=True, download=False, transform=tf)
    loader = torch.utils.data.DataLoader(data, batch_size=16, shuffle=True, num_workers=0)
    model = CNN() if args.model == "cnn" else RowRNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ema = copy.deepcopy(model).requires_grad_(False) if args.ema else None
    metric = Accuracy() if args.metric else None
    step = 0
    for epoch in range(args.epochs):
        for x, y in loader:
            if step == args.spike_step:
                for g in opt.param_groups:
                    g["lr"] = float("inf")
            opt.zero_grad()
            out = model(x)
            loss = nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
            line = "step %d loss %.6f" % (step, loss.item())
            if ema is not None:
                with torch.no_grad():
                    for pe, pm in zip(ema.parameters(), model.parameters()):
                        pe.mul_(0.9).add_(pm, alpha=0.1)
                    line += " ema %.6f" % nn.functional.cross_entropy(ema(x), y).item()
            if metric is not None:
                line += " acc %.4f" % metric(out.detach(), y).item()
            print(line, flush=True)
            step += 1
    print("done steps %d" % step)  # bench/record_overhead.py reads it


if __name__ == "__main__":
    main()
