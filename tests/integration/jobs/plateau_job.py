"""A training loop whose learning rate torch.optim.lr_scheduler.ReduceLROnPlateau halves when the
validation loss stops improving (patience 1: at the second epoch in a row that does not improve it), the way the
scheduler's docs use it. An epoch is 2 batches of a DataLoader, then a validation pass under
no_grad and scheduler.step(val_loss). Seeded; prints "step K loss L lr R" after each update.
The scheduler's state (best loss so far, bad epochs, cooldown) decides later learning rates: a
jump replay must restore it (it is no LRScheduler subclass on torch 1.x, and on torch 2.x its
__init__ does not run LRScheduler's).

    plateau_job.py [--own]

With --own the same rule is the job's own code (patience 1, no threshold): state no snapshot
can hold, so a jump replay diverges where it first changes a learning rate.
"""
import math
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(3)
train = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=4, shuffle=True)
val_x, val_y = torch.randn(32, 8), torch.randn(32, 1)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


class OwnPlateau:
    def __init__(self, optimizer):
        self.optimizer, self.best, self.bad = optimizer, math.inf, 0

    def step(self, value):
        if value < self.best:
            self.best, self.bad = value, 0
            return
        self.bad += 1
        if self.bad > 1:
            for group in self.optimizer.param_groups:
                group["lr"] *= 0.5
            self.bad = 0


if "--own" in sys.argv:
    plateau = OwnPlateau(opt)
else:
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
step = 0
for x, y in train:
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step %d loss %.6f lr %g" % (step, loss.item(), opt.param_groups[0]["lr"]), flush=True)
    step += 1
    if step % 2 == 0:
        with torch.no_grad():
            plateau.step(F.mse_loss(model(val_x), val_y).item())
