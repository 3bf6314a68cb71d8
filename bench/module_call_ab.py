"""Cost of the hook per module call and per step boundary, in one recorded process.

    /usr/bin/python3 bench/module_call_ab.py [--build build] [--modules 64] [--rounds 200]

Runs under the real library (preloaded, recording to a temporary trace, as dlrecord runs
a job).  Per module call: a root holding --modules tiny nn.Modules (a scale of a 4-float
tensor, so that hashing and copying are negligible) runs forward with recording on and off,
in alternating rounds; the difference of the main thread's CPU time per module call is the
hook's cost (pre/post hooks, path, digest dispatch, the dlrr_digest crossing and event).
With --hooks python,native (the default) the rounds cycle through recording off, the Python
module hooks and the native ones (the _dlrr_native extension), so both are measured at the
same moments of the machine's load.  Per step boundary: a DataLoader over a 4-float data set is iterated with recording on
(each batch ends the previous step and begins the next: commit, RNG states, batch value)
and off.  The minimum over rounds is the figure to compare on a loaded machine (other
processes only ever add to a round's CPU time: cache and frequency effects); the median is
printed beside it.  A benchmark, not a test.

--callgrind: instead of CPU time, instructions (valgrind's callgrind, repeatable to the
instruction whatever the machine's load): the job runs under valgrind with instrumentation
off, and turns it on (callgrind_control -i) only around --rounds forwards of the root with
the native hooks recording, then around as many with recording off (twice each, dumped
apart), then with two Python no-op global hooks instead (torch's own dispatch to global hooks,
which any hook of this kind pays); prints instructions per module call, recorded minus plain,
and the part of the hooks' C functions and of the library (dlrr_digest) in it.  Each forward
is a step of its own (the boundary outside the region), as in training.  About two minutes.
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

# The job's setup, shared by both measurements: the hook recording, a root of n tiny modules,
# a DataLoader whose batches end and begin steps, pause() (recording off).
SETUP = textwrap.dedent("""
    import gc, os, statistics, subprocess, sys, time
    import dlrr_hook
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    import torch.nn.modules.module as module_module

    rec = dlrr_hook.current()
    assert rec is not None and rec.torch is not None, "hook not recording"
    n, rounds = int(os.environ["BENCH_MODULES"]), int(os.environ["BENCH_ROUNDS"])

    class Scale(nn.Module):
        def forward(self, x):
            return x * 1.0

    class Root(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Scale() for _ in range(n))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Root()
    x = torch.ones(4, requires_grad=True)
    loader = DataLoader(TensorDataset(torch.ones(100000, 4)), batch_size=1)
    it = iter(loader)
    native_module = rec.modules._native  # the _dlrr_native extension, or None

    def pause():
        rec.active = False
        rec.modules.uninstall()
""")

JOB = SETUP + textwrap.dedent("""
    kinds = [k for k in os.environ["BENCH_HOOKS"].split(",") if k != "native" or native_module is not None]

    def resume(kind):
        rec.modules._native = native_module if kind == "native" else None
        rec.modules.install(module_module)
        assert (rec.modules.native_hooks is not None) == (kind == "native")
        rec.active = True

    next(it)  # step 0 open: module calls below belong to a step
    order = ["off"] + kinds
    calls = {k: [] for k in order}
    steps = {k: [] for k in order}
    for r in range(rounds * len(order) // 2):
        kind = order[r % len(order)]
        if kind == "off":
            pause()
        else:
            pause()
            resume(kind)
        c0 = time.thread_time()
        model(x)
        c1 = time.thread_time()
        for _ in range(8):
            next(it)
        c2 = time.thread_time()
        if r >= 10:
            calls[kind].append((c1 - c0) / (n + 1))
            steps[kind].append((c2 - c1) / 8)
    pause()
    assert rec.error is None, "hook disabled itself: %r" % (rec.error,)
    print(repr({"calls": calls, "steps": steps}))
""")


CALLGRIND_JOB = SETUP + textwrap.dedent("""
    assert native_module is not None, "the _dlrr_native extension does not import"

    def resume():
        rec.modules._native = native_module
        rec.modules.install(module_module)
        rec.active = True

    def ctl(*args):
        subprocess.run(["callgrind_control"] + list(args) + [str(os.getpid())], check=True,
                       stdout=subprocess.DEVNULL)

    next(it)  # step 0 open
    for _ in range(30):  # warm: the ring's and the library's buffers exist
        model(x)
        next(it)
    def nothing(*args):
        return None

    for kind in ("recorded", "plain", "recorded", "plain", "no-op hooks"):
        pause()
        if kind == "recorded":
            resume()
        handles = []
        if kind == "no-op hooks":  # what torch's dispatch to any global hook pair costs
            handles = [module_module.register_module_forward_pre_hook(nothing),
                       module_module.register_module_forward_hook(nothing)]
        model(x)
        gc.collect()
        gc.disable()  # a collection inside one region only would be counted against it
        for _ in range(rounds):
            # One forward a step, as in training: the failure ring and the writer's queue reuse
            # their buffers from a step to the next (a region of forwards in one step would count
            # an allocation per kept tensor). The step boundary itself is left out of the region.
            next(it)
            ctl("-i", "on")
            model(x)
            ctl("-i", "off")
        gc.enable()
        for handle in handles:
            handle.remove()
        ctl("-d", kind.replace(" ", "-"))
    pause()
    assert rec.error is None, "hook disabled itself: %r" % (rec.error,)
""")


def callgrind_totals(path):
    """Total instructions of a callgrind dump, and the inclusive counts of some functions."""
    with open(path) as f:
        text = f.read()
    total = None
    for line in text.splitlines():
        if line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
    return total


def inclusive(path, names):
    """Inclusive instructions of functions whose name contains one of `names` (callgrind_annotate)."""
    p = subprocess.run(["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if not parts or not parts[0].replace(",", "").isdigit():
            continue
        for name in names:
            if name in line and name not in out:
                out[name] = int(parts[0].replace(",", ""))
    return out


def job_env(args, trace, **extra):
    """The job's environment: the build's library preloaded and recording to `trace`, its hook."""
    library = os.path.join(args.build, "lib", "dlrr", "libdlrr.so")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DLRR_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    env.update(BENCH_MODULES=str(args.modules), BENCH_ROUNDS=str(args.rounds), LD_PRELOAD=library,
               DLRR_LIBRARY=library, DLRR_MODE="record", DLRR_TRACE=trace, DLRR_CAPTURE=args.capture,
               PYTHONPATH=os.path.join(args.build, "lib", "dlrr", "python"), **extra)
    return env


def run_callgrind(args):
    tmp = tempfile.mkdtemp(prefix="dlrr-module-cg-")
    try:
        env = job_env(args, os.path.join(tmp, "trace"))
        out = os.path.join(tmp, "callgrind.out")
        p = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out,
                            PY, "-c", CALLGRIND_JOB], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("job failed:\n" + p.stderr[-3000:])
        dumps = sorted(f for f in os.listdir(tmp) if f.startswith("callgrind.out.") and f[-1].isdigit())
        if len(dumps) != 5:
            sys.exit("expected 5 callgrind dumps, found %r" % dumps)
        calls = args.rounds * (args.modules + 1)
        totals = [callgrind_totals(os.path.join(tmp, f)) for f in dumps]
        parts = inclusive(os.path.join(tmp, dumps[0]), ("ModuleHooks.cc:(anonymous namespace)::post(",
                                                         "ModuleHooks.cc:(anonymous namespace)::pre(",
                                                         "CApi.cc:dlrr_digest "))
    finally:
        if args.keep_dumps:
            os.makedirs(args.keep_dumps, exist_ok=True)
            for f in os.listdir(tmp):
                if f.startswith("callgrind.out."):
                    shutil.copy(os.path.join(tmp, f), args.keep_dumps)
        shutil.rmtree(tmp, ignore_errors=True)
    print("capture %s, %d modules, %d forwards of the root (%d module calls) per region" % (
        args.capture, args.modules, args.rounds, calls))
    for i in (0, 2):
        print("instructions per module call: recorded %.0f, plain %.0f, hook %.0f" % (
            totals[i] / calls, totals[i + 1] / calls, (totals[i] - totals[i + 1]) / calls))
    names = {"ModuleHooks.cc:(anonymous namespace)::pre(": "native pre hook",
             "ModuleHooks.cc:(anonymous namespace)::post(": "native post hook (incl. dlrr_digest)",
             "CApi.cc:dlrr_digest ": "dlrr_digest (the library)"}
    print("  %-40s %8.0f per module call (two Python no-op global hooks, minus plain: torch's dispatch "
          "to global hooks, the floor of any hook of this kind)" % ("no-op hooks", (totals[4] - totals[3]) / calls))
    for key, label in names.items():
        if key in parts:
            print("  %-40s %8.0f per module call (first recorded region)" % (label, parts[key] / calls))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--capture", choices=("minimal", "default", "full"), default="default")
    ap.add_argument("--modules", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--hooks", default="python,native",
                    help="which module hooks to measure, in alternate rounds with recording off: python, native "
                         "(the _dlrr_native extension; left out when it does not import) or both")
    ap.add_argument("--callgrind", action="store_true",
                    help="instruction counts under callgrind instead of CPU time (native hooks; --rounds "
                         "forwards per region, default 20 here)")
    ap.add_argument("--keep-dumps", metavar="DIR",
                    help="with --callgrind: copy the five callgrind dumps (recorded, plain, recorded, plain, "
                         "no-op hooks) into DIR, for callgrind_annotate")
    args = ap.parse_args()
    if args.keep_dumps and not args.callgrind:
        ap.error("--keep-dumps needs --callgrind")
    if args.callgrind:
        if args.rounds == ap.get_default("rounds"):
            args.rounds = 20
        return run_callgrind(args)
    tmp = tempfile.mkdtemp(prefix="dlrr-module-ab-")
    try:
        env = job_env(args, tmp, BENCH_HOOKS=args.hooks)
        p = subprocess.run([PY, "-c", JOB], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("job failed:\n" + p.stderr[-3000:])
        r = eval(p.stdout.strip().splitlines()[-1])  # our own repr of floats and lists
    finally:
        if args.keep_dumps:
            os.makedirs(args.keep_dumps, exist_ok=True)
            for f in os.listdir(tmp):
                if f.startswith("callgrind.out."):
                    shutil.copy(os.path.join(tmp, f), args.keep_dumps)
        shutil.rmtree(tmp, ignore_errors=True)
    print("capture %s, %d modules, load average %.2f (main thread CPU time of rounds: min, median)"
          % (args.capture, args.modules, os.getloadavg()[0]))
    for what, unit in (("calls", "module call"), ("steps", "step boundary")):
        for name, stat in (("min", min), ("median", statistics.median)):
            a = stat(r[what]["off"])
            line = "per %-14s %-6s plain %8.2f us" % (unit, name, a * 1e6)
            for kind in r[what]:
                if kind != "off":
                    b = stat(r[what][kind])
                    line += "  %s: recorded %8.2f hook %8.2f us" % (kind, b * 1e6, (b - a) * 1e6)
            print(line)
    if "native" in args.hooks and "native" not in r["calls"]:
        print("native hooks not measured: the _dlrr_native extension does not import in this build")

if __name__ == "__main__":
    sys.exit(main())
