"""A model finished by running it before its optimizer exists, as many scripts do: a LazyLinear
materialised by a dummy forward (with gradients enabled) and a submodule compiled by
torch.jit.trace (which runs the eager module three times), then an optimizer-driven loop with
dropout. Usage: warmup_forward.py [--steps N] [--spike-step S]; --spike-step: the learning
rate becomes 1e30 before step S's update, so step S+1's forward overflows. Seeded; prints
"step K loss L" after each optimizer step (K counts the loop's iterations from 0)."""
import argparse

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.embed = nn.LazyLinear(d)
        self.mlp = torch.jit.trace(Mlp(d), torch.randn(2, d))
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(d, 3)

    def forward(self, x):
        h = self.embed(x)
        return self.head(self.drop(h + self.mlp(h)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--spike-step", type=int, default=-1)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net()
    model(torch.zeros(1, 8))  # materialises embed's parameters (grad enabled, as scripts often leave it)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(args.steps):
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if step == args.spike_step:
            for group in opt.param_groups:
                group["lr"] = 1e30
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
