"""multiprocessing under replay: a Manager (a Unix socket in a /tmp/pymp-* directory that
tempfile makes, so in replay a directory that exists only in the scratch) and a spawned
process, then a few optimizer steps."""
import multiprocessing as mp
import os

import torch


def work(q):
    q.put(os.getpid() > 0)


if __name__ == "__main__":
    torch.manual_seed(0)
    with mp.Manager() as manager:
        d = manager.dict()
        d["x"] = 1
        print("manager ok", d["x"])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=work, args=(q,))
    p.start()
    print("spawn ok", q.get())
    p.join()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.randn(4, 2)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("done")
