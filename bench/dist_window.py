"""What keeping the failure window's collective results costs (docs/distributed.md, "One rank
alone in the failure window"), in one run.

    /usr/bin/python3 bench/dist_window.py [--build build] [--steps 40] [--window 4]
                                          [--hiddens 16,160] [--nproc 2]

Job: examples/ddp_train.py under torchrun, 2 ranks, gloo on CPU, NaN planted on rank 1 at the
last step but one (so the window is written at a failure), once per model size: --hidden 16
(the example: 212 parameters) and 160 (2,084 parameters, about 10x).
Variants per size:
  digest         dlrecord --collectives digest: results' digests only (no rank alone)
  digest+window  dlrecord --collectives digest --window K: the results of the window's steps
                 kept in memory, written at the failure (rank alone in the window)
  full           dlrecord --collectives full: every result in the trace (rank alone anywhere)
Reported per variant: trace bytes per step and rank stream; for digest+window the collective
results the window held at most in memory per rank (dlrecord's summary line, "peak held"),
and what it wrote; the ratios of full to digest+window and of the window's memory to one
step's all-reduced gradients. Bytes, not time: deterministic up to compression, one run is
enough. A benchmark, not a test: it asserts nothing.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def torchrun(nproc, log_dir):
    return [PY, "-m", "torch.distributed.run", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--nnodes=1",
            "--nproc_per_node=%d" % nproc, "--redirects", "1", "--tee", "1", "--log_dir", log_dir,
            "--monitor_interval", "0.2"]


def rank_bytes(trace):
    sizes = [os.path.getsize(os.path.join(trace, f)) for f in os.listdir(trace) if re.match(r"rank\d+\.dls$", f)]
    return sum(sizes) / max(len(sizes), 1)


def record(args, tmp, hidden, variant):
    trace = os.path.join(tmp, "t-%d-%s" % (hidden, variant))
    job = [os.path.join(ROOT, "examples", "ddp_train.py"), "--steps", str(args.steps), "--hidden", str(hidden),
           "--nan-rank", "1", "--nan-step", str(args.steps - 2)]
    opts = ["--collectives", "full" if variant == "full" else "digest"]
    if variant == "digest+window":
        opts += ["--window", str(args.window)]
    argv = [os.path.join(args.build, "bin", "dlrecord")] + opts + ["-o", trace, "--"] + \
        torchrun(args.nproc, os.path.join(tmp, "logs-%d-%s" % (hidden, variant))) + job
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("%s failed (exit %d):\n%s" % (variant, p.returncode, p.stderr[-2000:]))
    held = [int(m) for m in re.findall(r"collective results of \d+ steps, \d+ bytes \(peak held (\d+) bytes\)",
                                       p.stderr)]
    written = [int(m) for m in re.findall(r"collective results of \d+ steps, (\d+) bytes", p.stderr)]
    return {"per_step": rank_bytes(trace) / (args.steps + 1), "held": max(held or [0]),
            "written": max(written or [0])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--hiddens", default="16,160")
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dlrr-dist-window-")
    try:
        print("examples/ddp_train.py, %d ranks, %d steps, NaN on rank 1 at step %d, --window %d"
              % (args.nproc, args.steps, args.steps - 2, args.window))
        print("%-7s %-7s %-15s %14s %16s %16s" % ("hidden", "params", "variant", "bytes/step/rank",
                                                   "window held max", "window written"))
        for hidden in (int(h) for h in args.hiddens.split(",")):
            params = 8 * hidden + hidden + hidden * 4 + 4
            grad_bytes = 4 * params  # one step's all-reduced gradients (float32)
            r = {v: record(args, tmp, hidden, v) for v in ("digest", "digest+window", "full")}
            for v, x in r.items():
                print("%-7d %-7d %-15s %14.0f %16s %16s" % (hidden, params, v, x["per_step"],
                                                           x["held"] if v == "digest+window" else "-",
                                                           x["written"] if v == "digest+window" else "-"))
            w = r["digest+window"]
            print("  ratios: full / digest+window bytes per step %.2fx; digest+window / digest %.2fx; "
                  "window memory %.1f steps of gradients (%d bytes a step)"
                  % (r["full"]["per_step"] / w["per_step"], w["per_step"] / r["digest"]["per_step"],
                     w["held"] / grad_bytes, grad_bytes))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
