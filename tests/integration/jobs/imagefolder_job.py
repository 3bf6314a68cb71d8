"""A small vision job for bounded traces (test_bounded.py): torchvision ImageFolder over PNGs,
random augmentation (RandomResizedCrop, RandomHorizontalFlip) in 2 DataLoader workers, a
shuffled sampler, a tiny CNN. Usage: imagefolder_job.py DATA_DIR STEPS [wait | wide=N]; `wait`:
after the steps, say "ready" and wait to be killed (SIGTERM); `wide=N`: a hidden layer of N
units, so that a snapshot (parameters and gradients) weighs about 56N bytes (test_budget.py)."""
import sys
import time

import torch
import torchvision
from torchvision import transforms

torch.manual_seed(0)
data, steps = sys.argv[1], int(sys.argv[2])
tf = transforms.Compose([transforms.RandomResizedCrop(16, scale=(0.5, 1.0)), transforms.RandomHorizontalFlip(),
                         transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(data, transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)
wide = [int(a[5:]) for a in sys.argv[3:] if a.startswith("wide=")]
head = [torch.nn.Linear(4, wide[0]), torch.nn.ReLU(), torch.nn.Linear(wide[0], 2)] if wide else [torch.nn.Linear(4, 2)]
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), *head)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
while step < steps:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= steps:
            break
print("loss %.6f" % loss.item(), flush=True)
if sys.argv[3:] == ["wait"]:
    print("ready", flush=True)
    time.sleep(120)
