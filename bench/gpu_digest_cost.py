"""Device digest cost per module output, on a CUDA device (docs/gpu.md "Digests of CUDA tensors").

    LD_PRELOAD=build/lib/dlrr/libdlrr.so python3 bench/gpu_digest_cost.py [--calls 300]

For tensors of the sizes a small training job digests every step (a loss, a classifier's
logits, activations of 1-16 MiB), measures the digest the recorder takes of each module
output, with every implementation this build has:

  torch-ops   DeviceDigester.launch: 10-23 small torch ops per tensor (always available);
  fused       one kernel per tensor (libdlrr's dlrr_gpu_digest_launch), where built.

Per implementation and size it prints the CPU time to enqueue one digest (what the job's
launching thread pays: the GPU runs asynchronously behind it), the GPU time per digest
(CUDA events around a batch), and, as the reference, one plain op of that size
(`x.add(1)`) measured the same way.  A benchmark, not a test: it prints ratios, it asserts
only that every implementation gives the same digest.
"""
import argparse
import ctypes
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "interpose", "python"))

import torch  # noqa: E402

from dlrr_hook import gpu, native  # noqa: E402

SHAPES = [
    ("loss (1 float)", (1,)),
    ("logits 64x10", (64, 10)),
    ("tokens 64x64x64", (64, 64, 64)),
    ("conv 64x32x16x16", (64, 32, 16, 16)),
    ("act 16 MiB", (4096, 1024)),
]


def timed(fn, calls):
    """(CPU us per call while enqueuing, GPU us per call) over `calls` calls, best of 3."""
    cpu, dev = [], []
    for _ in range(3):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        cpu.append((t1 - t0) / calls * 1e6)
        dev.append(start.elapsed_time(end) * 1e3 / calls)
    return min(cpu), min(dev)


def implementations(lib_path):
    impls = [("torch-ops", gpu.DeviceDigester(torch))]
    lib = native.load()  # preloaded (LD_PRELOAD=libdlrr.so: its TLS needs it), not recording
    if lib is None:
        try:
            lib = native.bind(ctypes.CDLL(lib_path))
        except (OSError, AttributeError) as exc:
            print("no fused kernel: cannot load %s (%s); run with LD_PRELOAD=%s" % (lib_path, exc, lib_path))
            return impls
    fused = gpu.FusedDigester.load(torch, lib)
    if fused is None:
        print("no fused kernel: %s" % gpu.FusedDigester.why)
    else:
        impls.append(("fused", fused))
    return impls


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--lib", default=os.path.join(os.environ.get("DLRR_BUILD", os.path.join(ROOT, "build")), "lib",
                                                  "dlrr", "libdlrr.so"))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: gpu_digest_cost skipped")
        return 0
    print("device: %s; torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    torch.cuda.init()  # the kernel loads into the context torch made
    impls = implementations(args.lib)
    print("implementations: %s" % ", ".join(n for n, _ in impls))
    print("%-18s %-10s %12s %12s %14s %14s" % ("tensor", "digest", "cpu us/call", "gpu us/call",
                                               "plain op cpu", "plain op gpu"))
    for label, shape in SHAPES:
        x = torch.randn(*shape, device="cuda")
        p_cpu, p_gpu = timed(lambda: x.add(1), args.calls)
        reference = None
        for name, d in impls:
            d.digest(x)  # warm: weights cached, module loaded
            value = d.digest(x)
            if reference is None:
                reference = value
            elif value[:3] != reference[:3]:
                print("MISMATCH: %s gives %s, torch-ops %s" % (name, value, reference))
                return 1
            c, g = timed(lambda: d.launch(x), args.calls)
            print("%-18s %-10s %12.2f %12.2f %14.2f %14.2f" % (label, name, c, g, p_cpu, p_gpu))
    # A whole step's worth: the example job's module outputs, as the recorder digests them.
    outs = [torch.randn(*s, device="cuda") for s in [(64, 32, 16, 16)] * 3 + [(64, 64, 8, 8)] * 2 +
            [(64, 64, 64)] * 14 + [(64, 10)] + [(1,)]]
    for name, d in impls:
        c, g = timed(lambda: [d.launch(t) for t in outs], max(args.calls // 10, 10))
        print("step of %d module outputs, %s: %.1f us CPU, %.1f us GPU (%.2f us CPU per module)" % (
            len(outs), name, c, g, c / len(outs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
