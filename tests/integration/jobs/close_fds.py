"""A job that closes every file descriptor it did not open itself (as daemonising code and
some launchers do), then opens files of its own and trains, writing a line per step to each.

    close_fds.py OUTDIR closerange|close_loop|closefrom
"""
import ctypes
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

out, how = sys.argv[1], sys.argv[2]
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.arange(256, dtype=torch.float32).reshape(64, 4)), batch_size=8)
if how == "closerange":
    os.closerange(3, 1 << 16)
elif how == "close_loop":
    for fd in range(3, 1024):
        try:
            os.close(fd)
        except OSError:
            pass
else:
    ctypes.CDLL(None).closefrom(3)
files = [open(os.path.join(out, "out-%d.txt" % k), "w") for k in range(6)]
for i, (x,) in enumerate(loader):
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    for f in files:
        f.write("step %d\n" % i)
        f.flush()
for f in files:
    f.close()
print("done")
