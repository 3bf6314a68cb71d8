"""What explaining failures (issue 30: explain.py, --what-if) costs a recording, in one run.

    /usr/bin/python3 bench/explain_overhead.py [--build build] [--rounds 5] [--epochs 2]

The explainer and the what-if changes run at replay only; the one change they made to the
recording path is the optimizer-step wrapper's test `rec.fast_forwarding or rec.skip_update`
(training.py; before: `rec.fast_forwarding`), one more attribute load per optimizer.step().
Two measurements:

1. Whole processes: examples/train.py (clean data, --workers 0, --epochs N) run plain, under
   this build's dlrecord (explain on), and under a copy of this build whose training.py has
   the test as before explain landed (explain off: the only difference).  Each round runs the
   three in a shuffled order; ratios are per round (variant / plain of that round), printed as
   the median with min..max, on two clocks: wall, and user+sys CPU of the process tree.
   Also checked: a recorded job never imports explain.py or whatif.py.
2. The change in isolation: the two tests, timed with timeit on a recording Session's own
   attributes, per optimizer step.

A benchmark, not a test: it asserts nothing.
"""
import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ON = "if outermost and (rec.fast_forwarding or rec.skip_update):"
OFF = "if outermost and rec.fast_forwarding:"


def explain_off_copy(build, tmp):
    """bin/dlrecord and lib/dlrr of `build`, copied (dlrecord finds its library and hook from
    /proc/self/exe), with the step wrapper's test as it was before explain."""
    prefix = os.path.join(tmp, "explain-off")
    os.makedirs(os.path.join(prefix, "bin"))
    shutil.copy2(os.path.join(build, "bin", "dlrecord"), os.path.join(prefix, "bin"))
    shutil.copytree(os.path.join(build, "lib", "dlrr"), os.path.join(prefix, "lib", "dlrr"))
    path = os.path.join(prefix, "lib", "dlrr", "python", "dlrr_hook", "training.py")
    with open(path) as f:
        text = f.read()
    if text.count(ON) != 1:
        sys.exit("training.py no longer has the test this bench reverts: %r" % ON)
    with open(path, "w") as f:
        f.write(text.replace(ON, OFF))
    return os.path.join(prefix, "bin", "dlrecord")


def timed(argv, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit("%s exited %d:\n%s" % (" ".join(argv[:3]), p.returncode, p.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def isolated_test_cost(build):
    """ns per optimizer step of the two tests, on a recording Session's attributes."""
    sys.path.insert(0, os.path.join(build, "lib", "dlrr", "python"))
    from dlrr_hook.session import Session

    rec = Session.__new__(Session)  # the instance layout, without a library
    rec.fast_forwarding = False
    rec.skip_update = False
    n = 2_000_000
    out = {}
    for name, expr in (("on", "outermost and (rec.fast_forwarding or rec.skip_update)"),
                       ("off", "outermost and rec.fast_forwarding")):
        runs = timeit.repeat(expr, globals={"rec": rec, "outermost": True}, number=n, repeat=7)
        out[name] = min(runs) / n * 1e9
    return out


def summary(values):
    return "%.3f (%.3f..%.3f)" % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2, help="epochs of 64 steps")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    tmp = tempfile.mkdtemp(prefix="dlrr-explain-bench-")
    try:
        data = os.path.join(tmp, "data")
        subprocess.run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", data, "--corrupt-index", "-1"],
                       check=True, stdout=subprocess.DEVNULL)
        off = explain_off_copy(build, tmp)
        job = [PY, os.path.join(ROOT, "examples", "train.py"), "--data", data, "--workers", "0", "--epochs",
               str(args.epochs), "--seed", "8", "--no-steps-print"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("DLRR_")}
        probe = os.path.join(tmp, "probe.py")
        with open(probe, "w") as f:
            f.write("import sys, torch\ntorch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1).step()\n"
                    "print(sorted(m for m in sys.modules if m in ('dlrr_hook.explain', 'dlrr_hook.whatif')))\n")
        p = subprocess.run([os.path.join(build, "bin", "dlrecord"), "-o", os.path.join(tmp, "probe-trace"), "--",
                            PY, probe], env=env, capture_output=True, text=True)
        imported = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "(no output: %s)" % p.stderr[-300:]
        variants = {
            "plain": lambda trace: job,
            "explain on": lambda trace: [os.path.join(build, "bin", "dlrecord"), "-o", trace, "--"] + job,
            "explain off": lambda trace: [off, "-o", trace, "--"] + job,
        }
        ratios = {name: {"wall": [], "cpu": []} for name in variants if name != "plain"}
        for r in range(args.rounds):
            order = list(variants)
            random.shuffle(order)
            got = {}
            for name in order:
                trace = os.path.join(tmp, "trace-%d-%s" % (r, name.replace(" ", "-")))
                got[name] = timed(variants[name](trace), env)
                shutil.rmtree(trace, ignore_errors=True)
            for name in ratios:
                ratios[name]["wall"].append(got[name][0] / got["plain"][0])
                ratios[name]["cpu"].append(got[name][1] / got["plain"][1])
        isolated = isolated_test_cost(build)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("explain overhead: examples/train.py, workers 0, %d epochs (%d steps), %d rounds; load average %.2f"
          % (args.epochs, 64 * args.epochs, args.rounds, os.getloadavg()[0]))
    print("modules of explain imported by a recorded job: %s" % imported)
    print("%-12s %26s %26s" % ("recorded", "wall / plain", "cpu / plain"))
    for name in ratios:
        print("%-12s %26s %26s" % (name, summary(ratios[name]["wall"]), summary(ratios[name]["cpu"])))
    on_off = [a / b for a, b in zip(ratios["explain on"]["cpu"], ratios["explain off"]["cpu"])]
    print("explain on / off per round, cpu: %s" % summary(on_off))
    print("the step wrapper's test alone: %.1f ns (explain on), %.1f ns (off): %+.1f ns per optimizer step"
          % (isolated["on"], isolated["off"], isolated["on"] - isolated["off"]))


if __name__ == "__main__":
    sys.exit(main())
