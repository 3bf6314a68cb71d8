"""The common language-model loop: no DataLoader; get_batch() draws torch.randint windows from
an np.memmap of uint16 token ids (argv[1]), made afresh at each call as nanoGPT does. A NaN
is injected into the logits at iteration argv[2]."""
import sys

import numpy as np
import torch
import torch.nn as nn

path, nan_step = sys.argv[1], int(sys.argv[2])
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 12
block, batch, vocab = 32, 4, 512
torch.manual_seed(1)


def get_batch():
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block, (batch,))
    x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
    return x, y


model = nn.Sequential(nn.Embedding(vocab, 32), nn.Linear(32, vocab))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for it in range(iters):
    x, y = get_batch()
    logits = model(x)
    if it == nan_step:
        logits = logits * float("nan")
    loss = nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("iter", it, float(loss))
