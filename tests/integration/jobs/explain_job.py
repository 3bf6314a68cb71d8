"""Jobs whose training turns non-finite at one step, each by a different cause, for the
explanation of `dlreplay --until nan` (tests/integration/test_explain.py).

    explain_job.py FAULT [--steps N] [--at S] [--lr F] [--clip F] [--drop I]

  lr        at step S the learning rate becomes 1e20 (a schedule bug): the next forward
            overflows in a linear layer
  sample    sample 13 of the dataset holds NaN (a corrupt record); it is in step S's batch
  scale     the loop multiplies the batch by a scale that is inf at step S (x = x * scale)
  log       a hand-written cross-entropy takes log of a softmax whose temperature is 1e4 at
            step S: some probabilities are exactly 0, log(0) = -inf
  norm      a hand-written normalisation divides by the standard deviation of each row; at
            step S one row is constant: 0/0
  half      the hidden layer is cast to float16 (.half(): CPU autocast in torch 1.13 uses
            bfloat16, whose range is float32's); at step S the input is 1e5x: the cast overflows
  rnn       a tanh RNN with fixed recurrent weights of spectral radius 10; at step S the batch is all
            padding (zeros): the forward stays 0, the gradient through time explodes
  amp       under CPU autocast (bfloat16) a one-pass variance of activations shifted by 100 at
            step S cancels to 0: the normalisation divides by zero (float32 keeps it positive)
  optimizer at step S the loss is scaled by 1e4 and the learning rate becomes 3e38: SGD's
            update overflows the weights
Seeded; batches come from a DataLoader (sample, lr) or are made in the loop. Prints
"step K loss L" after each step.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Mlp(nn.Module):
    def __init__(self, half=False):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)
        self.half_hidden = half

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        if self.half_hidden:
            h = h.half()  # a hand-made mixed precision: the hidden layer in float16
            h = (h * 0.5).float()
        return self.fc2(h)


class RowNorm(nn.Module):
    def forward(self, x):
        mu = x.mean(dim=1, keepdim=True)
        sd = (x - mu).pow(2).mean(dim=1, keepdim=True).sqrt()
        return (x - mu) / sd  # 0/0 on a constant row


class Normed(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RowNorm()
        self.fc = nn.Linear(8, 1)

    def forward(self, x):
        return self.fc(self.norm(x))


class AmpNet(nn.Module):
    """A hand-written normalisation with the one-pass variance, E[h^2] - E[h]^2."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x, shift):
        h = self.fc1(x) + shift
        mu = h.mean(dim=1, keepdim=True)
        var = (h * h).mean(dim=1, keepdim=True) - mu ** 2  # cancels to 0 in bfloat16 at |h| ~ 100
        return self.fc2((h - mu) / var.sqrt())


class Rnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(8, 16, batch_first=True, bias=False)
        with torch.no_grad():
            w = torch.randn(16, 16)
            self.rnn.weight_hh_l0.copy_(w / torch.linalg.eigvals(w).abs().max() * 10)
        self.rnn.weight_hh_l0.requires_grad_(False)  # a fixed reservoir (an echo state network)
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        seq, _ = self.rnn(x)
        return self.out(seq[:, -1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fault", choices=("lr", "sample", "scale", "log", "norm", "half", "rnn", "amp", "optimizer"))
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--at", type=int, default=4)
    ap.add_argument("--ramp", action="store_true", help="lr: grow the learning rate 30x a step instead")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Normed() if args.fault == "norm" else Rnn() if args.fault == "rnn" else AmpNet() if args.fault == "amp" \
        else Mlp(half=args.fault == "half")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.fault in ("sample", "lr"):
        xs, ys = torch.randn(8 * args.steps, 8), torch.randn(8 * args.steps, 1)
        if args.fault == "sample":
            xs[8 * args.at + 5, 3] = float("nan")  # a corrupt record: dataset index 8 * S + 5
        batches = iter(DataLoader(TensorDataset(xs, ys), batch_size=8))
    else:
        shape = (8, 60, 8) if args.fault == "rnn" else (8, 8)
        batches = ((torch.randn(*shape), torch.randn(8, 1)) for _ in range(args.steps))
    for step, (x, y) in enumerate(batches):
        if args.fault == "scale":
            scale = float("inf") if step == args.at else 1.0
            x = x * scale
        if args.fault == "norm" and step == args.at:
            x[2] = 0.5
        if args.fault == "half" and step == args.at:
            x = x * 1e5
        if args.fault == "rnn" and step == args.at:
            x = torch.zeros_like(x)  # an all-padding batch
        if args.fault == "amp":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x, 100.0 if step == args.at else 0.0).float()
        else:
            out = model(x)
        if args.fault == "log":
            logits = torch.cat([out, -out], dim=1) * (1e4 if step == args.at else 1.0)
            probs = torch.softmax(logits, dim=1)
            target = torch.nn.functional.one_hot((y[:, 0] > 0).long(), 2).float()
            loss = -(target * torch.log(probs)).sum(dim=1).mean()  # hand-written cross-entropy
        else:
            loss = (out - y).pow(2).mean()
        if args.fault == "optimizer" and step == args.at:
            loss = loss * 1e4  # a loss scale that is never unscaled
        opt.zero_grad()
        loss.backward()
        if args.fault == "lr" and args.ramp:
            opt.param_groups[0]["lr"] = 0.01 * 30.0 ** step  # a warm-up that never stops
        elif args.fault == "lr" and step == args.at - 1:
            opt.param_groups[0]["lr"] = 1e20  # a schedule bug
        if args.fault == "optimizer" and step == args.at:
            opt.param_groups[0]["lr"] = 3e38
        opt.step()
        print("step %d loss %.6g" % (step, loss.item()), flush=True)


if __name__ == "__main__":
    main()
