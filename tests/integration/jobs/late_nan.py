"""A job whose first non-finite value is not a module output, for `dlreplay --until nan`.

    late_nan.py loss|param [--steps N] [--at S] [--loader]

  loss   at step S the loss gets a log(0) term computed outside any module: every module
         output stays finite, the loss is -inf (its gradients stay finite: the term is a
         constant)
  param  at step S the loss is scaled by 1e4 and the learning rate becomes 1e38: forward,
         loss and gradients stay finite, and SGD's update overflows the parameters to inf
Seeded; prints "step K loss L" after each optimizer step. Batches are made in the loop (steps
counted by optimizer.step()), or with --loader come from a DataLoader (steps counted by batch).
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("loss", "param"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--at", type=int, default=3)
    ap.add_argument("--loader", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.loader:
        data = TensorDataset(torch.randn(16 * args.steps, 4), torch.randn(16 * args.steps, 1))
        batches = iter(DataLoader(data, batch_size=16, shuffle=True))
    else:
        batches = ((torch.randn(16, 4), torch.randn(16, 1)) for _ in range(args.steps))
    for step, (x, y) in enumerate(batches):
        loss = (model(x) - y).pow(2).mean()
        if args.mode == "loss" and step == args.at:
            loss = loss + torch.log(torch.zeros(()))  # -inf, outside any module
        if args.mode == "param" and step == args.at:
            loss = loss * 1e4
            for group in opt.param_groups:
                group["lr"] = 1e38
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
