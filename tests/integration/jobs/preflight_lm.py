"""A character language model trained the way nanoGPT's train.py does it: no DataLoader,
get_batch() draws random windows from an np.memmap of token ids, the LR comes from the loop's
own counter and is written into the param groups, an estimate_loss() every eval_interval
iterations, a `while True` loop left with `break` after max_iters.  After training it reads
the vocabulary's meta file to decode a sample: with --meta pointing at a missing file that is
the late failure (the full job would first train for max_iters iterations)."""
import argparse
import json
import math
import os

import numpy as np
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--meta", required=True)
parser.add_argument("--max-iters", type=int, default=5000)
args = parser.parse_args()

torch.manual_seed(1337)
block, batch, vocab = 16, 8, 64
tokens = np.memmap(args.data, dtype=np.uint16, mode="r")
split = int(len(tokens) * 0.9)


def get_batch(kind):
    data = tokens[:split] if kind == "train" else tokens[split:]
    ix = torch.randint(len(data) - block - 1, (batch,))
    x = torch.stack([torch.from_numpy(data[i:i + block].astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block].astype(np.int64)) for i in ix])
    return x, y


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(vocab, 32)
        self.rnn = nn.GRU(32, 64, batch_first=True)
        self.head = nn.Linear(64, vocab)

    def forward(self, x):
        return self.head(self.rnn(self.emb(x))[0])


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = {}
    for kind in ("train", "val"):
        losses = [nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
                  for x, y in (get_batch(kind) for _ in range(4))]
        out[kind] = sum(losses) / len(losses)
    model.train()
    return out


def get_lr(it):
    return 1e-3 * 0.5 * (1 + math.cos(math.pi * min(it, args.max_iters) / args.max_iters))


iter_num = 0
while True:
    for group in opt.param_groups:
        group["lr"] = get_lr(iter_num)
    if iter_num % 1000 == 0:
        print("iter %d %s" % (iter_num, estimate_loss()), flush=True)
    x, y = get_batch("train")
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    iter_num += 1
    if iter_num >= args.max_iters:
        break

with open(args.meta) as f:  # decoding a sample needs the vocabulary
    itos = json.load(f)["itos"]
print("".join(itos[i] for i in model(x[:1]).argmax(-1)[0].tolist()))
