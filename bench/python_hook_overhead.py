#!/usr/bin/python3
"""Per-step cost of the Python hook on a small CNN, as a ratio against the same job without it.

    /usr/bin/python3 bench/python_hook_overhead.py [--batch 32] [--blocks 12] [--capture default]

Measured in-process, A/B per step: consecutive training steps alternate between the hook
recording and the hook paused (wrappers fall straight through, module hooks removed), so
drift of a shared machine hits both sides alike and the hook's caches stay warm as in a
real run.  By default the main thread's CPU time is measured (--clock wall for elapsed).
Two libraries behind the hook:
  null   a no-op build of the C API (compiled here from dlrr.h with cc): what the Python
         side costs by itself
  real   the real libdlrr.so, preloaded and recording to a temporary trace (as dlrecord
         runs a job); with --clock cpu the native writer thread's work is not counted
The job: SmallCNN of examples/train.py (conv-relu-pool-conv-relu-fc-dropout-fc), 3x16x16
inputs, Adam, batches from an in-memory DataLoader (no workers: loading noise stays out).
Reported: median ms/step of each side and hooked/plain.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK_DIR = os.path.join(REPO, "pyhook", "python")
HEADER = os.path.join(REPO, "interpose", "include", "dlrr", "dlrr.h")

JOB = textwrap.dedent("""
    import os, statistics, sys, time
    sys.path.insert(0, os.environ["BENCH_HOOK_DIR"])
    import ctypes
    import dlrr_hook
    from dlrr_hook import native
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if os.environ["BENCH_LIB"] == "null":
        lib = native.bind(ctypes.CDLL(os.environ["BENCH_NULL_LIB"]))
    else:
        lib = native.load()
    assert lib is not None and lib.dlrr_mode() == native.MODE_RECORD, "library not recording"
    dlrr_hook.uninstall()  # sitecustomize may have installed it: install ours below

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, kernel_size=3, padding=1)
            self.pool = nn.MaxPool2d(2)
            self.conv2 = nn.Conv2d(8, 16, kernel_size=3, padding=1)
            self.fc1 = nn.Linear(16 * 8 * 8, 64)
            self.dropout = nn.Dropout(0.2)
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x):
            x = self.pool(torch.relu(self.conv1(x)))
            x = torch.relu(self.conv2(x))
            x = torch.flatten(x, 1)
            x = self.dropout(torch.relu(self.fc1(x)))
            return self.fc2(x)

    torch.manual_seed(0)
    steps, blocks = int(os.environ["BENCH_STEPS"]), int(os.environ["BENCH_BLOCKS"])
    batch = int(os.environ["BENCH_BATCH"])
    data = TensorDataset(torch.randn(batch * steps, 3, 16, 16), torch.randint(0, 10, (batch * steps,)))
    loader = DataLoader(data, batch_size=batch, shuffle=True)
    model = SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()

    clock = time.thread_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter

    import torch.nn.modules.module as module_module
    rec = dlrr_hook.install(lib=lib)
    assert rec is not None and rec.torch is not None

    def pause():
        rec.active = False
        rec.modules.uninstall()

    def resume():
        rec.modules.install(module_module)
        rec.active = True

    # Steps alternate: even steps plain (hook paused: wrappers fall through, module hooks
    # removed), odd steps recorded.  Pausing keeps the hook's caches warm, as in a real run.
    plain, hooked = [], []
    for block in range(blocks + 1):
        it = iter(loader)
        for i, (x, y) in enumerate(it):
            on = i % 2 == 1
            t0 = clock()
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            loss.item()
            t1 = clock()
            if block:  # block 0: warm-up
                (hooked if on else plain).append(t1 - t0)
            if on:
                pause()
            else:
                resume()
        pause()
    assert rec.error is None, "hook disabled itself: %r" % (rec.error,)
    print("%.6f %.6f" % (statistics.median(plain), statistics.median(hooked)))
""")


def build_null_library(tmp):
    """A no-op libdlrr with the same exports, compiled from the header's prototypes."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with open(HEADER) as f:
        text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
    bodies = []
    for ret, name, args in re.findall(r"DLRR_API\s+([\w\s\*]+?)\s*(dlrr_\w+)\s*\(([^)]*)\)\s*;", text):
        ret = ret.strip()
        if name == "dlrr_mode":
            value = "return 1;"
        elif name == "dlrr_capture_level":
            value = "return capture_level;"
        elif ret == "void":
            value = ""
        elif ret.replace(" ", "") == "constchar*":
            value = 'return "";'
        else:
            value = "return 0;"
        bodies.append("%s %s(%s) { %s }" % (ret, name, args, value))
    source = os.path.join(tmp, "null.c")
    with open(source, "w") as f:
        f.write('#include <stdlib.h>\n#include "dlrr/dlrr.h"\n')
        f.write("static int capture_level = 1;\n")
        f.write("__attribute__((constructor)) static void init(void) {\n"
                "  const char* c = getenv(\"BENCH_CAPTURE\");\n"
                "  if (c) capture_level = c[0] == 'm' ? 0 : c[0] == 'f' ? 2 : 1; }\n")
        f.write("\n".join(bodies) + "\n")
    out = os.path.join(tmp, "libdlrr_null.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", os.path.join(REPO, "interpose", "include"),
                    source, "-o", out], check=True)
    return out


def real_library():
    path = os.environ.get("DLRR_TEST_LIBRARY") or os.path.join(REPO, "build", "lib", "dlrr", "libdlrr.so")
    return path if os.path.exists(path) else None


def run(which, args, tmp, library):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DLRR_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env.update(BENCH_LIB=which, BENCH_STEPS=str(args.steps), BENCH_BLOCKS=str(args.blocks),
               BENCH_HOOK_DIR=HOOK_DIR, BENCH_CLOCK=args.clock, BENCH_BATCH=str(args.batch))
    if which == "null":
        env.update(BENCH_NULL_LIB=library, BENCH_CAPTURE=args.capture)
    else:
        trace = os.path.join(tmp, "trace")
        os.mkdir(trace)
        env.update(LD_PRELOAD=library, DLRR_LIBRARY=library, DLRR_MODE="record", DLRR_TRACE=trace,
                   DLRR_CAPTURE=args.capture, PYTHONPATH=HOOK_DIR)
    result = subprocess.run([sys.executable, "-c", JOB], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("%s run failed:\n%s" % (which, result.stderr))
    plain, hooked = (float(v) for v in result.stdout.split()[-2:])
    return plain, hooked


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps per block (half of them hooked)")
    parser.add_argument("--blocks", type=int, default=12, help="blocks (one DataLoader pass each)")
    parser.add_argument("--capture", choices=("minimal", "default", "full"), default="default")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu",
                        help="cpu: the main thread's CPU time (robust on a shared machine; the "
                             "native writer thread's work is then not counted); wall: elapsed")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    print("python hook overhead, SmallCNN batch %d, %d blocks of %d alternating steps, capture=%s, "
          "clock=%s" % (args.batch, args.blocks, args.steps, args.capture, args.clock))
    print("%-5s %15s %16s %10s %8s" % ("lib", "plain ms/step", "hooked ms/step", "+ms/step", "ratio"))
    with tempfile.TemporaryDirectory() as tmp:
        for which, library in (("null", build_null_library(tmp)), ("real", real_library())):
            if library is None:
                print("%-5s (not available)" % which)
                continue
            plain, hooked = run(which, args, tmp, library)
            print("%-5s %15.3f %16.3f %10.3f %8.3f"
                  % (which, plain * 1e3, hooked * 1e3, (hooked - plain) * 1e3, hooked / plain))


if __name__ == "__main__":
    main()
