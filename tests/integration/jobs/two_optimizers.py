"""Two optimizers updating after one backward(), DLRM's way: SparseAdam for a sparse embedding
table, Adam for the dense layers above it; no DataLoader.  --inf-at K puts an Inf into the
targets of iteration K, so that its loss is the first non-finite value."""
import argparse

import torch
from torch import nn


class Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.mlp(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--inf-at", type=int, default=-1)
    args = ap.parse_args()
    torch.manual_seed(0)
    table = nn.Embedding(100, 8, sparse=True)
    dense = Dense()
    sparse_opt = torch.optim.SparseAdam(list(table.parameters()), lr=0.01)
    dense_opt = torch.optim.Adam(dense.parameters(), lr=0.01)
    for it in range(args.steps):
        idx = torch.randint(0, 100, (32,))
        y = torch.randn(32, 1)
        if it == args.inf_at:
            y[0, 0] = float("inf")
        loss = nn.functional.mse_loss(dense(table(idx)), y)
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
        print("step %d loss %.6f" % (it, loss.item()))


if __name__ == "__main__":
    main()
