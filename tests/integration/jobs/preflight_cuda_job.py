"""A job written for the cluster: CUDA device hard-coded, torch.cuda.set_device, .cuda(),
.to(device), pin_memory, torch.cuda.synchronize, a factory with device="cuda"."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
device = torch.device("cuda")  # written for the cluster
torch.cuda.set_device(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
opt = torch.optim.Adam(model.parameters())
loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,))), batch_size=8, pin_memory=True)
for epoch in range(2):
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    torch.cuda.synchronize()
    print("epoch", epoch, "loss", round(loss.item(), 4), torch.zeros(1, device="cuda").device)
