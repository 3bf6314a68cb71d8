"""A training loop that runs a helper tool that is not installed (subprocess's exec fails in
a vfork child, which exits with _exit) and goes on: the recording must go on too."""
import subprocess

import torch
from torch import nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1:
        try:
            subprocess.run(["/nonexistent/dlrr-helper-tool"])
        except FileNotFoundError as exc:
            print("no helper:", exc)
print("done")
