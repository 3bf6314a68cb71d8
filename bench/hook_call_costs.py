"""Per-call CPU cost of the hook's pieces, in a recording process (run under dlrecord).

    build/bin/dlrecord -o /tmp/t -- /usr/bin/python3 bench/hook_call_costs.py

Each line is the main thread's CPU time (time.thread_time) per call over 20,000 calls after
200 warm-up calls: hot caches, so these are lower bounds of what the same call costs inside a
real step (whose tensors evict the caches).  Tiny tensors, so the hash's bandwidth is out of
the figures: what is left is Python frames, ctypes crossings and the library's per-event
work.  "Seq(10 Linear)" is 11 module calls per forward (10 layers + the root): (active -
no hooks) / 11 is the hook's cost per module call.  A benchmark, not a test.
"""
import time

import torch

import dlrr_hook

rec = dlrr_hook.current()
assert rec is not None, "run me under dlrecord"
lib = rec.lib
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
x = torch.randn(2, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(x).sum()
loss.backward()
opt.step()
small = torch.zeros(4)
N = 20000


def bench(name, fn):
    for _ in range(200):
        fn()
    t0 = time.thread_time()
    for _ in range(N):
        fn()
    print("%-40s %7.2f us" % (name, (time.thread_time() - t0) / N * 1e6))


p = rec.marshal.prepare(small)
d = lib.dlrr_digest
ref = rec._digest_ref
bench("noop python call", lambda: None)
bench("marshal.prepare(4 floats)", lambda: rec.marshal.prepare(small))
bench("dlrr_digest ctypes (4 floats)", lambda: d(2, b"w", 0, 0, p[1], p[3], p[4], p[5], p[6], 0, ref))
bench("dlrr_digest keep=1 kind 0", lambda: d(0, b"m", 0, 0, p[1], p[3], p[4], p[5], p[6], 1, ref))
bench("rec._digest (4 floats)", lambda: rec._digest(2, b"w", 0, 0, small, 0))
params = [(("p%d" % i).encode(), torch.zeros(4)) for i in range(16)]


def one_by_one():
    for name, t in params:
        rec._digest(2, name, 0, 0, t, 0)


def batched():
    for name, t in params:
        rec._digest_in_batch(2, name, 0, t)
    rec._flush_batch(2)


bench("16 parameter digests, one call each", one_by_one)
bench("16 parameter digests, dlrr_digest_many", batched)
bench("lib.dlrr_current_step()", lambda: lib.dlrr_current_step())
bench("torch.get_rng_state()", torch.get_rng_state)
bench("rng.snapshot()", rec.rng.snapshot)
s = rec.rng.snapshot()
bench("rng.write(snapshot)", lambda: rec.rng.write(s))
bench("rng.write(rng.snapshot())", lambda: rec.rng.write(rec.rng.snapshot()))
if hasattr(rec.rng, "write_snapshot"):  # the batch delivery's, in C (RngStates) when it can
    bench("rng.write_snapshot()", rec.rng.write_snapshot)


def delivery_costs(batches=2000):
    """A DataLoader batch delivery (step commit and begin, RNG states, 32 indices, 2 tensors):
    main thread CPU of the deliver callback and of the whole __next__, per batch; a tiny
    backward per batch keeps it a training loader."""
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.zeros(64, 4), torch.zeros(64, dtype=torch.long)), batch_size=32)
    w = torch.nn.Linear(4, 1)
    spent = [0.0, 0.0, 0]
    deliver = rec.loaders._deliver

    def timed(info, data):
        t0 = time.thread_time()
        try:
            return deliver(info, data)
        finally:
            spent[0] += time.thread_time() - t0
    rec.loaders._deliver = timed
    try:
        while spent[2] < batches:
            it = iter(loader)
            while True:
                t0 = time.thread_time()
                try:
                    x, _ = next(it)
                except StopIteration:
                    break
                spent[1] += time.thread_time() - t0
                spent[2] += 1
                w(x).sum().backward()
    finally:
        rec.loaders._deliver = deliver
    print("%-40s %7.2f us" % ("batch delivery: deliver callback", spent[0] / spent[2] * 1e6))
    print("%-40s %7.2f us" % ("batch delivery: whole __next__", spent[1] / spent[2] * 1e6))


delivery_costs(200)  # warm-up
delivery_costs()
bench("small.data_ptr()", small.data_ptr)
bench("small.shape", lambda: small.shape)
bench("small.is_contiguous()", small.is_contiguous)
rec.active = False
bench("Linear(4,4) forward, hook inactive", lambda: model(x))
rec.active = True
bench("Linear(4,4) forward, hook active", lambda: model(x))
rec.modules.uninstall()
bench("Linear(4,4) forward, no hooks", lambda: model(x))
seq = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(10)])


def fwd():
    seq(x)


rec.modules.install(torch.nn.modules.module)
rec.active = False
bench("Seq(10 Linear) forward, hook inactive", fwd)
rec.active = True
bench("Seq(10 Linear) forward, hook active", fwd)
rec.modules.uninstall()
bench("Seq(10 Linear) forward, no hooks", fwd)
