"""The issue 29 goal: a long recorded job within a budget, its failure replayed without the
dataset from the window, and the whole job replayed with the dataset.

    /usr/bin/python3 bench/long_job.py [--build build] [--steps 50000] [--fail-at STEPS-200]
                                       [--window 16] [--budget SIZE] [--keep DIR]

The job: torchvision ImageFolder over 1,024 32x32 PNGs in 4 classes (made here), RandomCrop(28,
padding 2), a random flip and ToTensor in 2 persistent DataLoader workers, a shuffled sampler,
batch 16, a small CNN, SGD with momentum. At step --fail-at a NaN enters the batch in the training
loop (as a corrupt sample would); the job goes on to --steps, as a job that does not check its loss
does. Recorded with `dlrecord --window K` (and `--budget SIZE` when given: passed through as is).

Then: the trace's size and the window's memory (dlrecord's summary); the dataset moved away and
`dlreplay --without-data` to the failure (the default target: the first non-finite value, from
the window's snapshot); the dataset back and `dlreplay --from start --until end` (every batch
re-made by the job's own workers and checked against its recorded digest, every step verified).
Wall and CPU time of each phase, and of the plain job (not recorded). One run on a shared machine:
ratios, not a timing claim. --steps 2000 gives a run of a few minutes.
"""
import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

JOB = r'''
import sys, time, torch, torchvision
from torchvision import transforms
torch.manual_seed(0)
data, steps, fail_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tf = transforms.Compose([transforms.RandomCrop(28, padding=2), transforms.RandomHorizontalFlip(), transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(data, transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2, persistent_workers=True)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(16, 32, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
step, t0 = 0, time.monotonic()
while step < steps:
    for x, y in loader:
        if step == fail_at:
            x = x.clone()
            x[3, 0, 5, 5] = float("nan")  # a corrupt sample
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % 5000 == 0:
            print("step %d loss %.4f %.0fs" % (step, loss.item(), time.monotonic() - t0), flush=True)
        if step >= steps:
            break
print("done %d steps, loss %s" % (step, loss.item()), flush=True)
'''


def make_images(root, per_class=256, side=32):
    import numpy as np
    from PIL import Image
    rnd = np.random.RandomState(4)
    for c in range(4):
        os.makedirs(os.path.join(root, "c%d" % c))
        for i in range(per_class):
            img = rnd.randint(0, 256, (side, side, 3), dtype=np.uint8)
            img[:, :, c % 3] //= 2  # a little signal to learn
            Image.fromarray(img).save(os.path.join(root, "c%d" % c, "%d.png" % i))


def timed(argv, timeout=None):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return p, wall, cpu


def last_lines(text, pattern):
    return [line for line in text.splitlines() if re.search(pattern, line)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                    "build"))
    ap.add_argument("--steps", type=int, default=50000)
    ap.add_argument("--fail-at", type=int, default=None, help="default: --steps - 200")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--budget", default=None, help="passed to dlrecord --budget as is")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain (unrecorded) run")
    ap.add_argument("--keep", default=None, help="keep the trace and dataset in this new directory")
    o = ap.parse_args()
    fail_at = o.steps - 200 if o.fail_at is None else o.fail_at
    tools = {t: os.path.join(o.build, "bin", t) for t in ("dlrecord", "dlreplay", "dltrace")}
    tmp = o.keep or tempfile.mkdtemp(prefix="dlrr-long-")
    os.makedirs(tmp, exist_ok=True)
    ok = True
    try:
        data = os.path.join(tmp, "images")
        make_images(data)
        job = os.path.join(tmp, "long_job.py")
        with open(job, "w") as f:
            f.write(JOB)
        args = [sys.executable, job, data, str(o.steps), str(fail_at)]
        print("long job: %d steps, NaN at step %d, ImageFolder of 1,024 32x32 PNGs, RandomCrop+flip in 2 "
              "persistent workers, batch 16, small CNN; dlrecord --window %d%s"
              % (o.steps, fail_at, o.window, " --budget " + o.budget if o.budget else ""), flush=True)
        plain = None
        if not o.no_plain:
            p, wall, cpu = timed(args)
            plain = (wall, cpu)
            print("plain:              wall %8.1f s, cpu %8.1f s" % plain, flush=True)
        trace = os.path.join(tmp, "trace")
        extra = ["--window", str(o.window)] + (["--budget", o.budget] if o.budget else [])
        p, wall, cpu = timed([tools["dlrecord"]] + extra + ["-o", trace, "--"] + args)
        ratio = " (%.2fx wall, %.2fx cpu of plain)" % (wall / plain[0], cpu / plain[1]) if plain else ""
        print("record:             wall %8.1f s, cpu %8.1f s%s, exit %d" % (wall, cpu, ratio, p.returncode), flush=True)
        for line in last_lines(p.stderr, r"batch window|dlrecord: trace|budget"):
            print("  " + line)
        if p.returncode != 0 or not os.path.isdir(trace):  # the job exits 0: a NaN does not stop it
            sys.exit("recording failed:\n" + p.stderr[-4000:])
        size = sum(os.path.getsize(os.path.join(trace, f)) for f in os.listdir(trace))
        print("trace: %d bytes (%.1f MiB), %.0f bytes per step" % (size, size / 2 ** 20, size / o.steps))
        info = subprocess.run([tools["dltrace"], "info", trace], capture_output=True, text=True).stdout
        for line in last_lines(info, r"^(size|replay|failure|snapshots)"):
            print("  " + line)

        moved = data + ".moved"
        os.rename(data, moved)
        try:
            p, wall, cpu = timed([tools["dlreplay"], trace, "--without-data"])
        finally:
            os.rename(moved, data)
        print("replay the failure without the dataset: wall %.1f s, cpu %.1f s, exit %d" % (wall, cpu, p.returncode))
        for line in last_lines(p.stderr, r"jumping|reached|reproduced|diverged|unservable|verified|refus"):
            print("  " + line)
        ok = ok and p.returncode == 0

        p, wall, cpu = timed([tools["dlreplay"], trace, "--from", "start", "--until", "end"])
        print("replay everything with the dataset: wall %.1f s, cpu %.1f s, exit %d" % (wall, cpu, p.returncode))
        for line in last_lines(p.stderr, r"replayed|reached|diverged|differs|unservable|verified"):
            print("  " + line)
        ok = ok and p.returncode == 0
    finally:
        if not o.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
