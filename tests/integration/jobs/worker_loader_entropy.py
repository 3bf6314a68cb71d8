"""A DataLoader with workers, and after each epoch an atomic checkpoint save as ignite's
DiskSaver makes it (tempfile.NamedTemporaryFile, then os.replace) named with uuid4. The loader's
machinery draws entropy in the job's process (its queues' semaphore names seed a Random: 2496
bytes; 20-byte connection challenges as tensors come from the workers) that a replay, which
serves the batches, never draws; the job's own draws (the temporary name, the uuid) must still
be served in order, without a warning. Prints "iter K loss L" per step. Seeded.
"""
import os
import sys
import tempfile
import uuid

import torch
from torch.utils.data import DataLoader, TensorDataset

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8, num_workers=2)
it = 0
for epoch in range(2):
    for (x,) in loader:
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("iter %d loss %.6f" % (it, loss.item()))
        it += 1
    with tempfile.NamedTemporaryFile(delete=False, dir=out) as f:
        torch.save(model.state_dict(), f)
    os.replace(f.name, os.path.join(out, "model-%s.pt" % uuid.uuid4().hex[:8]))
