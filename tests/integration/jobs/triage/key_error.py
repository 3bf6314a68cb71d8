"""Key not found: training runs, then the logging code looks up a metric that is not there."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
model = nn.Linear(8, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
metrics = {"loss": []}
for step, (x, y) in enumerate(DataLoader(data, batch_size=16)):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    metrics["loss"].append(loss.item())
    if step == 2:
        print("accuracy", metrics["accuracy"][-1])
