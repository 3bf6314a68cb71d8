"""Tensor mismatch in evaluation: training works, the validation loader yields 10 features
where the model takes 8."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 3, (32,))), batch_size=8)
val = DataLoader(TensorDataset(torch.randn(16, 10), torch.randint(0, 3, (16,))), batch_size=8)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in train:
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    for x, y in val:
        print("val loss", nn.functional.cross_entropy(model(x), y).item())
