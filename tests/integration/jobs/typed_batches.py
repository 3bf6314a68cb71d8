"""A DataLoader whose batches come in a container of the job's own type, as third-party code
makes them: `namedtuple` (the default collate keeps it), `dataclass` (a collate_fn returns a
dataclass), `userdict` (a collate_fn returns a collections.UserDict, like HuggingFace's
BatchEncoding). The loop reads its fields by name. Prints "iter K loss L" per step. Seeded.

usage: typed_batches.py namedtuple|dataclass|userdict
"""
import collections
import dataclasses
import sys

import torch
from torch.utils.data import DataLoader, Dataset

Sample = collections.namedtuple("Sample", ["x", "y"])


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor


class Points(Dataset):
    def __init__(self, kind):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(32, 4, generator=g)
        self.y = torch.randn(32, generator=g)
        self.kind = kind

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return Sample(self.x[i], self.y[i])


def as_dataclass(samples):
    return Batch(torch.stack([s.x for s in samples]), torch.stack([s.y for s in samples]))


def as_userdict(samples):
    return collections.UserDict({"x": torch.stack([s.x for s in samples]), "y": torch.stack([s.y for s in samples])})


kind = sys.argv[1]
collate = {"namedtuple": None, "dataclass": as_dataclass, "userdict": as_userdict}[kind]
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
it = 0
for epoch in range(2):
    for batch in DataLoader(Points(kind), batch_size=8, shuffle=True, collate_fn=collate):
        x, y = (batch["x"], batch["y"]) if kind == "userdict" else (batch.x, batch.y)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("iter %d loss %.6f" % (it, loss.item()))
        it += 1
