"""pytorch/examples' time_sequence_prediction in miniature: an LSTM cell fitted to sine waves
with LBFGS, whose step takes a closure (it calls the closure several times per step); no
DataLoader. Prints "step K loss L" with the loss optimizer.step(closure) returned.

    lbfgs_seq.py [--steps N]
"""
import argparse

import numpy as np
import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
args = ap.parse_args()
np.random.seed(0)
torch.manual_seed(0)
torch.set_num_threads(1)
T, L, N = 20, 40, 8
x = np.empty((N, L), np.float64)
x[:] = np.arange(L) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = torch.from_numpy(np.sin(x / T).astype(np.float64))
inp, target = data[:, :-1], data[:, 1:]


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.LSTMCell(1, 16)
        self.out = nn.Linear(16, 1)

    def forward(self, inp):
        h = torch.zeros(inp.size(0), 16, dtype=torch.double)
        c = torch.zeros(inp.size(0), 16, dtype=torch.double)
        outputs = []
        for t in range(inp.size(1)):
            h, c = self.cell(inp[:, t:t + 1], (h, c))
            outputs.append(self.out(h))
        return torch.cat(outputs, dim=1)


seq = Sequence().double()
crit = nn.MSELoss()
opt = torch.optim.LBFGS(seq.parameters(), lr=0.5, max_iter=4)
for step in range(args.steps):
    def closure():
        opt.zero_grad()
        loss = crit(seq(inp), target)
        loss.backward()
        return loss
    loss = opt.step(closure)
    print("step %d loss %.10f" % (step, loss.item()), flush=True)
