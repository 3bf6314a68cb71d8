"""Training-loop shapes that preflight got wrong (issue 28 item 8), one per --pattern:

  eval-every-n   validation every 50 optimizer steps: never reached with K batches per pass
  nested-nograd  a nested `for` without a DataLoader, then `with torch.no_grad():`, then the
                 job's own error (--fail) after the loops
  while-steps    `while step < max_steps:` without a DataLoader
  while-reiter   `while step < max_steps:` drawing with next() from re-created iterators
  sorted-eval    a per-class metric over a test set sorted by class: the cut evaluation sees
                 only the first classes
Each writes `done` to --out at its end (that line proves the whole job ran) and prints how
many updates it made."""
import argparse
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Ranged(Dataset):
    """n samples of 8 features, label i * classes // n (sorted by class)."""

    def __init__(self, n, classes):
        self.n, self.classes = n, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(8, generator=g), i * self.classes // self.n


def model_and_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def update(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def eval_every_n(args):
    model, opt = model_and_optimizer()
    train = DataLoader(Ranged(640, 4), batch_size=8, shuffle=True)
    val = DataLoader(Ranged(64, 4), batch_size=8)
    step = 0
    for epoch in range(2):
        for x, y in train:
            update(model, opt, x, y)
            step += 1
            if step % 50 == 0:
                with torch.no_grad():
                    for vx, vy in val:
                        model(vx)
                if args.fail:
                    raise RuntimeError("validation at step %d failed" % step)
    return step


def nested_nograd(args):
    model, opt = model_and_optimizer()
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    steps = 0
    for epoch in range(3):
        for it in range(200):
            update(model, opt, x, y)
            steps += 1
        with torch.no_grad():
            model(x)
    if args.fail:
        raise ValueError("the job's own error after %d updates" % steps)
    return steps


def while_steps(args):
    model, opt = model_and_optimizer()
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    step, max_steps = 0, 2000
    while step < max_steps:
        update(model, opt, x, y)
        step += 1
    print("trained %d steps" % step)
    return step


def while_reiter(args):
    model, opt = model_and_optimizer()
    loader = DataLoader(Ranged(64, 4), batch_size=8, shuffle=True)
    it = iter(loader)
    step, max_steps = 0, 400
    while step < max_steps:
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        update(model, opt, x, y)
        step += 1
    print("trained %d steps" % step)
    return step


def sorted_eval(args):
    model, opt = model_and_optimizer()
    train = DataLoader(Ranged(64, 4), batch_size=8, shuffle=True)
    test = DataLoader(Ranged(128, 4), batch_size=8)  # sorted by class: 16 batches, 4 per class
    steps = 0
    for x, y in train:
        update(model, opt, x, y)
        steps += 1
    seen = torch.zeros(4)
    correct = torch.zeros(4)
    with torch.no_grad():
        for x, y in test:
            pred = model(x).argmax(1)
            for c in range(4):
                seen[c] += (y == c).sum()
                correct[c] += ((y == c) & (pred == c)).sum()
    per_class = {}
    for c in range(4):
        if seen[c] == 0:
            raise ZeroDivisionError("class %d has no test sample" % c)
        per_class[c] = float(correct[c] / seen[c])
    print("per-class accuracy", per_class)
    return steps


PATTERNS = {"eval-every-n": eval_every_n, "nested-nograd": nested_nograd, "while-steps": while_steps,
            "while-reiter": while_reiter, "sorted-eval": sorted_eval}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pattern", choices=sorted(PATTERNS), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fail", action="store_true", help="the job's own error where the pattern has one")
    args = ap.parse_args()
    updates = PATTERNS[args.pattern](args)
    print("updates %d" % updates)
    with open(os.path.join(args.out, "done"), "w") as f:
        f.write("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
