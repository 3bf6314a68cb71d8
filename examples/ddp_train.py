#!/usr/bin/python3
"""Tiny DistributedDataParallel training job (gloo backend, CPU).

Meant to be started by torchrun, which sets RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, ... for every rank.  With torch 1.13 under Python 3.11 torchrun
needs a non-zero --redirects (1 or 2; 0, the default, and 3 crash the agent);
--rdzv_endpoint=localhost:0 picks a free port, where --standalone always uses
29400 and so clashes with any other torchrun running at the same time:

    /usr/bin/python3 -m torch.distributed.run --rdzv_backend=c10d \
        --rdzv_endpoint=localhost:0 --nnodes=1 --nproc_per_node=2 \
        --redirects 1 --tee 1 --monitor_interval 0.2 \
        examples/ddp_train.py --steps 6

Started without torchrun (no RANK in the environment) it runs as a
single-rank job on a free local port.

Model: nn.Sequential(fc1=Linear(8,16), act=ReLU, fc2=Linear(16,4)), SGD,
cross-entropy.  Data: a synthetic in-memory TensorDataset (the same in every
rank) read through a DataLoader with a DistributedSampler, so each rank sees
its own shard; the sampler is re-shuffled every epoch (set_epoch) and the
loop runs as many epochs as --steps needs.  Every rank calls
torch.manual_seed(--seed), so the initial parameters are equal in all ranks
(DDP also broadcasts rank 0's at construction).

Output, flushed, one line per optimizer step and one at the end:

    rank {r} step {global_step} loss {loss:.6f}      global_step counts from 0
    user comm hook calls: {n}                        only with --comm-hook
    rank {r} done

--nan-rank R --nan-step S: on rank R at global step S, x[0, 0] of that rank's
batch is set to NaN before the forward pass, so fc1's and fc2's outputs and
that rank's loss are non-finite at step S; DDP's gradient all-reduce then
spreads the NaN gradients to every rank, so all ranks' parameters are NaN
after step S and every rank's loss is NaN from step S+1 on.  The job keeps
training and exits 0.

--param-hash prints `rank {r} params {sha256}` of the final parameters' bytes.

--compiled-mean (torch 2.x) also prints `rank {r} step {s} mean {m:.6f}`: every rank's loss
averaged by an all_reduce inside a torch.compile'd function (dynamo turns dist.all_reduce into a
functional collective there).

--comm-hook registers a user-defined DDP communication hook: a Python
function doing what torch's default allreduce_hook does (divide the bucket
by the world size, all_reduce it asynchronously, return the future), plus a
call counter that each rank prints at the end.
"""

import argparse
import hashlib
import os
import socket
import sys
import time
from collections import OrderedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

IN_FEATURES = 8
HIDDEN = 16
CLASSES = 4
DATA_SEED = 1234  # the dataset is the same whatever --seed is

COMM_HOOK_CALLS = 0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=0,
                   help="DataLoader num_workers (default 0)")
    p.add_argument("--batch-size", type=int, default=4, help="per rank")
    p.add_argument("--n", type=int, default=64, help="dataset size")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--nan-rank", type=int, default=None)
    p.add_argument("--nan-step", type=int, default=None)
    p.add_argument("--comm-hook", action="store_true",
                   help="register a user-defined allreduce comm hook")
    p.add_argument("--late-comm-hook", action="store_true",
                   help="register it after the first step instead (DDP allows that)")
    p.add_argument("--compiled-mean", action="store_true",
                   help="print the ranks' mean loss, all-reduced in a torch.compile'd function")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU per rank: cuda:LOCAL_RANK, NCCL)")
    p.add_argument("--hidden", type=int, default=HIDDEN, help="fc1's width (benchmarks use a larger model)")
    p.add_argument("--loop-time", action="store_true",
                   help="print `rank {r} loop {seconds}`: the training loop's wall time (benchmarks)")
    p.add_argument("--param-hash", action="store_true",
                   help="print a SHA-256 of the final parameters' bytes (bit-exactness checks)")
    return p.parse_args(argv)


def default_single_rank_env():
    """Let the script run as a 1-rank job when not started by torchrun."""
    if "RANK" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1",
                      LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


def user_allreduce_hook(process_group, bucket):
    """Same as torch's default_hooks.allreduce_hook, plus a call counter."""
    global COMM_HOOK_CALLS
    COMM_HOOK_CALLS += 1
    group = process_group if process_group is not None else dist.group.WORLD
    tensor = bucket.buffer()
    tensor.div_(group.size())
    fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


def make_dataset(n):
    g = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(n, IN_FEATURES, generator=g)
    w = torch.randn(IN_FEATURES, CLASSES, generator=g)
    y = (x @ w).argmax(dim=1)
    return TensorDataset(x, y)


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)
    default_single_rank_env()
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if cuda else "gloo", init_method="env://")
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    rank = dist.get_rank()
    world = dist.get_world_size()

    torch.manual_seed(args.seed)
    model = nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(IN_FEATURES, args.hidden)),
        ("act", nn.ReLU()),
        ("fc2", nn.Linear(args.hidden, CLASSES)),
    ]))
    model = model.to(device)
    ddp = DDP(model, device_ids=[device.index] if cuda else None)
    if args.comm_hook and not args.late_comm_hook:
        ddp.register_comm_hook(None, user_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    dataset = make_dataset(args.n)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers, drop_last=True)
    if len(loader) == 0:
        sys.exit(f"rank {rank}: dataset too small for {world} ranks")

    mean_of = None
    if args.compiled_mean:
        @torch.compile
        def mean_of(loss):
            total = loss.detach().clone()
            dist.all_reduce(total)
            return total / world

    step = 0
    epoch = 0
    started = time.perf_counter()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            if step >= args.steps:
                break
            x, y = x.to(device), y.to(device)
            if rank == args.nan_rank and step == args.nan_step:
                x = x.clone()
                x[0, 0] = float("nan")
            opt.zero_grad()
            loss = loss_fn(ddp(x), y)
            loss.backward()  # DDP all-reduces the gradients here
            opt.step()
            print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
            if mean_of is not None:
                print(f"rank {rank} step {step} mean {mean_of(loss).item():.6f}", flush=True)
            if args.comm_hook and args.late_comm_hook and step == 0:
                ddp.register_comm_hook(None, user_allreduce_hook)
            step += 1
        epoch += 1

    if args.loop_time:
        print(f"rank {rank} loop {time.perf_counter() - started:.6f}", flush=True)
    if args.comm_hook:
        print(f"user comm hook calls: {COMM_HOOK_CALLS}", flush=True)
    if args.param_hash:
        h = hashlib.sha256()
        for p in model.parameters():
            h.update(p.detach().cpu().numpy().tobytes())
        print(f"rank {rank} params {h.hexdigest()}", flush=True)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()
    if args.comm_hook:
        # torch 1.13 + gloo + a Python comm hook: about 1 run in 10 hangs at interpreter exit,
        # without dlrr too (the process group's destructor joins a worker thread while holding
        # the GIL that thread waits for). Leave without running destructors.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
