"""A job whose BatchNorm output is changed in place by ReLU(inplace=True) after its hook, with
a NaN in the input at step --at (the first non-finite value: fc1's output).

    inplace_nan.py --out DIR [--steps N] [--at S]

Saves, at steps S-1 and S, each of bn's and act's outputs as its forward hook sees it (a copy,
before anything later changes it) to DIR/<module>_<step>.npy. Under dlrecord it prints
"borrowed held H eager P" at the end: the native hook's borrowed failure-ring references and
the module paths it learnt to copy (_dlrr_native.borrowed_state()).
"""
import argparse
import os

import numpy as np
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.bn = nn.BatchNorm1d(64)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(64, 1)

    def forward(self, x):
        return self.fc2(self.act(self.bn(self.fc1(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--at", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0

    def saver(name):
        def hook(module, inputs, output):
            if step in (args.at - 1, args.at):
                np.save(os.path.join(args.out, "%s_%d.npy" % (name, step)), output.detach().numpy().copy())
        return hook

    model.bn.register_forward_hook(saver("bn"))
    model.act.register_forward_hook(saver("act"))
    for step in range(args.steps):
        x, y = torch.randn(32, 16), torch.randn(32, 1)
        if step == args.at:
            x[0, 0] = float("nan")
        opt.zero_grad()
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)
    try:
        from dlrr_hook import _dlrr_native
    except ImportError:
        return
    held, eager = _dlrr_native.borrowed_state()
    print("borrowed held %d eager %s" % (held, ",".join(sorted(p.decode() for p in eager))), flush=True)


if __name__ == "__main__":
    main()
