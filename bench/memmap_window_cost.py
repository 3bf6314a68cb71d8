#!/usr/bin/env python3
"""CPU per np.memmap window in a recorded process, by wrapper (issue 33, cut 1 and its C pass).

    /usr/bin/python3 bench/memmap_window_cost.py [--build build] [--rounds 30] [--slices 4096]

Runs itself under dlrecord (the real library and hook), writes a 512 KB uint16 token file and,
in shuffled rounds, slices `--slices` 33-token windows (tokens[i:i+33], nanoGPT's get_batch)
at the same pseudo-random starts with memmap.__getitem__ set to each variant in turn:

  plain         numpy's own __getitem__ (no hook)
  python        FileCapture's Python wrapper and _used (the path before MemmapRanges)
  python-paused the same with this thread marked as inside a DataLoader fetch (early return)
  c-used        the Python wrapper calling MemmapRanges.used (only _used in C)
  c             MemmapRanges itself as __getitem__ (the wrapper and _used in C)
  c-paused      the same, paused
  c-nolib       MemmapRanges calling libc's abs() instead of dlrr_file_range: what is left of
                `c` without the library's own work (FileLog::range), which this pass leaves

Prints, per variant, the median CPU per slice (time.thread_time over the round) with the
min..max over rounds, and the median of the per-round difference with `plain`: the wrapper's
cost per window. Every reported variant really calls dlrr_file_range (the library records the
ranges). No timing assertion: a measure.
"""

import argparse
import importlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

VARIANTS = ("plain", "python", "python-paused", "c-used", "c", "c-paused", "c-nolib")


def python_with_c_used(original, rec, paused, used):
    import threading
    get_ident = threading.get_ident

    def __getitem__(self, index):
        result = original(self, index)
        if rec.active and not (paused and get_ident() in paused):
            try:
                used(self, index, result)
            except Exception:
                pass
        return result
    return __getitem__


def inner(args):
    import ctypes
    import threading
    import types

    import numpy as np
    importlib.import_module("torch")  # the hook's file capture starts with torch

    import dlrr_hook
    from dlrr_hook.files import FileCapture
    from dlrr_hook.patching import original_of

    session = dlrr_hook.current()
    if session is None or not session.active:
        sys.exit("memmap_window_cost: not running under dlrecord (no recording hook)")
    installed = np.memmap.__dict__["__getitem__"]
    original = original_of(installed)
    capture = FileCapture(session, session.lib)
    wrappers = {"plain": original, "python": capture.python_getitem(original, np)}
    native = capture.native_getitem(original, np)
    if native is None:
        sys.exit("memmap_window_cost: no _dlrr_native.MemmapRanges in this build")
    wrappers["c"] = native
    wrappers["c-used"] = python_with_c_used(original, session, capture._paused, native.used)
    # abs(path) with three more register arguments, ignored (SysV): a C call doing nothing
    no_lib = FileCapture(session, types.SimpleNamespace(dlrr_file_range=ctypes.CDLL(None).abs))
    wrappers["c-nolib"] = no_lib.native_getitem(original, np)
    wrappers["python-paused"] = wrappers["python"]
    wrappers["c-paused"] = wrappers["c"]

    tokens = np.memmap(args.path, dtype=np.uint16, mode="r")
    rng = random.Random(1)
    starts = [rng.randrange(len(tokens) - 33) for _ in range(args.slices)]
    me = threading.get_ident()
    per_slice = {v: [] for v in VARIANTS}
    order = list(VARIANTS)
    try:
        for _ in range(args.rounds):
            rng.shuffle(order)
            for variant in order:
                np.memmap.__getitem__ = wrappers[variant]
                if variant.endswith("-paused"):
                    capture._paused[me] = 1
                for i in starts[:64]:  # warm: the facts of the map, the type's cache
                    tokens[i:i + 33]
                t0 = time.thread_time()
                for i in starts:
                    tokens[i:i + 33]
                per_slice[variant].append((time.thread_time() - t0) / len(starts) * 1e6)
                capture._paused.pop(me, None)
    finally:
        np.memmap.__getitem__ = installed
    plain = per_slice["plain"]
    print("CPU per slice, us: median (min..max) over %d rounds of %d slices; cost = median of the "
          "per-round difference with plain" % (args.rounds, args.slices))
    for variant in VARIANTS:
        xs = per_slice[variant]
        cost = statistics.median(x - p for x, p in zip(xs, plain))
        print("  %-14s %6.2f (%.2f..%.2f)  cost %+.2f" % (variant, statistics.median(xs), min(xs), max(xs), cost))
    print("  python path calls from MemmapRanges: %d" % native.python_path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--slices", type=int, default=4096)
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(args)
        return
    import numpy as np
    with tempfile.TemporaryDirectory(prefix="dlrr-memmap-bench-") as tmp:
        path = os.path.join(tmp, "tokens.bin")
        np.random.RandomState(0).randint(0, 50000, size=256 * 1024, dtype=np.uint16).tofile(path)
        load = os.getloadavg()[0]
        subprocess.run([os.path.join(args.build, "bin", "dlrecord"), "-q", "-o", os.path.join(tmp, "trace"), "--",
                        sys.executable, os.path.abspath(__file__), "--inner", "--path", path, "--rounds",
                        str(args.rounds), "--slices", str(args.slices)], check=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
        print("load average %.1f -> %.1f" % (load, os.getloadavg()[0]))


if __name__ == "__main__":
    main()
