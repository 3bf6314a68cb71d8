"""Attribute not found: the code uses a layer the model does not have."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x))


Net()(torch.ones(1, 4))
