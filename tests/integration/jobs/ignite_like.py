"""A minimal imitation of pytorch-ignite's supervised training (ignite is not in Debian 12):
an Engine runs a process function over a DataLoader; the trainer's does a training update,
the evaluator's (create_supervised_evaluator) enters torch.no_grad() inside the process
function, i.e. after the batch was delivered with gradients enabled. At each epoch's end the
evaluator runs over the training loader (ignite's stock `evaluator.run(train_loader)`) and
over a validation loader.

    ignite_like.py [--epochs E] [--nan-at ITERATION]

Prints "iteration K loss L" after each training update, "eval E acc A" per evaluation.
With --nan-at the input of that training iteration (0-based, across epochs) is made NaN.
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Engine:
    def __init__(self, process):
        self.process = process
        self.handlers = []
        self.iteration = 0

    def on_epoch_completed(self, fn):
        self.handlers.append(fn)

    def run(self, loader, max_epochs=1):
        outputs = []
        for epoch in range(max_epochs):
            for batch in loader:
                outputs.append(self.process(self, batch))
                self.iteration += 1
            for fn in self.handlers:
                fn(self, epoch)
        return outputs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--nan-at", type=int, default=-1)
    args = ap.parse_args()
    torch.manual_seed(0)
    train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,))), batch_size=16, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=16)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    crit = nn.CrossEntropyLoss()

    def train_step(engine, batch):
        model.train()
        x, y = batch
        if engine.iteration == args.nan_at:
            x = x * float("nan")
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        print("iteration %d loss %.6f" % (engine.iteration, loss.item()), flush=True)
        return loss.item()

    def eval_step(engine, batch):
        model.eval()
        with torch.no_grad():
            x, y = batch
            return (model(x).argmax(1) == y).float().mean().item()

    trainer, evaluator = Engine(train_step), Engine(eval_step)

    def evaluate(engine, epoch):
        for name, loader in (("train", train), ("val", val)):
            acc = evaluator.run(loader)
            print("eval %d %s acc %.4f" % (epoch, name, sum(acc) / len(acc)), flush=True)
    trainer.on_epoch_completed(evaluate)
    trainer.run(train, max_epochs=args.epochs)


if __name__ == "__main__":
    main()
