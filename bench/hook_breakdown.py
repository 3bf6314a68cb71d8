"""Where the recording time of a real job goes, per step, by part of the Python hook.

    /usr/bin/python3 bench/hook_breakdown.py [--build build] [--capture default]
                                             [--job cnn|example] [--data DIR]

Runs examples/train.py under dlrecord (the real library, the real hook) with timers wrapped
around the hook's parts, and prints, per training step: calls, inclusive and self time
(wall clock, perf_counter) of each part, the main thread's CPU time and the CPU time of the
process's other threads (the native writer thread: compression and writes).  Parts:

  deliver batch         DataLoader batch reached the loop: ends the previous step (commit),
                        begins the next, RNG snapshot + write, batch value tree
    dlrr_step_end       the commit point: waits until the step is in the kernel
    rng snapshot        torch.get_rng_state, numpy and random state serialisation
    rng write           dlrr_rng_states (hash, copy, event per generator; one crossing;
                        dlrr_rng_states_queued for an optimizer-counted step: no writer wake)
    rng snapshot + write  both, back to back at a delivery (RngCapture.write_snapshot: in C,
                        _dlrr_native.RngStates, when it can; the two above otherwise)
    rng step snapshot   an optimizer-counted step's states, taken where the previous step ended
    rng step write      and written as it begins (RngCapture.step_snapshot / write_step: in C,
                        _dlrr_native.RngSnapshot, when it can; rng snapshot / rng write otherwise)
    batch values        dlrr_val_* calls (tensor bytes hashed and copied into blobs)
  module hooks          global forward pre/post hooks (stack, paths, output digests)
  before backward       loss digest and .item()
  after backward        gradient digests
  after optimizer step  parameter digests
  memmap __getitem__    np.memmap.__getitem__ whole: numpy's own and the hook's wrapper (issue 33)
    memmap ranges       its Python _used (with the native MemmapRanges: the cases it leaves)
      dlrr_file_range   the library's call through ctypes (MemmapRanges calls it itself, untimed)
  digest: KIND          TensorMarshal.prepare (host copy when needed) + dlrr_digest, by kind
    dlrr_digest         the native part: hash, NaN/Inf/min/max scan, ring copy, event
    dlrr_digest_many    gradients and parameters, one crossing each (the Python loop's; the
                        native TensorListDigest calls the library itself: its digests count
                        in "after backward" / "after optimizer step" self time)

Wall time includes waiting (the commit) and being preempted (on a loaded machine, e.g. by
the writer thread it just woke); CPU time is the hook's own work on the main thread.  The
wrappers cost a microsecond or two per call themselves (thread_time is a system call);
figures are for comparing parts, not for the overall ratio (bench/record_overhead.py).
"""
import argparse
import statistics
import json
import os
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Timers:
    """Nesting-aware timers: inclusive and self (children subtracted) time per name, on two
    clocks: wall (perf_counter) and the calling thread's CPU time (thread_time)."""

    def __init__(self):
        self.incl = {}
        self.self_ = {}
        self.incl_cpu = {}
        self.self_cpu = {}
        self.calls = {}
        self.parent = {}
        self._stack = []

    def wrap(self, name, fn):
        stack = self._stack
        incl, self_, calls, parent = self.incl, self.self_, self.calls, self.parent
        incl_cpu, self_cpu = self.incl_cpu, self.self_cpu
        clock, cpu_clock = time.perf_counter, time.thread_time

        def timed(*args, **kwargs):
            key = name(*args) if callable(name) else name
            if stack and stack[-1][0] == key:  # recursion (value tree): time the outermost
                return fn(*args, **kwargs)
            if key not in parent:
                parent[key] = stack[-1][0] if stack else None
            frame = [key, 0.0, 0.0]
            stack.append(frame)
            c0 = cpu_clock()
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = clock() - t0
                dc = cpu_clock() - c0
                stack.pop()
                incl[key] = incl.get(key, 0.0) + dt
                self_[key] = self_.get(key, 0.0) + dt - frame[1]
                incl_cpu[key] = incl_cpu.get(key, 0.0) + dc
                self_cpu[key] = self_cpu.get(key, 0.0) + dc - frame[2]
                calls[key] = calls.get(key, 0) + 1
                if stack:
                    stack[-1][1] += dt
                    stack[-1][2] += dc
        return timed


DIGEST_KINDS = {0: "module output", 1: "gradient", 2: "parameter", 3: "loss", 4: "batch"}


def wrap_parts(t, rec, lib, torch, rng_module, module_module, files_module):
    """Timers around each part of the hook (they cost a few us each)."""
    for fn in ("dlrr_step_end", "dlrr_step_end_deferred", "dlrr_step_begin", "dlrr_batch_begin", "dlrr_batch_end",
               "dlrr_rng_state", "dlrr_rng_states", "dlrr_rng_states_queued"):
        if hasattr(lib, fn):  # dlrr_rng_states: since issue 16's second pass; _queued: issue 33
            setattr(lib, fn, t.wrap(fn, getattr(lib, fn)))
    rec.rng._write = lib.dlrr_rng_state
    if getattr(rec.rng, "_write_many", None) is not None:
        rec.rng._write_many = lib.dlrr_rng_states
    if getattr(rec.rng, "_write_queued", None) is not None:
        rec.rng._write_queued = getattr(lib, "dlrr_rng_states_queued", lib.dlrr_rng_states)
    rec.loaders._deliver = t.wrap("deliver batch", rec.loaders._deliver)
    rec.rng.snapshot = t.wrap("rng snapshot", rec.rng.snapshot)
    rec.rng.write = t.wrap("rng write", rec.rng.write)
    if hasattr(rec.rng, "write_snapshot"):  # both in one, in C (RngStates) when it can: issue 16
        rec.rng.write_snapshot = t.wrap("rng snapshot + write", rec.rng.write_snapshot)
    if hasattr(rec.rng, "step_snapshot"):  # optimizer-counted steps, in C (RngSnapshot) when it can: issue 33
        rec.rng.step_snapshot = t.wrap("rng step snapshot", rec.rng.step_snapshot)
        rec.rng.write_step = t.wrap("rng step write", rec.rng.write_step)
    torch.get_rng_state = t.wrap("torch.get_rng_state", torch.get_rng_state)
    rng_module.PythonGlobalRng.snapshot = t.wrap("random state bytes", rng_module.PythonGlobalRng.snapshot)
    rng_module.NumpyGlobalRng.snapshot = t.wrap("numpy state bytes",
                                                rng_module.NumpyGlobalRng.snapshot)
    rec.values.write = t.wrap("batch values", rec.values.write)
    tr = rec.training
    tr._before_backward = t.wrap("before backward", tr._before_backward)
    tr._after_backward = t.wrap("after backward", tr._after_backward)
    tr._before_step = t.wrap("before optimizer step", tr._before_step)
    tr._after_step = t.wrap("after optimizer step", tr._after_step)
    if hasattr(rec, "_digest"):  # the per-tensor Python path of older hooks
        rec._digest = t.wrap(lambda kind, *a: "digest: " + DIGEST_KINDS.get(kind, str(kind)),
                             rec._digest)
    if hasattr(rec, "_prepare"):
        rec._prepare = t.wrap("prepare (host tensor)", rec._prepare)
    rec._digest_fn = t.wrap("dlrr_digest", rec._digest_fn)
    if getattr(rec, "_batch", None) is not None:  # gradients and parameters: one crossing each
        rec._batch._many = t.wrap("dlrr_digest_many", rec._batch._many)
    files_module.FileCapture._used = t.wrap("memmap ranges", files_module.FileCapture._used)
    memmap = getattr(sys.modules.get("numpy"), "memmap", None)
    if memmap is not None:  # the hook's wrapper whole: MemmapRanges (C) calls no timed part
        memmap.__getitem__ = t.wrap("memmap __getitem__", memmap.__dict__["__getitem__"])
    if hasattr(lib, "dlrr_file_range"):
        lib.dlrr_file_range = t.wrap("dlrr_file_range", lib.dlrr_file_range)
    for name in ("begin_step", "end_step"):  # optimizer-counted steps (no DataLoader) end here
        if hasattr(rec, name):
            setattr(rec, name, t.wrap(name.replace("_", " "), getattr(rec, name)))
    for hooks in (module_module._global_forward_pre_hooks, module_module._global_forward_hooks):
        for key, hook in list(hooks.items()):
            hooks[key] = t.wrap("module hooks", hook)


def inner(argv):
    """In the recorded process: instrument the hook, then run the training script."""
    import atexit
    import runpy
    import dlrr_hook
    import torch  # triggers the hook's torch patches, so its parts exist below
    from dlrr_hook import rng as rng_module
    from dlrr_hook import files as files_module
    import torch.nn.modules.module as module_module

    rec = dlrr_hook.current()
    if rec is None or rec.marshal is None:
        sys.exit("hook_breakdown: not running under dlrecord (no recording hook)")
    t = Timers()
    lib = rec.lib
    samples = {}  # --parts deliver / digests: CPU us of each call, for min / median / p90
    cpu_clock = time.thread_time

    def sampled(key, fn, wall=False):
        calls = samples[key] = []
        walls = None
        if wall:
            walls = samples[key + " (wall)"] = []
        clock = time.perf_counter

        def timed(*args):
            c0 = cpu_clock()
            w0 = clock() if wall else 0.0
            try:
                return fn(*args)
            finally:
                calls.append((cpu_clock() - c0) * 1e6)
                if wall:
                    walls.append((clock() - w0) * 1e6)
        return timed
    parts = os.environ.get("BENCH_PARTS")
    if parts == "deliver":  # the step boundary whole, and its commit
        rec.loaders._deliver = sampled("deliver batch", rec.loaders._deliver, wall=True)
        lib.dlrr_step_end = sampled("dlrr_step_end (commit)", lib.dlrr_step_end)
        if hasattr(lib, "dlrr_step_end_deferred"):  # the commit overlaps the delivery's rest
            lib.dlrr_step_end_deferred = sampled("dlrr_step_end_deferred (queues the commit)",
                                                 lib.dlrr_step_end_deferred)
            lib.dlrr_batch_end = sampled("dlrr_batch_end (waits for the commit)", lib.dlrr_batch_end,
                                         wall=True)
    elif parts == "fixed":  # issue 16's fixed cost per step: the delivery and the loss, two timers only
        rec.loaders._deliver = sampled("deliver batch", rec.loaders._deliver, wall=True)
        rec.training._before_backward = sampled("before backward (loss digest)",
                                                rec.training._before_backward)
    elif parts == "memmap":  # np.memmap.__getitem__ whole (numpy's and the hook's), no timer inside
        memmap = sys.modules["numpy"].memmap
        memmap.__getitem__ = sampled("memmap __getitem__", memmap.__dict__["__getitem__"])
    elif parts == "digests":  # the gradient and parameter digests whole, no timer inside them
        tr = rec.training
        tr._after_backward = sampled("after backward", tr._after_backward)
        tr._after_step = sampled("after optimizer step", tr._after_step)
    else:
        wrap_parts(t, rec, lib, torch, rng_module, module_module, files_module)

    out_path = os.environ["BENCH_BREAKDOWN_OUT"]
    t_start = [None]
    if os.environ.get("BENCH_NO_LOADER"):  # no delivery to start the loop's clock: start it now
        t_start[0] = (time.perf_counter(), time.thread_time(), time.process_time())
    original_deliver = rec.loaders._deliver

    def deliver(info, data):
        if t_start[0] is None:
            t_start[0] = (time.perf_counter(), time.thread_time(), time.process_time())
        return original_deliver(info, data)
    rec.loaders._deliver = deliver

    def report():
        end = (time.perf_counter(), time.thread_time(), time.process_time())
        start = t_start[0] or end
        with open(out_path, "w") as f:
            json.dump({"steps": rec.steps.steps_begun, "incl": t.incl, "self": t.self_,
                       "incl_cpu": t.incl_cpu, "self_cpu": t.self_cpu,
                       "calls": t.calls, "parent": t.parent, "samples": samples,
                       "loop_wall": end[0] - start[0], "main_cpu": end[1] - start[1],
                       "other_threads_cpu": (end[2] - start[2]) - (end[1] - start[1])}, f)
    atexit.register(report)
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--inner":
        return inner(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--capture", default="default", choices=("minimal", "default", "full"))
    ap.add_argument("--job", default="cnn", choices=("cnn", "example", "shape-lm", "shape-cnn"),
                    help="shape-lm, shape-cnn: bench/shape_job.py's shapes (issue 33), 300 steps")
    ap.add_argument("--steps", type=int, default=300, help="steps of the shape-* jobs")
    ap.add_argument("--data", help="dataset of prepare_data.py (default: a clean one, made here)")
    ap.add_argument("--parts", choices=("all", "deliver", "fixed", "digests", "memmap"), default="all",
                    help="deliver: one timer around the DataLoader's batch delivery only (the step "
                         "boundary without the other timers' cost); fixed: that one and one around the "
                         "hook before backward() (the loss digest), and their sum per step (issue 16's "
                         "fixed cost); digests: one around the gradient "
                         "digests after backward and one around the parameter digests after the "
                         "optimizer step (their Python loop or the native TensorListDigest alike); "
                         "memmap: one around np.memmap.__getitem__ (numpy's and the hook's, the Python "
                         "wrapper or the native MemmapRanges alike)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlrr-breakdown-") as tmp:
        data = args.data or os.path.join(tmp, "data")
        if data is None and not args.job.startswith("shape-"):
            data = os.path.join(tmp, "data")
            subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", data,
                            "--corrupt-index", "-1"], check=True, stdout=subprocess.DEVNULL)
        job = [os.path.join(ROOT, "examples", "train.py"), "--data", data, "--seed", "8",
               "--no-steps-print"]
        if args.job == "cnn":
            job += ["--epochs", "3", "--workers", "0"]
        out = os.path.join(tmp, "breakdown.json")
        env = dict(os.environ, BENCH_BREAKDOWN_OUT=out, BENCH_PARTS=args.parts)
        if args.job.startswith("shape-"):
            shape_job = os.path.join(ROOT, "bench", "shape_job.py")
            subprocess.run([PY, shape_job, "--prepare", "--data", data], check=True)
            job = [shape_job, "--shape", args.job[6:], "--steps", str(args.steps), "--data", data]
            env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")  # as bench/step_shapes.py
            if args.job == "shape-lm":
                env.update(BENCH_NO_LOADER="1")
        subprocess.run([os.path.join(args.build, "bin", "dlrecord"), "-q", "--capture", args.capture,
                        "-o", os.path.join(tmp, "trace"), "--", PY, os.path.abspath(__file__),
                        "--inner"] + job, env=env, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            r = json.load(f)
    steps = max(r["steps"], 1)
    print("job %s, capture %s: %d steps; loop %.2f ms/step wall, main thread %.2f ms/step cpu, "
          "other threads %.2f ms/step cpu" % (args.job, args.capture, r["steps"],
                                              r["loop_wall"] / steps * 1e3, r["main_cpu"] / steps * 1e3,
                                              r["other_threads_cpu"] / steps * 1e3))
    print("%-30s %6s %20s %20s" % ("", "", "wall us/step", "cpu us/step"))
    print("%-30s %6s %9s %10s %9s %10s" % ("part", "calls", "incl", "self", "incl", "self"))

    children = {}
    for key, parent in r["parent"].items():
        children.setdefault(parent, []).append(key)

    def show(key, depth):
        print("%-30s %6.1f %9.1f %10.1f %9.1f %10.1f"
              % ("  " * depth + key, r["calls"][key] / steps, r["incl"][key] / steps * 1e6,
                 r["self"][key] / steps * 1e6, r["incl_cpu"][key] / steps * 1e6,
                 r["self_cpu"][key] / steps * 1e6))
        for child in sorted(children.get(key, []), key=lambda k: -r["incl"][k]):
            show(child, depth + 1)
    for key in sorted(children.get(None, []), key=lambda k: -r["incl"][k]):
        show(key, 0)
    for key, values in r["samples"].items():
        values = sorted(values[8:])  # the first batches warm the caches up
        if values:
            print("%s, %s us per call over %d calls: min %.1f, p10 %.1f, median %.1f, p90 %.1f; all calls "
                  "%.1f us per step" % (key, "wall" if key.endswith("(wall)") else "CPU", len(values), values[0],
                                        values[len(values) // 10], statistics.median(values),
                                        values[len(values) * 9 // 10], sum(r["samples"][key]) / steps))
    fixed = [r["samples"].get(k) for k in ("deliver batch", "before backward (loss digest)")]
    if all(fixed):
        medians = [statistics.median(sorted(v[8:])) for v in fixed]
        print("fixed cost per step (delivery + loss): median %.1f + %.1f = %.1f us CPU; all calls %.1f us per step"
              % (medians[0], medians[1], sum(medians), (sum(fixed[0]) + sum(fixed[1])) / steps))
    total = sum(r["incl"][k] for k in children.get(None, []))
    total_cpu = sum(r["incl_cpu"][k] for k in children.get(None, []))
    print("%-30s %6s %9.1f %10s %9.1f" % ("total (top level)", "", total / steps * 1e6, "",
                                          total_cpu / steps * 1e6))


if __name__ == "__main__":
    sys.exit(main())
