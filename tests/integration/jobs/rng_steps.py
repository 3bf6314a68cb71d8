"""Steps without a DataLoader, counted by backward() (hand-written updates) and then by
optimizer.step(), whose loop draws from torch, numpy and random inside each step and right after
it ends.  An optimizer-counted step's states are those taken where the previous step ended
(steps.py): the draws after that point (the print's) must not reach the states written when the
next step begins.  Seeded, so two recordings write the same states.  One line per step:

    step {i} loss {loss:.6f} draws {random} {numpy} {torch}

    python3 rng_steps.py [STEPS, default 12]
"""
import random
import sys

import numpy as np
import torch
from torch import nn


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.25), nn.Linear(8, 1))

    def loss_of(i):
        x = torch.randn(4, 8) * float(1 + np.random.rand())
        target = random.gauss(0, 1) + np.random.standard_normal()  # both gaussian caches set
        return ((model(x) - target) ** 2).mean()

    def after(i, loss):
        print("step %d loss %.6f draws %.6f %.6f %.6f" % (i, loss.item(), random.random(), np.random.rand(),
                                                         torch.rand(1).item()), flush=True)

    for i in range(steps // 2):  # no optimizer yet: backward() counts the steps
        loss = loss_of(i)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.01 * p.grad
                p.grad = None
        after(i, loss)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps // 2, steps):
        optimizer.zero_grad()
        loss = loss_of(i)
        loss.backward()
        optimizer.step()
        after(i, loss)
    return 0


if __name__ == "__main__":
    sys.exit(main())
