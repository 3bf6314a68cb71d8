"""Replay memory: peak RSS of a replayed job whose trace holds ~1 GiB of batches, against the
job's own peak RSS, for this build and (optionally) another one.

    /usr/bin/python3 bench/replay_rss.py [--build build] [--before OTHER_BUILD] [--mib 1024]

The job (written to a temporary directory) trains a one-layer model on a DataLoader of
incompressible random batches (64 x 3 x 128 x 128 float32: 12 MiB each), stored by value by
dlrecord (the default), as many steps as make --mib of batches. It is recorded once with
--build's dlrecord; then the trace is replayed to its end by --build's dlreplay and, with
--before, by that build's dlreplay too (e.g. a build of an older commit: `git worktree add
/tmp/old <commit> && (cd /tmp/old && bash scripts/build.sh)`, then --before /tmp/old/build).
Printed: the trace's size, the job's peak RSS run plainly, recorded, and replayed by each
build, and each replay's ratio to the plain run. Peak RSS is the largest of any process of the
tree (getrusage RUSAGE_CHILDREN, measured in a fresh child per run). A benchmark, not a test.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOB = r'''
import sys
import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(sys.argv[1])
SHAPE = (3, 128, 128)


class Noise(Dataset):
    def __len__(self):
        return STEPS * 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(SHAPE, generator=g), i % 10


torch.manual_seed(0)
model = torch.nn.Linear(SHAPE[0], 10)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step, (x, y) in enumerate(DataLoader(Noise(), batch_size=64)):
    logits = model(x.mean(dim=(2, 3)))
    loss = torch.nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step %d loss %.6f" % (step, loss.item()), flush=True)
'''


def peak_rss_mib(argv, env=None):
    """Runs argv in a fresh child (so RUSAGE_CHILDREN is its tree alone); (peak MiB, exit code)."""
    code = ("import resource, subprocess, sys\n"
            "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)\n")
    out = subprocess.run([PY, "-c", code] + argv, capture_output=True, text=True, env=env, check=True).stdout
    kib, rc = out.split()
    return int(kib) / 1024.0, int(rc)


def tree_size(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--before", help="another build directory whose dlreplay replays the same trace")
    ap.add_argument("--mib", type=int, default=1024, help="MiB of batches in the trace")
    args = ap.parse_args()
    steps = max(1, args.mib // 12)
    tmp = tempfile.mkdtemp(prefix="dlrr-rss-")
    try:
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        trace = os.path.join(tmp, "trace")
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        plain, rc = peak_rss_mib([PY, job, str(steps)], env)
        assert rc == 0, "the job failed"
        rec, rc = peak_rss_mib([os.path.join(args.build, "bin", "dlrecord"), "-o", trace, "--", PY, job, str(steps)],
                               env)
        assert rc == 0, "dlrecord failed (%d)" % rc
        print("trace: %d steps, %.0f MiB on disk" % (steps, tree_size(trace) / 2**20))
        print("%-28s %9s %7s" % ("run", "peak MiB", "ratio"))
        print("%-28s %9.0f %7s" % ("plain job", plain, "1.00"))
        print("%-28s %9.0f %7.2f" % ("recorded", rec, rec / plain))
        builds = [("replay, this build", args.build)]
        if args.before:
            builds.append(("replay, --before build", args.before))
        for name, build in builds:
            rss, rc = peak_rss_mib([os.path.join(build, "bin", "dlreplay"), trace], env)
            note = "" if rc == 0 else "  (dlreplay exit %d: not verified to the end)" % rc
            print("%-28s %9.0f %7.2f%s" % (name, rss, rss / plain, note))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
