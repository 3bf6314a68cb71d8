#!/usr/bin/python3
"""Tiny regression loop without a DataLoader, for optimizer-step counting.

Every batch is made in the loop with torch.randn (no Dataset, no DataLoader,
no worker processes); a single Linear layer is fit with plain SGD for
exactly STEPS optimizer steps.  Prints one line per step after
optimizer.step():

    step {i} loss {loss:.6f}      i = 0 .. 49

Nothing is seeded, so the losses differ from run to run; the step count
does not.

    /usr/bin/python3 examples/train_noloader.py
"""

import sys

import torch
from torch import nn

STEPS = 50
IN_FEATURES = 8
BATCH = 16


def main():
    true_w = torch.randn(IN_FEATURES, 1)
    model = nn.Linear(IN_FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    for i in range(STEPS):
        x = torch.randn(BATCH, IN_FEATURES)
        y = x @ true_w + 0.01 * torch.randn(BATCH, 1)
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {i} loss {loss.item():.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
