"""A training loop whose random draws come from torch.Generator objects it made itself: a
dropout mask drawn from the model's own generator (an attribute of a submodule), input noise
from a module-level generator, a stochastic-depth draw from the root module's generator, and a
generator local to train() that shuffles the data with torch.randperm. The draws inside the
model are skipped by jump replay's fast-forward (stand-in modules), so only restoring each
generator at the jump step keeps the replay bit-exact. Steps are counted by optimizer.step().

    own_generators.py [--iters N]

Prints "iter K loss L" after each step, "done" at the end. Seeded.
"""
import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--iters", type=int, default=40)
args = ap.parse_args()

torch.set_num_threads(1)
NOISE = torch.Generator().manual_seed(7)  # module-level


class OwnDropout(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p
        self.g = torch.Generator().manual_seed(11)  # the submodule's own

    def forward(self, x):
        keep = torch.rand(x.shape, generator=self.g) >= self.p
        return x * keep / (1 - self.p)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.drop = OwnDropout(0.25)
        self.b = nn.Linear(16, 1)
        self.depth_gen = torch.Generator().manual_seed(5)

    def forward(self, x):
        x = x + 0.01 * torch.randn(x.shape, generator=NOISE)
        h = self.drop(torch.relu(self.a(x)))
        if torch.rand((), generator=self.depth_gen) < 0.5:  # stochastic depth on the last layer
            h = h * 0.5
        return self.b(h)


def train():
    shuffle = torch.Generator().manual_seed(3)  # local to this frame
    data = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    target = data.sum(1, keepdim=True)
    model = Net()
    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for it in range(args.iters):
        idx = torch.randperm(64, generator=shuffle)[:16]
        loss = nn.functional.mse_loss(model(data[idx]), target[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("iter %d loss %.6f" % (it, loss.item()), flush=True)
    print("done", flush=True)


train()
