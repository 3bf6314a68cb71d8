"""torchvision datasets.MNIST over IDX files under argv[1]; a NaN injected into the input at step argv[2]."""
import sys

import torch
import torch.nn as nn
from torchvision import datasets, transforms
root = sys.argv[1]
nan_step = int(sys.argv[2]) if len(sys.argv) > 2 else -1
torch.manual_seed(0)
ds = datasets.MNIST(root, train=True, download=False, transform=transforms.ToTensor())
loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=0)
model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(loader):
    if step == nan_step:
        x = x * float("nan")
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step, float(loss))
