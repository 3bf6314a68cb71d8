"""The two training shapes of bench/step_shapes.py (issue 33), as a job dlrecord can run.

    /usr/bin/python3 bench/shape_job.py --shape lm|cnn --steps N --data DIR

lm   a 2-block transformer LM (LayerNorm, MultiheadAttention, GELU MLP) over np.memmap
     windows of a token file, no DataLoader: each step slices 16 windows of 33 tokens
     (batch 16x32) at random offsets, as nanoGPT-style loops do.
cnn  a small CNN on a synthetic map-style Dataset (tensors made at start) read through a
     DataLoader (batch 32, shuffled, loading in the main thread).
Seeds are fixed; the job prints its last loss.  The data directory is made by --prepare.
"""
import argparse
import os

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

VOCAB, CONTEXT, BATCH_LM, WIDTH = 256, 32, 16, 64
TOKENS = 1 << 18


def prepare(data):
    os.makedirs(data, exist_ok=True)
    rng = np.random.default_rng(0)
    tokens = np.memmap(os.path.join(data, "tokens.bin"), dtype=np.uint16, mode="w+", shape=(TOKENS,))
    tokens[:] = rng.integers(0, VOCAB, TOKENS, dtype=np.uint16)
    tokens.flush()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", torch.triu(torch.full((CONTEXT, CONTEXT), float("-inf")), 1))

    def forward(self, idx):
        x = self.embed(idx) + self.pos
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))


def run_lm(data, steps):
    tokens = np.memmap(os.path.join(data, "tokens.bin"), dtype=np.uint16, mode="r")
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss = None
    for _ in range(steps):
        starts = np.random.randint(0, len(tokens) - CONTEXT - 1, BATCH_LM)
        x = torch.from_numpy(np.stack([tokens[i:i + CONTEXT].astype(np.int64) for i in starts]))
        y = torch.from_numpy(np.stack([tokens[i + 1:i + 1 + CONTEXT].astype(np.int64) for i in starts]))
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss


class SyntheticImages(Dataset):
    def __init__(self, n=2048):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 1, 28, 28, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def run_cnn(steps):
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(SyntheticImages(), batch_size=32, shuffle=True, num_workers=0)
    done, loss = 0, None
    while done < steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            done += 1
            if done == steps:
                break
    return loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("lm", "cnn"))
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--data", required=True)
    ap.add_argument("--prepare", action="store_true", help="write the token file into --data and exit")
    args = ap.parse_args()
    if args.prepare:
        return prepare(args.data)
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)  # one core of the job's: the other is the recorder's and the machine's
    loss = run_lm(args.data, args.steps) if args.shape == "lm" else run_cnn(args.steps)
    print("last loss %.6f" % loss.item())


if __name__ == "__main__":
    main()
