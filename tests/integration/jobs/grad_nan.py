"""A job whose forward stays finite while its backward turns NaN at one step.

The auxiliary loss is a hand-written Euclidean distance, sqrt(sum(v**2)), of a difference
that is exactly zero at --zero-at (the two embeddings coincide): the distance is 0
(finite), but d sqrt/dx at 0 is inf, and the pow's backward multiplies it by 0: NaN.
"""
import argparse

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.Linear(4, 3)

    def forward(self, x, same):
        ea = self.a(x)
        eb = ea if same else self.b(x)
        distance = (ea - eb).pow(2).sum(dim=1).sqrt().mean()  # the classic: NaN gradient at 0
        return ea.sum(dim=1).mean(), distance


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--zero-at", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x = torch.randn(5, 4)
        out, distance = model(x, step == args.zero_at)
        loss = out + 0.1 * distance
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d loss %.6f grad_finite %s" % (step, loss.item(), bool(torch.isfinite(model.a.weight.grad).all())),
              flush=True)


if __name__ == "__main__":
    main()
