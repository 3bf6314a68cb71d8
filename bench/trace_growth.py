"""Trace bytes per step of three jobs, batches by value against batches by reference
(dlrecord --window K), and the recording's cost against the plain job, in one run.

    /usr/bin/python3 bench/trace_growth.py [--build build] [--jobs vision,token,tabular]
        [--small] [--window 2] [--vision-steps 4] [--token-steps 40] [--tabular-steps 40]

Jobs (each made here, seeded):
- vision: torchvision ImageFolder over 256x256 PNGs, RandomResizedCrop(224) and a random flip
  in 2 DataLoader workers, a shuffled sampler, batch 64, torchvision's resnet18, SGD (the issue's
  configuration). --small: 64-pixel crops of 96-pixel images, batch 16 (the first figures').
- token: a GPT-like model (token and position embeddings, 2 pre-norm blocks of causal
  MultiheadAttention and a GELU MLP, dropout 0.1, AdamW) over nanoGPT's get_batch(): torch.randint
  offsets, 12 windows of 128 uint16 tokens from an np.memmap, no DataLoader; the token file is
  72 MiB, over the 64 MiB below which dlrr records a read file whole, so only the ranges used
  are recorded, as for a real token file.
- tabular: a CSV-backed map-style Dataset (20,000 rows, 32 features, parsed in __init__), a
  shuffled DataLoader without workers, batch 256, an MLP, Adam.

Each job runs plain for N steps, then recorded for N steps by value (`--batches all`, the
default) and by reference (`--window K`), both with `--snapshot-every off` (periodic snapshots
follow time, not steps: docs/performance.md, "Jump replay", has their cost). The figures: the
bytes the trace's main stream stores per step outside the window (the median, over steps
1..N-2 that took no snapshot, of the bytes written between a step's first frame and the next
step's: the window's bytes are written at exit, after them), the fixed part (the trace's bytes
beyond N such steps: start-up facts and, by reference, the window's held snapshots and
batches), the window's peak memory (dlrecord's summary), and the wall and CPU time of the
recorded runs against the plain job's: whole process (start-up included) and the job's own
steps after the first (the loop's wall time, printed by the job). One run each on a shared
machine: ratios, not a timing claim. Last, what one step of the by-reference trace holds: its
events by kind, and the raw bytes (before compression) of the blobs they add by kind (once per
content hash: a blob seen before, or a batch by reference, costs nothing), to show what
dominates.
"""
import argparse
import collections
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

VISION = r'''
import sys, time, torch, torchvision
from torchvision import transforms
torch.manual_seed(0)
data, steps, batch, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(data, transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2)
model = torchvision.models.resnet18(num_classes=2)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step, t1 = 0, None
while step < steps:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 1:
            t1 = time.monotonic()
        if step >= steps:
            break
print("loop_s %.6f" % (time.monotonic() - t1))
'''

TOKEN = r'''
import sys, time, numpy as np, torch, torch.nn as nn
torch.manual_seed(1337)
path, steps = sys.argv[1], int(sys.argv[2])
vocab, block, batch, dim = 512, 128, 12, 128

def get_batch():
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = torch.randint(len(data) - block, (batch,))
    x = torch.stack([torch.from_numpy((data[i:i + block]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block]).astype(np.int64)) for i in ix])
    return x, y

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, dropout=0.1, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.1))
    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))

class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((block, block), float("-inf")), 1))
    def forward(self, idx, targets):
        x = self.drop(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = self.head(self.ln(x))
        return nn.functional.cross_entropy(logits.view(-1, vocab), targets.view(-1))

model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = get_batch()
t1 = None
for it in range(steps):
    loss = model(x, y)
    x, y = get_batch()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if it == 0:
        t1 = time.monotonic()
print("loop_s %.6f" % (time.monotonic() - t1))
'''

TABULAR = r'''
import csv, sys, time, numpy as np, torch, torch.nn as nn
torch.manual_seed(5)
path, steps = sys.argv[1], int(sys.argv[2])

class CsvDataset(torch.utils.data.Dataset):
    def __init__(self, path):
        with open(path, newline="") as f:
            rows = np.array([[float(v) for v in r] for r in csv.reader(f)], dtype=np.float32)
        self.x, self.y = torch.from_numpy(rows[:, :-1]), torch.from_numpy(rows[:, -1].astype(np.int64))
    def __len__(self):
        return len(self.y)
    def __getitem__(self, i):
        return self.x[i], self.y[i]

loader = torch.utils.data.DataLoader(CsvDataset(path), batch_size=256, shuffle=True)
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Dropout(0.1), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step, t1 = 0, None
while step < steps:
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 1:
            t1 = time.monotonic()
        if step >= steps:
            break
print("loop_s %.6f" % (time.monotonic() - t1))
'''


def make_images(root, n, side):
    import numpy as np
    from PIL import Image
    rnd = np.random.RandomState(1)
    for cls in ("a", "b"):
        os.makedirs(os.path.join(root, cls))
        for i in range(n):
            Image.fromarray(rnd.randint(0, 256, (side, side, 3), dtype=np.uint8)).save(
                os.path.join(root, cls, "%d.png" % i))


def make_tokens(path):
    import numpy as np
    np.random.RandomState(0).randint(0, 512, size=36 << 20, dtype=np.uint16).tofile(path)  # 72 MiB


def make_csv(path):
    import numpy as np
    rnd = np.random.RandomState(2)
    x = rnd.randn(20000, 32).astype(np.float32)
    y = (x[:, :4].sum(axis=1) > 0).astype(np.int64)
    with open(path, "w") as f:
        for row, label in zip(x, y):
            f.write(",".join("%.5f" % v for v in row) + ",%d\n" % label)


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def run(argv):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("%s failed:\n%s" % (argv[0], p.stderr[-4000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    loop = float(re.search(r"loop_s ([0-9.]+)", p.stdout).group(1))
    return wall, cpu, loop, p.stderr


def per_step(dltrace, trace):
    """What the trace's main stream stores per step: (the bytes written between the first frame of
    step s and the first of step s+1, for each s outside the window), and the events with the blobs
    they add by kind for one of those steps (raw bytes before compression, once per content hash:
    a blob seen before, or a batch recorded by reference, costs nothing)."""
    p = subprocess.run([dltrace, "events", trace, "--json"], capture_output=True, text=True, check=True)
    events = [json.loads(line) for line in p.stdout.splitlines()]
    main_stream = collections.Counter(e["stream"] for e in events if e["kind"] == "stepEnd").most_common(1)[0][0]
    first, seen, blob_bytes, counts = {}, set(), collections.defaultdict(collections.Counter), \
        collections.defaultdict(collections.Counter)

    def blobs(value, out):
        if isinstance(value, dict):
            if "hashLo" in value and "size" in value:
                out.append((value["hashLo"], value.get("hashHi"), int(value["size"])))
            for v in value.values():
                blobs(v, out)
        elif isinstance(value, list):
            for v in value:
                blobs(v, out)

    for e in events:
        if e["stream"] != main_stream:
            continue
        step = e["event"].get("step")
        if step is not None and step not in first:
            first[step] = e["frame"]
        found = []
        body = e["event"].get(e["kind"])
        if not (isinstance(body, dict) and body.get("byReference")):  # by reference: no bytes stored
            blobs(e["event"], found)
        for lo, hi, size in found:
            if (lo, hi) not in seen:
                seen.add((lo, hi))
                blob_bytes[step][e["kind"]] += size
        counts[step][e["kind"]] += 1
    steps = sorted(s for s in first if s >= 0)
    # Step 0 carries first-time facts; the last step's span reaches the exit (and the window's flush).
    deltas = {s: first[steps[i + 1]] - first[s] for i, s in enumerate(steps[:-1]) if s >= 1}
    return deltas, blob_bytes, counts


def bench(o, name, job, args, steps, dlrecord, dltrace, tmp):
    plain = run([sys.executable, job, args[0], str(steps)] + args[1:])
    rows = []
    for variant, extra in (("by value (--batches all)", []),
                           ("by reference (--window %d)" % o.window, ["--window", str(o.window)])):
        trace = os.path.join(tmp, "%s-%d" % (name, len(rows)))
        # No periodic snapshots: their cadence follows time (on this machine a vision step takes long
        # enough for one every other step), which is not what a step costs; the window's own
        # snapshots are taken all the same.
        wall, cpu, loop, err = run([dlrecord, "--snapshot-every", "off"] + extra
                                   + ["-o", trace, "--", sys.executable, job, args[0], str(steps)] + args[1:])
        m = re.search(r"peak held in memory (\d+) bytes", err)
        held = int(m.group(1)) if m else 0
        deltas, blob_bytes, counts = per_step(dltrace, trace)
        # A step that took the window's snapshot is not a typical step.
        step_bytes = statistics.median([d for s, d in deltas.items() if "snapshot" not in counts[s]]
                                       or deltas.values())
        total = dir_bytes(trace)
        rows.append((variant, step_bytes, total - step_bytes * steps, held, wall, cpu, loop))
        shutil.rmtree(trace)
    print("%-28s %11s %13s %13s %8s %8s %8s" % ("variant", "bytes/step", "fixed bytes", "window held", "wall",
                                                "cpu", "steps"))
    print("%-28s %11s %13s %13s %7.1fs %7.1fs %7.2fs" % ("plain (not recorded)", "-", "-", "-", plain[0], plain[1],
                                                         plain[2]))
    for variant, step_bytes, fixed, held, wall, cpu, loop in rows:
        print("%-28s %11.0f %13.0f %13d %7.3fx %7.3fx %7.3fx" % (variant, step_bytes, fixed, held, wall / plain[0],
                                                                 cpu / plain[1], loop / plain[2]))
    (_, v_step, _, _, v_wall, v_cpu, v_loop), (_, r_step, _, _, r_wall, r_cpu, r_loop) = rows
    print("by value / by reference: %.1fx bytes per step outside the window; by reference against by value: "
          "wall %.3f, cpu %.3f, steps %.3f" % (v_step / max(1.0, r_step), r_wall / v_wall, r_cpu / v_cpu,
                                               r_loop / v_loop))
    plain_steps = [s for s in sorted(deltas) if "snapshot" not in counts[s]] or sorted(deltas)  # a typical step
    at = plain_steps[len(plain_steps) // 2]
    print("by reference, step %d: %d B stored; events %s; new blobs (raw) %s"
          % (at, deltas[at], ", ".join("%s %d" % kv for kv in counts[at].most_common()),
             ", ".join("%s %d B" % kv for kv in blob_bytes[at].most_common()) or "none"))
    print(flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                    "build"))
    ap.add_argument("--jobs", default="vision,token,tabular")
    ap.add_argument("--small", action="store_true", help="vision job at 64-pixel crops, batch 16")
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--vision-steps", type=int, default=5)
    ap.add_argument("--token-steps", type=int, default=40)
    ap.add_argument("--tabular-steps", type=int, default=40)
    o = ap.parse_args()
    dlrecord = os.path.join(o.build, "bin", "dlrecord")
    dltrace = os.path.join(o.build, "bin", "dltrace")
    tmp = tempfile.mkdtemp(prefix="dlrr-growth-")
    try:
        for name in o.jobs.split(","):
            job = os.path.join(tmp, name + "_job.py")  # not token.py: that shadows the standard library's
            with open(job, "w") as f:
                f.write({"vision": VISION, "token": TOKEN, "tabular": TABULAR}[name])
            if name == "vision":
                batch, size, side = (16, 64, 96) if o.small else (64, 224, 256)
                data = os.path.join(tmp, "images")
                make_images(data, batch, side)  # 2 batches an epoch
                print("vision job: resnet18, ImageFolder of %dx%d PNGs, RandomResizedCrop(%d), flip, batch %d, "
                      "2 workers; %d steps, window %d" % (side, side, size, batch, o.vision_steps, o.window))
                bench(o, name, job, [data, str(batch), str(size)], o.vision_steps, dlrecord, dltrace, tmp)
                shutil.rmtree(data)
            elif name == "token":
                data = os.path.join(tmp, "train.bin")
                make_tokens(data)
                print("token job: GPT-like (2 blocks, dim 128, dropout), nanoGPT get_batch() of 12x128 tokens from "
                      "a 72 MiB np.memmap, no DataLoader; %d steps, window %d"
                      % (o.token_steps, o.window))
                bench(o, name, job, [data], o.token_steps, dlrecord, dltrace, tmp)
                os.unlink(data)
            else:
                data = os.path.join(tmp, "table.csv")
                make_csv(data)
                print("tabular job: CSV-backed Dataset (20,000 x 32, %.1f MiB), MLP, batch 256, no workers; %d steps, "
                      "window %d" % (os.path.getsize(data) / 2 ** 20, o.tabular_steps, o.window))
                bench(o, name, job, [data], o.tabular_steps, dlrecord, dltrace, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
