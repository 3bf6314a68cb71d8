"""Corrupt data in a DataLoader worker: one per-sample JSON record is truncated; training
fails when the worker loads the batch that holds it (sample 5: the batch of step 2)."""
import json
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __init__(self, root):
        self.root = root

    def __len__(self):
        return 8

    def __getitem__(self, i):
        with open(os.path.join(self.root, "%d.json" % i)) as f:
            rec = json.load(f)
        return torch.tensor(rec["x"], dtype=torch.float32), rec["y"]


if __name__ == "__main__":
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(Records(sys.argv[1]), batch_size=2, num_workers=1):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
