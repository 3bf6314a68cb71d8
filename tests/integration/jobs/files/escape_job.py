"""Writes to its working directory's files by every path the libc hooks cannot see or follow
(issue 27, items 1 and 2): checkpoint rotation through a symlink the job made, /proc/self/cwd,
/dev/fd/N of a read-only descriptor, /dev/shm, chown, setxattr, fchmod and futimens on a
read-only descriptor, a statically linked helper (argv[2]), a raw unlink syscall. Each
operation's outcome is printed, so the record and the replay do the same. Trains a few steps
first (a DataLoader, so the trace has steps to verify)."""
import ctypes
import os
import subprocess
import sys

import torch
import torch.nn as nn

shm = sys.argv[1]  # a /dev/shm file of the user's
helper = sys.argv[2] if len(sys.argv) > 2 else ""
torch.manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in torch.utils.data.DataLoader(ds, batch_size=8):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()


def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except (OSError, subprocess.CalledProcessError) as e:
        print(name, "failed", getattr(e, "errno", None) or getattr(e, "returncode", None))


def rotate():
    os.symlink(os.path.abspath("runs/r1"), "cur")
    os.remove("cur/ckpt_old.pt")
    with open("new.tmp", "wb") as f:
        f.write(b"new checkpoint")
    os.replace("new.tmp", "cur/ckpt_best.pt")


def proc_cwd():
    with open("/proc/self/cwd/notes.txt", "w") as f:
        f.write("overwritten through /proc/self/cwd")
    os.unlink("/proc/self/cwd/todo.txt")


def dev_fd():
    fd = os.open("data.txt", os.O_RDONLY)
    with open("/dev/fd/%d" % fd, "w") as f:
        f.write("overwritten through /dev/fd")
    os.close(fd)


def dev_shm():
    with open(shm, "w") as f:
        f.write("overwritten in /dev/shm")
    with open(shm + ".new", "w") as f:
        f.write("made in /dev/shm")


def read_only_fd():
    fd = os.open("mode.txt", os.O_RDONLY)
    os.fchmod(fd, 0o600)
    os.utime(fd, (1, 1))
    os.close(fd)


def raw_unlink():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(87, b"victim.txt") != 0:  # SYS_unlink on x86-64
        raise OSError(ctypes.get_errno(), "unlink")


attempt("rotate", rotate)
attempt("proc_cwd", proc_cwd)
attempt("dev_fd", dev_fd)
attempt("dev_shm", dev_shm)
attempt("chown", lambda: os.chown("owned.txt", 4321, 4321))
attempt("setxattr", lambda: os.setxattr("data.txt", "user.dlrr", b"tag"))
attempt("read_only_fd", read_only_fd)
if helper:
    attempt("static", lambda: subprocess.run([helper, "static.txt", "static_victim.txt"], check=True))
attempt("raw_unlink", raw_unlink)
print("done")
