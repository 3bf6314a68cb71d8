"""Saves checkpoints as training jobs do (under argv[1]): os.makedirs, torch.save to a temporary
name then os.replace, np.save of a metric array, an appended log, and rotation (the oldest
checkpoint removed). Trains on a tensor dataset through a DataLoader."""
import os
import sys

import numpy as np
import torch
import torch.nn as nn

out = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 8
torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(64, 6), torch.randint(0, 3, (64,)))
loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
model = nn.Linear(6, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
os.makedirs(os.path.join(out, "ckpt"), exist_ok=True)
losses = []
for step, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(float(loss))
    with open(os.path.join(out, "train.log"), "a") as log:
        log.write("step %d loss %.6f\n" % (step, float(loss)))
    if step % 2 == 1:
        tmp = os.path.join(out, "ckpt", "tmp.pt")
        torch.save({"step": step, "model": model.state_dict()}, tmp)
        os.replace(tmp, os.path.join(out, "ckpt", "step%d.pt" % step))
        old = os.path.join(out, "ckpt", "step%d.pt" % (step - 4))
        if os.path.exists(old):
            os.remove(old)
np.save(os.path.join(out, "losses.npy"), np.array(losses))
print("done", len(losses))
