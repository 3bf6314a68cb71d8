"""torchvision ImageFolder over a PNG tree (argv[1]); a NaN injected into the input at step argv[2]."""
import sys

import torch
import torch.nn as nn
from torchvision import datasets, transforms

root, nan_step = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
ds = datasets.ImageFolder(root, transform=transforms.Compose([transforms.ToTensor()]))
loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=0)
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, len(ds.classes)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
step = 0
for epoch in range(3):
    for x, y in loader:
        if step == nan_step:
            x = x * float("nan")
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("step", step, float(loss))
        step += 1
