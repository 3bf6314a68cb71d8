"""Jobs whose recorded failure can be made not to happen in the replay, for the verdicts of
`dlreplay --check` / `--until nan|crash` (tests/integration/test_verdicts.py).

    verdict_job.py module|loss|param|save [--steps N] [--at S] [--progress]

  module  at step S a module in the middle of the model multiplies its input by inf
  loss    at step S the loss gets a log(0) term computed outside any module
  param   at step S the loss is scaled by 1e4 and SGD's learning rate becomes 1e38: the
          update overflows the parameters
  save    two epochs over a DataLoader; after the first the job saves its losses into
          results/losses.txt (FileNotFoundError while results/ is missing: an evaluation crash)
  ckpt    no DataLoader (batches made in the loop); after step S the job saves a checkpoint
          into ckpt/ (FileNotFoundError while ckpt/ is missing)

Where the file `fixed.flag` exists in the working directory, the failure of module, loss and
param does not happen (the replay is made to differ on purpose); for save, `mkdir results`
(`mkdir ckpt` for ckpt) fixes the crash. Seeded; prints "step K loss L" after each step.
"""
import argparse
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Blow(nn.Module):
    def __init__(self):
        super().__init__()
        self.armed = False

    def forward(self, x):
        return x * float("inf") if self.armed else x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("module", "loss", "param", "save", "ckpt"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--at", type=int, default=3)
    ap.add_argument("--progress", action="store_true", help="a tqdm-style bar on stderr: '\\r' and no newline")
    args = ap.parse_args()
    torch.manual_seed(0)
    blow = Blow()
    model = nn.Sequential(nn.Linear(4, 8), blow, nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(16 * args.steps, 4), torch.randn(16 * args.steps, 1))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    epochs = 2 if args.mode == "save" else 1
    if args.mode == "ckpt":  # a loop without a DataLoader, steps counted by optimizer.step()
        loader = [(torch.randn(16, 4), torch.randn(16, 1)) for _ in range(args.steps)]
    step = 0
    for epoch in range(epochs):
        losses = []
        for x, y in loader:
            fail = step == args.at and args.mode in ("module", "loss", "param") and not os.path.exists("fixed.flag")
            blow.armed = fail and args.mode == "module"
            loss = (model(x) - y).pow(2).mean()
            if fail and args.mode == "loss":
                loss = loss + torch.log(torch.zeros(()))
            if fail and args.mode == "param":
                loss = loss * 1e4
                for group in opt.param_groups:
                    group["lr"] = 1e38
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            print("step %d loss %.6f" % (step, loss.item()), flush=True)
            if args.progress:
                sys.stderr.write("\rtraining %d%%|%s" % (10 * step, "#" * step))
                sys.stderr.flush()
            step += 1
            if fail:
                return
            if args.mode == "ckpt" and step - 1 == args.at:
                torch.save(model.state_dict(), os.path.join("ckpt", "model.pt"))
        if args.mode == "save":
            with open(os.path.join("results", "losses.txt"), "w") as f:
                f.write("\n".join("%.6f" % v for v in losses))


if __name__ == "__main__":
    main()
