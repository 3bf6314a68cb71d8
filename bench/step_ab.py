"""Per-step recording overhead measured in one process, A/B by blocks of steps.

    /usr/bin/python3 bench/step_ab.py [--build build] [--capture default] [--workers 0]
                                      [--epochs 6] [--block 8] [--lib real|null]

On a shared machine whole-run wall times vary by tens of percent from run to run
(bench/record_overhead.py shows the spread); this measures the recorder's per-step cost
where that noise cancels: examples/train.py's model, data set and loop run in one process
under the real library (preloaded and recording to a temporary trace, as dlrecord runs a
job), and the hook is switched on and off for alternate blocks of --block steps, so drift
hits both sides alike.  A recorded step is timed whole: the DataLoader delivery (which ends
the previous step, the commit, and records the RNG states and the batch), forward with
module-output digests, backward with the loss and gradient digests, optimizer step with
parameter digests.  Clocks: wall (perf_counter) and the main thread's CPU time.  The writer
thread's own work (compression, writes) shows in wall time only, where it competes for a
core.  --lib null swaps in a do-nothing build of the C API: the Python hook alone.

Prints median ms/step of each side, the difference and the ratio, and per clock the ratio and
difference of adjacent blocks (the main thread's CPU pairs are the figure to trust on a loaded
machine), with the spread of the
block medians.  A benchmark, not a test.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK_DIR = os.path.join(ROOT, "interpose", "python")

JOB = textwrap.dedent("""
    import ctypes, os, statistics, sys, time
    sys.path.insert(0, os.environ["BENCH_HOOK_DIR"])
    sys.path.insert(0, os.environ["BENCH_EXAMPLES"])
    import dlrr_hook
    from dlrr_hook import native
    import torch
    from torch import nn
    from torch.utils.data import DataLoader
    import torch.nn.modules.module as module_module
    import train

    if os.environ["BENCH_LIB"] == "null":
        lib = native.bind(ctypes.CDLL(os.environ["BENCH_NULL_LIB"]))
        dlrr_hook.uninstall()
        rec = dlrr_hook.install(lib=lib)
    else:
        rec = dlrr_hook.current()
    assert rec is not None and rec.torch is not None, "hook not recording"
    if os.environ["BENCH_HOOKS"] == "python":
        rec.modules._native = None  # the Python module hooks even where _dlrr_native imports
    torch.manual_seed(8)
    loader = DataLoader(train.NpyImageDataset(os.environ["BENCH_DATA"], 2048, augment=True), batch_size=32,
                        shuffle=True, num_workers=int(os.environ["BENCH_WORKERS"]))
    model = train.SmallCNN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    block = int(os.environ["BENCH_BLOCK"])

    def pause():
        rec.active = False
        rec.modules.uninstall()

    def resume():
        rec.modules.install(module_module)
        rec.active = True
        hooks.add("native" if rec.modules.native_hooks is not None else "python")

    hooks = set()

    wall, cpu = {True: [], False: []}, {True: [], False: []}
    blocks = {True: [], False: []}
    cpu_blocks = {True: [], False: []}
    on, count, current, current_cpu = False, 0, [], []
    pause()
    for epoch in range(int(os.environ["BENCH_EPOCHS"])):
        it = iter(loader)
        while True:
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                x, y = next(it)
            except StopIteration:
                break
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            loss.item()
            w1, c1 = time.perf_counter(), time.thread_time()
            if epoch > 0:  # epoch 0: warm-up (caches, allocator, first writes)
                wall[on].append(w1 - w0)
                cpu[on].append(c1 - c0)
                current.append(w1 - w0)
                current_cpu.append(c1 - c0)
            count += 1
            if count % block == 0:
                if current:
                    blocks[on].append(statistics.median(current))
                    cpu_blocks[on].append(statistics.median(current_cpu))
                current, current_cpu = [], []
                if on:
                    pause()
                else:
                    resume()
                on = not on
    pause()
    assert rec.error is None, "hook disabled itself: %r" % (rec.error,)
    print(repr({"wall": wall, "cpu": cpu, "blocks": blocks, "cpu_blocks": cpu_blocks, "hooks": sorted(hooks)}))
""")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--capture", choices=("minimal", "default", "full"), default="default")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=6, help="epochs of 64 steps; the first is warm-up")
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--lib", choices=("real", "null"), default="real")
    ap.add_argument("--hooks", choices=("native", "python"), default="native",
                    help="module hooks: the _dlrr_native extension where it imports (the default), or Python's")
    ap.add_argument("--data", help="dataset of examples/prepare_data.py (default: a clean one, made here)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrr-step-ab-")
    try:
        data = args.data
        if data is None:
            data = os.path.join(tmp, "data")
            subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", data,
                            "--corrupt-index", "-1"], check=True, stdout=subprocess.DEVNULL)
        library = os.path.join(args.build, "lib", "dlrr", "libdlrr.so")
        hook_dir = os.path.join(args.build, "lib", "dlrr", "python")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("DLRR_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
        env.update(BENCH_LIB=args.lib, BENCH_HOOK_DIR=hook_dir, BENCH_EXAMPLES=os.path.join(ROOT, "examples"),
                   BENCH_DATA=data, BENCH_WORKERS=str(args.workers), BENCH_EPOCHS=str(args.epochs),
                   BENCH_BLOCK=str(args.block), BENCH_HOOKS=args.hooks)
        if args.lib == "null":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import python_hook_overhead  # builds the do-nothing library from dlrr.h
            env.update(BENCH_NULL_LIB=python_hook_overhead.build_null_library(tmp), BENCH_CAPTURE=args.capture)
        else:
            trace = os.path.join(tmp, "trace")
            os.mkdir(trace)
            env.update(LD_PRELOAD=library, DLRR_LIBRARY=library, DLRR_MODE="record", DLRR_TRACE=trace,
                       DLRR_CAPTURE=args.capture, PYTHONPATH=hook_dir)
        p = subprocess.run([PY, "-c", JOB], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("job failed:\n" + p.stderr[-3000:])
        r = eval(p.stdout.strip().splitlines()[-1])  # our own repr of floats and lists
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("step A/B, lib %s, capture %s, %s module hooks, workers %d, blocks of %d steps, %d/%d steps "
          "recorded/plain; load average %.2f" % (args.lib, args.capture, "/".join(r["hooks"]), args.workers,
                                                 args.block, len(r["wall"][True]), len(r["wall"][False]),
                                                 os.getloadavg()[0]))
    print("%-6s %14s %14s %12s %8s" % ("clock", "plain ms/step", "rec ms/step", "+ms/step", "ratio"))
    for clock in ("wall", "cpu"):
        a, b = statistics.median(r[clock][False]), statistics.median(r[clock][True])
        print("%-6s %14.3f %14.3f %12.3f %8.3f" % (clock, a * 1e3, b * 1e3, (b - a) * 1e3, b / a))
    for clock, key in (("wall", "blocks"), ("cpu", "cpu_blocks")):
        pairs = list(zip(r[key][False], r[key][True]))
        ratios = sorted(b / a for a, b in pairs)
        diffs = sorted((b - a) * 1e3 for a, b in pairs)
        if ratios:
            q = lambda v, f: v[min(len(v) - 1, int(f * len(v)))]  # noqa: E731
            print("%s ratio of adjacent block medians: median %.3f, p10 %.3f, p90 %.3f; +ms/step median %.3f "
                  "(%d pairs)" % (clock, statistics.median(ratios), q(ratios, 0.1), q(ratios, 0.9),
                                  statistics.median(diffs), len(ratios)))


if __name__ == "__main__":
    sys.exit(main())
