"""A DataLoader without workers whose Dataset augments with random numbers (torch, NumPy and
random draws in __getitem__) and whose collate_fn returns NumPy arrays: the draws happen in the
job's process while a batch loads. Replay serves the recorded batches instead, so it must not
say the job drew random numbers differently. Prints "iter K loss L" per step. Seeded.
"""
import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Augmenting(Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        x = np.random.rand(4).astype(np.float32) + random.random() + torch.rand(1).item()
        return x, np.float32(i % 3)


def collate(items):
    return np.stack([x for x, _ in items]), np.array([y for _, y in items])


torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
it = 0
for epoch in range(2):
    for x, y in DataLoader(Augmenting(), batch_size=8, shuffle=True, num_workers=0, collate_fn=collate):
        out = torch.nn.Dropout(0.2)(model(torch.from_numpy(x)))
        loss = torch.nn.functional.mse_loss(out.squeeze(1), torch.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("iter %d loss %.6f" % (it, loss.item()))
        it += 1
