"""Jobs that go non-finite late, for jump replay (tests/integration/test_jump.py, bench/jump_replay.py).

  loader   an MLP (dropout) on a shuffled DataLoader, SGD with momentum, gradient accumulation
           over 2 micro-batches, a LambdaLR whose LR grows until training blows up
  lm       no DataLoader: get_batch() draws torch.randint windows from a token array, the LR is
           computed from the loop's own counter and written into param_groups (nanoGPT style);
           with --by-hand no optimizer: p.add_(p.grad, alpha=-lr) after backward()
  pyside   as loader, plus a Python-side running mean of loss.item() that feeds the loss: state
           no snapshot holds
  vision   torchvision's resnet18 on 32x32 inputs with a StepLR (slow on CPU: few steps)

Usage: jump_job.py MODE [--steps N] [--width W] [--growth G] [--raise-at N]. Prints the step
where the loss went non-finite and stops there (exit 0); with --raise-at (loader, pyside,
vision) raises a KeyError in that step's loss code instead (exit 1).
"""
import argparse
import math
import random

import numpy as np
import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["loader", "lm", "pyside", "vision"])
ap.add_argument("--steps", type=int, default=100000)
ap.add_argument("--width", type=int, default=64)
ap.add_argument("--growth", type=float, default=1.03)
ap.add_argument("--raise-at", type=int, default=-1, help="loader mode: a KeyError in the loss code at this step")
ap.add_argument("--after-backward", action="store_true", help="raise it after the step's backward() instead")
ap.add_argument("--by-hand", action="store_true",
                help="lm mode: no optimizer, parameters updated by hand after backward() (steps counted by backward())")
args = ap.parse_args()

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
torch.set_num_threads(1)


def report(step, loss):
    if not math.isfinite(loss):
        print("non-finite loss at step %d" % step, flush=True)
        return True
    return False


if args.mode == "lm":
    vocab, ctx = 50, 8
    tokens = torch.from_numpy(np.random.randint(0, vocab, size=4096).astype(np.int64))
    model = nn.Sequential(nn.Embedding(vocab, args.width), nn.Flatten(), nn.Linear(ctx * args.width, vocab))
    opt = None if args.by_hand else torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()

    def get_batch():
        ix = torch.randint(len(tokens) - ctx - 1, (16,))
        x = torch.stack([tokens[i:i + ctx] for i in ix])
        y = torch.stack([tokens[i + ctx] for i in ix])
        return x, y

    it = 0
    while it < args.steps:
        lr = 0.01 * args.growth ** it  # from the loop's own counter
        x, y = get_batch()
        loss = crit(model(x), y)
        if opt is None:  # word_language_model style: zero_grad, backward, p.data.add_(p.grad)
            model.zero_grad()
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
        else:
            for g in opt.param_groups:
                g["lr"] = lr
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if report(it, loss.item()):
            break
        it += 1
else:
    if args.mode == "vision":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        data = torch.randn(64, 3, 32, 32)
        targets = torch.randint(0, 10, (64,))
        batch = 8
    else:
        model = nn.Sequential(nn.Linear(32, args.width), nn.ReLU(), nn.Dropout(0.1), nn.Linear(args.width, args.width),
                              nn.ReLU(), nn.Linear(args.width, 10))
        data = torch.randn(512, 32)
        targets = torch.randint(0, 10, (512,))
        batch = 16
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, targets), batch_size=batch, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.mode == "vision":
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=4.0)
    else:
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: args.growth ** k)
    crit = nn.CrossEntropyLoss()
    accumulate = 2
    running = 0.0
    step = 0
    done = False
    while not done:
        for i, (x, y) in enumerate(loader):
            loss = crit(model(x), y) / accumulate
            if step == args.raise_at and not args.after_backward:
                raise KeyError("metric 'top5' at step %d" % step)  # before backward(): the state is the step's start
            if args.mode == "pyside":
                loss = loss * (1.0 + 0.01 * running)  # Python-side state that feeds the loss
            loss.backward()
            if step == args.raise_at and args.after_backward:
                raise KeyError("metric 'top5' at step %d" % step)
            if i % accumulate == accumulate - 1:
                opt.step()
                opt.zero_grad()
                sched.step()
            value = loss.item()
            running = 0.9 * running + 0.1 * value
            if report(step, value) or step + 1 >= args.steps:
                done = True
                break
            step += 1
