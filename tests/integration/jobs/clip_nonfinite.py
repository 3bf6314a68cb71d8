"""A NaN that the job itself turns into an exception, as many training scripts do: gradients
clipped with clip_grad_norm_(error_if_nonfinite=True), which raises RuntimeError once the
gradient norm is non-finite. Usage: clip_nonfinite.py [--steps N] [--nan-at S]; --nan-at: one
input of step S is NaN, so that step's forward is non-finite and its clip raises (exit 1).
Seeded; prints "step K loss L gnorm G" after each optimizer step."""
import argparse

import torch
from torch import nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--nan-at", type=int, default=-1)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Dropout(0.1), nn.Linear(12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(args.steps):
        x, y = torch.randn(16, 6), torch.randn(16, 1)
        if step == args.nan_at:
            x[2, 3] = float("nan")
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
        opt.step()
        print("step %d loss %.6f gnorm %.4f" % (step, loss.item(), norm.item()), flush=True)


if __name__ == "__main__":
    main()
