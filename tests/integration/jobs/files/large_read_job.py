"""Large files read with read() and fread(), no DataLoader: np.load of a .npy (NumPy's
fromfile: fread on a dup of the file's descriptor) and 64 KiB read at an offset of a bigger
file (argv[1] holds both); a NaN injected into the loss at step argv[2]."""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

root, nan_step = sys.argv[1], int(sys.argv[2])
features = np.load(os.path.join(root, "features.npy"))
with open(os.path.join(root, "big.bin"), "rb") as f:
    f.seek(3 << 20)
    bias = np.frombuffer(f.read(64 << 10), dtype=np.float32)[: features.shape[1]].copy()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(features.shape[1], 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x_all = torch.from_numpy(features + bias)
for step in range(8):
    idx = torch.randint(len(x_all), (16,))
    loss = model(x_all[idx]).pow(2).mean()
    if step == nan_step:
        loss = loss * float("nan")
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, float(loss))
