"""A nanoGPT-style training loop: no DataLoader, get_batch() slices random windows of a token
file through np.memmap (torch.randint offsets), a model with dropout, and the next batch drawn
between the forward pass and backward() as nanoGPT prefetches it. Steps are counted by
optimizer.step(). Runs --iters iterations (default: practically forever, for a test to kill it).

    memmap_lm.py DATA_DIR [--iters N] [--lr LR]

Prints "iter K loss L" after each step (flushed), "done" at the end. Seeded.
"""
import argparse
import os

import numpy as np
import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("data")
ap.add_argument("--iters", type=int, default=10 ** 9)
ap.add_argument("--lr", type=float, default=1e-2)
args = ap.parse_args()

torch.manual_seed(1337)
torch.set_num_threads(1)
vocab, block, batch = 64, 16, 8
path = os.path.join(args.data, "train.bin")
if not os.path.exists(path):
    os.makedirs(args.data, exist_ok=True)
    np.random.RandomState(0).randint(0, vocab, size=1 << 16).astype(np.uint16).tofile(path)


def get_batch():
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block, (batch,))
    x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
    return x, y


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(32, vocab)

    def forward(self, x, y):
        logits = self.head(self.drop(self.emb(x)))
        return nn.functional.cross_entropy(logits.view(-1, vocab), y.view(-1))


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
x, y = get_batch()
for it in range(args.iters):
    loss = model(x, y)
    x, y = get_batch()  # prefetch the next batch while the GPU would be busy (nanoGPT)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print("iter %d loss %.6f" % (it, loss.item()), flush=True)
print("done", flush=True)
