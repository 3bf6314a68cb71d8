"""A classifier trained from a shuffled DataLoader whose evaluation, as in many example scripts,
builds its own DataLoader inside a function each epoch and iterates it with gradients enabled
(no torch.no_grad()): its first batch costs one step that trains nothing. Its sampler draws
from the global torch generator (replay must draw the same, or it warns).

--epochs N          epochs (8 training batches each, then an evaluation pass)
DLRR_TEST_EXTRA_DRAW=E  draw one more torch random number inside evaluate() of epoch E, before
                    its loader is iterated: a job that really draws differently from its
                    recording when the variable differs between record and replay
"""
import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=2)
args = ap.parse_args()
extra_draw_at = int(os.environ.get("DLRR_TEST_EXTRA_DRAW", "-1"))

torch.manual_seed(0)
g = torch.Generator().manual_seed(1)
train = TensorDataset(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
held_out = TensorDataset(torch.randn(24, 6, generator=g), torch.randint(0, 3, (24,), generator=g))
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()


def evaluate(epoch):
    # a validation-split sampler: it draws its permutation from the global torch generator
    loader = DataLoader(held_out, batch_size=8, sampler=SubsetRandomSampler(range(len(held_out))))
    if epoch == extra_draw_at:
        torch.rand(1)
    model.eval()
    correct = 0
    for x, y in loader:  # gradients left enabled, as in the scripts this mimics
        correct += int((model(x).argmax(1) == y).sum())
    model.train()
    return correct


train_loader = DataLoader(train, batch_size=8, shuffle=True)
for epoch in range(args.epochs):
    for x, y in train_loader:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    print("epoch %d loss %.6f correct %d" % (epoch, loss.item(), evaluate(epoch)), flush=True)
