"""A job whose failing step never ends: the first non-finite value appears in `boom` at step S,
the modules after it run, then the step hangs (as a job does that a `timeout` or a scheduler
ends). For the failure ring's regression test: the failing step's tensors, those computed
after the failure included, must be in the trace of a job killed there.

    nan_then_hang.py [--at S] [--width W]

Seeded; prints "step K loss L" after each step and "failing step computed" once the failing
step's forward is done, then sleeps until killed.
"""
import argparse
import time

import torch
from torch import nn


class Boom(nn.Module):
    def __init__(self):
        super().__init__()
        self.armed = False

    def forward(self, x):
        return x * float("nan") if self.armed else x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--at", type=int, default=3)
    ap.add_argument("--width", type=int, default=256)
    args = ap.parse_args()
    torch.manual_seed(0)
    w = args.width
    boom = Boom()
    model = nn.Sequential(nn.Linear(w, w), boom, nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:
        x, y = torch.randn(64, w), torch.randn(64, 1)
        boom.armed = step == args.at
        loss = (model(x) - y).pow(2).mean()
        if boom.armed:
            print("failing step computed", flush=True)
            time.sleep(600)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)
        step += 1


if __name__ == "__main__":
    main()
