#!/usr/bin/env python3
"""A small GPU training job with dropout, for dlrr's GPU checks (scripts/gpu_check.sh).

A CNN with dropout (whose masks come from the CUDA generator) and a transformer-style block
(SDPA attention + MLP with dropout) train on a synthetic in-memory dataset through a DataLoader
(shuffled, batches built on the CPU and copied to the GPU: host->device copies).  Everything
is seeded, so a run is repeatable; bit-exactness on the GPU also needs the deterministic
settings below (cuBLAS workspace, no cudnn.benchmark, deterministic algorithms).

At step --explode-at (default: never) the learning rate jumps to --explode-lr, as a bad
schedule would: the weights blow up and the loss turns non-finite a step or two later,
which is what `dlreplay --until nan` then finds.

    python3 examples/gpu_train.py --steps 40 --explode-at 25
    python3 examples/gpu_train.py --launch-bench 20000     # launch-heavy loop, timed

Prints `step N loss L` per step and `done steps N`; with --launch-bench, one line
`launch-bench launches N seconds S us_per_launch U`.  Without CUDA it runs on the CPU (for
smoke tests), or exits 2 with --require-cuda.
"""

import argparse
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (before CUDA init)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402


class SelfAttention(nn.Module):
    """Multi-head self-attention through F.scaled_dot_product_attention (torch 2.x; its dropout
    draws from the CUDA generator), or the same computation spelled out on torch 1.13."""

    def __init__(self, dim, heads, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.p if self.training else 0.0
        sdpa = getattr(nn.functional, "scaled_dot_product_attention", None)
        if sdpa is not None:
            y = sdpa(q, k, v, dropout_p=p)
        else:
            w = torch.softmax(q @ k.transpose(-2, -1) / (k.shape[-1] ** 0.5), dim=-1)
            y = nn.functional.dropout(w, p, self.training) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: attention (SDPA) and MLP, each followed by dropout."""

    def __init__(self, dim, heads, p):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, p)
        self.drop1 = nn.Dropout(p)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(p), nn.Linear(4 * dim, dim))
        self.drop2 = nn.Dropout(p)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.drop1(self.attn(h))
        return x + self.drop2(self.mlp(self.norm2(x)))


class Net(nn.Module):
    def __init__(self, classes=10, dim=64, p=0.1):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Dropout2d(p),
                                  nn.Conv2d(32, dim, 3, stride=2, padding=1), nn.ReLU())
        self.block = Block(dim, 4, p)
        self.head = nn.Sequential(nn.Dropout(p), nn.Linear(dim, classes))

    def forward(self, x):
        h = self.conv(x)                       # [B, dim, 8, 8]
        h = h.flatten(2).transpose(1, 2)       # [B, 64 tokens, dim]
        h = self.block(h)
        return self.head(h.mean(dim=1))


def deterministic(torch):
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    # Fused attention kernels accumulate with atomics in backward: use the math path.
    for name in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        fn = getattr(torch.backends.cuda, name, None)
        if fn is not None:
            fn(False)


class LaunchLoop(nn.Module):
    """`n` tiny kernels (torch.add on 16 floats) inside a training step, then a step."""

    def __init__(self, n):
        super().__init__()
        self.n = n
        self.b = nn.Parameter(torch.ones(16))
        self.seconds = 0.0

    def forward(self, x):
        sync = x.is_cuda
        if sync:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            c = torch.ones_like(x)
            for _ in range(self.n):
                x = torch.add(x, c)
        if sync:
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - start
        return x + self.b


def launch_bench(device, launches, steps=10):
    """Thousands of tiny kernels inside training steps (a root module's forward opens the step,
    as in a real job): the per-launch cost of GPU capture shows here."""
    model = LaunchLoop(max(launches // steps, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.ones(16, device=device)
    model(x)  # warm-up, outside the timing
    model.seconds = 0.0
    for _ in range(steps):
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    n = model.n * steps
    print("launch-bench launches %d seconds %.6f us_per_launch %.3f" % (n, model.seconds, model.seconds / n * 1e6))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--explode-at", type=int, default=-1)
    ap.add_argument("--explode-lr", type=float, default=1e6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--launch-bench", type=int, default=0, metavar="N")
    ap.add_argument("--require-cuda", action="store_true")
    ap.add_argument("--timing", action="store_true",
                    help="print the steady-state wall time per step (steps 5 on) to stderr")
    args = ap.parse_args(argv)

    cuda = torch.cuda.is_available()
    if args.require_cuda and not cuda:
        print("no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda" if cuda else "cpu")
    if args.launch_bench:
        launch_bench(device, args.launch_bench)
        return 0

    torch.manual_seed(args.seed)
    deterministic(torch)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, 3, 16, 16, generator=g)
    y = torch.randint(0, 10, (args.samples,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, drop_last=True,
                        num_workers=args.workers, generator=torch.Generator().manual_seed(args.seed),
                        pin_memory=cuda)
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    t_start = None
    while step < args.steps:
        for xb, yb in loader:
            if step == args.explode_at:
                for group in optimizer.param_groups:
                    group["lr"] = args.explode_lr
            xb = xb.to(device, non_blocking=True)
            yb = yb.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            print("step %d loss %.6f" % (step, loss.item()), flush=True)  # .item() synchronises
            step += 1
            if step == 5:
                t_start = time.perf_counter()
            if step >= args.steps:
                break  # before the next batch is drawn
    print("done steps %d" % step)
    if args.timing and t_start is not None and step > 5:
        print("timing steps %d ms_per_step %.4f" % (step - 5, (time.perf_counter() - t_start) / (step - 5) * 1e3),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
