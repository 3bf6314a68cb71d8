"""Trace bytes per step of a vision job, batches by value against batches by reference
(dlrecord --window K), in one run.

    /usr/bin/python3 bench/trace_growth.py [--build build] [--steps 24] [--window 4]
                                           [--batch 16] [--size 64] [--model resnet18|small]

The job: torchvision ImageFolder over PNGs made here, RandomResizedCrop(size) and a random
flip in 2 DataLoader workers, a shuffled sampler, torchvision's resnet18 (or a small CNN),
SGD. Each variant records the job for --steps and for twice as many steps; the figures are
the marginal trace bytes on disk per step ((bytes at 2N - bytes at N) / N: what a longer job
adds per step, outside the window), the fixed part (what the N-step trace holds beyond N
marginal steps: for by reference, mostly the window's two held snapshots of the training state
and its batches, written at exit), and the wall and CPU time of the N-step recordings (one run
each: ratios, not a timing claim).
"""
import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

JOB = r'''
import sys, torch, torchvision
from torchvision import transforms
torch.manual_seed(0)
data, steps, batch, size, model_name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor()])
ds = torchvision.datasets.ImageFolder(data, transform=tf)
loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2)
if model_name == "resnet18":
    model = torchvision.models.resnet18(num_classes=2)
else:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < steps:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step >= steps:
            break
'''


def make_images(root, n, size):
    from PIL import Image
    rnd = random.Random(1)
    for cls in ("a", "b"):
        os.makedirs(os.path.join(root, cls))
        for i in range(n):
            img = Image.new("RGB", (size + size // 2, size + size // 2))
            img.putdata([(rnd.randrange(256),) * 3 for _ in range(img.width * img.height)])
            img.save(os.path.join(root, cls, "%d.png" % i))


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def record(dlrecord, trace, job, args, extra):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run([dlrecord] + extra + ["-o", trace, "--", sys.executable, job] + args,
                       capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("dlrecord failed:\n" + p.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                    "build"))
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--model", default="resnet18", choices=("resnet18", "small"))
    o = ap.parse_args()
    dlrecord = os.path.join(o.build, "bin", "dlrecord")
    tmp = tempfile.mkdtemp(prefix="dlrr-growth-")
    try:
        data = os.path.join(tmp, "images")
        make_images(data, 2 * o.batch, o.size)
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        args = [data, str(o.steps), str(o.batch), str(o.size), o.model]
        rows = []
        for name, extra in (("by value (--batches all)", []),
                            ("by reference (--window %d)" % o.window, ["--window", str(o.window)])):
            sizes = []
            for steps in (o.steps, 2 * o.steps):
                trace = os.path.join(tmp, "t%d-%d" % (len(rows), steps))
                wall, cpu, err = record(dlrecord, trace, job, [data, str(steps)] + args[2:], extra)
                sizes.append(dir_bytes(trace))
                if steps == o.steps:
                    timing = (wall, cpu)
                    m = re.search(r"peak held in memory (\d+) bytes", err)
                    held = int(m.group(1)) if m else 0
            per_step = (sizes[1] - sizes[0]) / o.steps
            rows.append((name, per_step, sizes[0] - per_step * o.steps, held) + timing)
        print("vision job: %s, ImageFolder, RandomResizedCrop(%d), batch %d, 2 workers, %d and %d steps"
              % (o.model, o.size, o.batch, o.steps, 2 * o.steps))
        print("%-28s %12s %14s %14s %8s %8s" % ("variant", "bytes/step", "fixed bytes", "window held", "wall s",
                                                 "cpu s"))
        for name, per_step, fixed, held, wall, cpu in rows:
            print("%-28s %12.0f %14.0f %14d %8.1f %8.1f" % (name, per_step, fixed, held, wall, cpu))
        (_, v_step, _, _, v_wall, v_cpu), (_, r_step, _, _, r_wall, r_cpu) = rows
        print("ratio by value / by reference: %.1fx bytes per step outside the window; "
              "wall %.2f, cpu %.2f (by reference / by value, %d steps)"
              % (v_step / max(1.0, r_step), r_wall / v_wall, r_cpu / v_cpu, o.steps))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
