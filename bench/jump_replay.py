"""Jump replay (issue 15): time to a late NaN by full replay vs jump replay, record overhead
with snapshots on vs off, and trace bytes per snapshot with and without dedup.

    /usr/bin/python3 bench/jump_replay.py [--build build] [--growth 1.0006] [--width 256]
                                          [--every 2000steps] [--pairs 1]

The job is tests/integration/jobs/jump_job.py loader: an MLP on a shuffled DataLoader, SGD
with momentum, 2 micro-batches per optimizer step, a LambdaLR whose LR grows by --growth per
optimizer step until the loss overflows (about 20,000 steps with the defaults).

  record      --pairs pairs of recordings, snapshots off then on (--snapshot-every EVERY),
              interleaved so both see the same machine load; wall time of each, and the
              ratio on/off per pair; and, exact where that ratio is noise, the time the job's
              thread spent taking snapshots (the trace's snapshot.job_seconds) against the
              recording's wall time
  replay      of the snapshots-on trace to its NaN: `--from start` (every step verified),
              `--from snapshot` (the latest snapshot before the NaN: the failure snapshot),
              then `--from step=S` with S the last periodic snapshot (the default jump)
  bytes       what `dltrace info --json` says of each snapshot: tensor bytes, new bytes after
              dedup; and the trace sizes with snapshots off and on

A benchmark, not a test: it prints figures, and exits non-zero only when a replay fails.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

PY = "/usr/bin/python3"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB = os.path.join(ROOT, "tests", "integration", "jobs", "jump_job.py")


def timed(argv):
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True)
    return time.monotonic() - t0, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--growth", default="1.0006")
    ap.add_argument("--width", default="256")
    ap.add_argument("--every", default="2000steps")
    ap.add_argument("--pairs", type=int, default=1)
    a = ap.parse_args()
    bin_ = os.path.join(a.build, "bin")
    job = [PY, JOB, "loader", "--growth", a.growth, "--width", a.width]
    tmp = tempfile.mkdtemp(prefix="dlrr-jump-bench-")
    try:
        rec = {"off": [], "on": []}
        traces = {}
        for i in range(a.pairs):
            for mode in ("off", "on"):
                t = os.path.join(tmp, "%s%d" % (mode, i))
                every = "off" if mode == "off" else a.every
                secs, p = timed([os.path.join(bin_, "dlrecord"), "-q", "-o", t, "--snapshot-every", every, "--"] + job)
                if p.returncode != 0:
                    sys.exit("dlrecord failed: " + p.stderr[-2000:])
                rec[mode].append(secs)
                traces[mode] = t
                print("record %-3s pair %d: %.1f s" % (mode, i, secs), flush=True)
        info = {m: json.loads(subprocess.run([os.path.join(bin_, "dltrace"), "info", t, "--json"],
                                             capture_output=True, text=True, check=True).stdout)
                for m, t in traces.items()}
        doc = info["on"]
        fail = doc["failure"]["step"]
        print("job: NaN at step %d of %d" % (fail, doc["steps"]))
        for on, off in zip(rec["on"], rec["off"]):
            print("record: snapshots off %.1f s, on %.1f s: on/off %.4f" % (off, on, on / off))
        env = json.loads(subprocess.run([os.path.join(bin_, "dltrace"), "env", traces["on"], "--json"],
                                        capture_output=True, text=True, check=True).stdout)
        spent = [p["runtime"]["snapshot.job_seconds"] for p in env.get("processes", [])
                 if "snapshot.job_seconds" in p.get("runtime", {})]
        if spent:
            secs = float(spent[0].split()[0])
            print("snapshots on the job's thread: %s, %.3f%% of the recording's %.1f s"
                  % (spent[0].replace(" in", " s in"), 100 * secs / rec["on"][-1], rec["on"][-1]))
        snaps = doc["snapshots"]
        periodic = [s for s in snaps if s["reason"] == "periodic"]
        tb = sum(s["tensor_bytes"] for s in periodic)
        nb = sum(s["new_bytes"] for s in periodic)
        if periodic:
            print("snapshots: %d periodic; per snapshot %.1f KiB of tensors, %.1f KiB new after dedup (first: %.1f KiB)"
                  % (len(periodic), tb / len(periodic) / 1024, nb / len(periodic) / 1024, periodic[0]["new_bytes"] / 1024))
        off_b, on_b = info["off"]["bytes"]["files"], doc["bytes"]["files"]
        print("trace bytes on disk: snapshots off %.1f MiB, on %.1f MiB (+%.1f MiB; the snapshots' tensors without "
              "dedup: %.1f MiB)" % (off_b / 2**20, on_b / 2**20, (on_b - off_b) / 2**20, tb / 2**20))
        runs = [("full replay (--from start)", ["--from", "start"]), ("jump (--from snapshot)", ["--from", "snapshot"])]
        if periodic:
            runs.append(("jump from step %d" % periodic[-1]["step"], ["--from", "step=%d" % periodic[-1]["step"]]))
        full = None
        for name, extra in runs:
            secs, p = timed([os.path.join(bin_, "dlreplay"), traces["on"], "--json"] + extra)
            if p.returncode != 0:
                sys.exit("%s failed (%d): %s" % (name, p.returncode, p.stderr[-2000:]))
            r = json.loads(p.stdout.splitlines()[-1])
            full = full or secs
            print("%-28s %.1f s to the NaN at step %s (%.1f%% of the full replay), %d steps verified"
                  % (name, secs, r["report"].get("stop.step"), 100 * secs / full, r["verified_steps"]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
