"""A Dataset that reads labels.json and a CSV index in __init__, over features from an .npz
loaded at start (all under argv[1]); a NaN injected at step argv[2]."""
import csv
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn

root, nan_step = sys.argv[1], int(sys.argv[2])
arrays = np.load(os.path.join(root, "features.npz"))
features = arrays["x"]


class Indexed(torch.utils.data.Dataset):
    def __init__(self, root):
        with open(os.path.join(root, "labels.json")) as f:
            self.classes = json.load(f)["classes"]
        with open(os.path.join(root, "index.csv"), newline="") as f:
            self.rows = [(int(r["row"]), self.classes.index(r["label"])) for r in csv.DictReader(f)]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row, label = self.rows[i]
        return torch.from_numpy(features[row]), label


torch.manual_seed(0)
ds = Indexed(root)
loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
model = nn.Sequential(nn.Linear(features.shape[1], 16), nn.Tanh(), nn.Linear(16, len(ds.classes)))
opt = torch.optim.Adam(model.parameters(), lr=0.01)
step = 0
for epoch in range(2):
    for x, y in loader:
        if step == nan_step:
            x = x * float("nan")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, float(loss))
        step += 1
