"""Mixed-precision training as torch 2.x's AMP recipe writes it, on CPU: the forward under
torch.autocast("cpu", dtype=torch.bfloat16), the loss scaled by torch.amp.GradScaler("cpu"),
scaler.step(optimizer) and scaler.update(). Batch 1 holds an Inf: its gradients are not finite,
so the scaler skips that update and halves its scale, and training goes on.

    amp_scaler.py [--loop]

Batches come from a DataLoader, or with --loop are made in the loop (steps are then counted by
the optimizer). Seeded; prints "step K loss L scale S" after each update.
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
x = torch.randn(64, 8)
x[12, 3] = float("inf")  # a sample of batch 1
y = torch.randn(64)
if "--loop" in sys.argv:
    batches = ((x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8))
else:
    batches = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
for step, (xb, yb) in enumerate(batches):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(xb)
    loss = F.mse_loss(out.float().squeeze(1), yb)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print("step %d loss %.6f scale %g" % (step, loss.item(), scaler.get_scale()), flush=True)
