"""A small training job that ends badly on purpose, for the hardening tests.

    faults.py MODE [--steps N]

Trains N steps (default 6; DataLoader without workers, unseeded), printing "step K loss L"
after each, then, by MODE:
  clean          prints "done", exits 0
  segv           dereferences NULL in native code (ctypes)
  abort          os.abort() (SIGABRT from native code)
  os_exit        os._exit(3) with daemon threads still drawing entropy
  atexit_raise   an atexit handler raises during interpreter shutdown (exit code stays 0)
  del_raise      a __del__ raises during interpreter shutdown
  fork_entropy   fork() without exec after step 1: the child keeps running, drawing
                 entropy (os.urandom, random, numpy) while the parent trains; the parent
                 waits for it and prints its exit code
  threads_entropy 8 threads draw os.urandom/os.getrandom in a loop while the parent trains
                 and the writer flushes; the main thread exits while they still draw
Output is deterministic in content (losses are not printed for modes where threads race).
"""
import argparse
import atexit
import ctypes
import os
import random
import sys
import threading
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def entropy_loop(stop, counter):
    while not stop.is_set():
        os.urandom(32)
        os.getrandom(16)
        counter[0] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    mode = args.mode

    threads = []
    stop = threading.Event()
    if mode in ("threads_entropy", "os_exit"):
        for _ in range(8):
            t = threading.Thread(target=entropy_loop, args=(stop, [0]), daemon=True)
            t.start()
            threads.append(t)

    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    child = None
    step = 0
    while step < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("step %d" % step, flush=True)
            if mode == "fork_entropy" and step == 1:
                child = os.fork()
                if child == 0:
                    # A forked child without exec that keeps running and drawing entropy.
                    end = time.monotonic() + 1.0
                    n = 0
                    while time.monotonic() < end:
                        os.urandom(64)
                        random.random()
                        np.random.rand()
                        n += 1
                    os._exit(0 if n > 0 else 1)
            step += 1
            if step >= args.steps:
                break

    if child:
        _, status = os.waitpid(child, 0)
        print("child exit %d" % os.waitstatus_to_exitcode(status), flush=True)
    if mode == "segv":
        ctypes.string_at(0)
    if mode == "abort":
        os.abort()
    if mode == "os_exit":
        sys.stdout.flush()
        os._exit(3)
    if mode == "atexit_raise":
        def boom():
            raise RuntimeError("raised in an atexit handler")
        atexit.register(boom)
    if mode == "del_raise":
        class Grumpy:
            def __del__(self):
                raise ValueError("raised in __del__ at shutdown")
        globals()["grumpy"] = Grumpy()
    print("done", flush=True)


if __name__ == "__main__":
    main()
