"""One rank alone in the failure window (docs/distributed.md): a DDP job recorded with digest
collectives and `dlrecord --window K` keeps the collective results of the window's steps in
memory and writes them with the window when the job fails; `dlreplay T --rank R` then replays
that rank alone from the window's snapshot, served those results, bit-exactly to the failure.

Every rank of a 2-rank gloo DDP job (examples/ddp_train.py, 12 steps, window 4: snapshots
held at steps 4 and 8) with a NaN planted on rank 1 at step 9: rank 1 alone reproduces it,
rank 0 alone verifies the window's steps and stops where the NaN reached it, a replay outside
the window is refused, and a served result whose bytes were damaged stops the replay. Under
torchrun (torch 1.13), and with ranks started by hand (where torchrun cannot start: torch 2.6
of Debian 13)."""
import json
import os
import shutil
import socket
import struct
import subprocess

from harness import PY, TraceTestCase, run, tool
from test_dist import DDP, NO_TORCHRUN, rank_lines, torchrun

JOB = [DDP, "--steps", "12", "--nan-rank", "1", "--nan-step", "9"]
RECORD = ["--collectives", "digest", "--window", "4"]


class WindowReplayChecks:
    def replay(self, trace, *args):
        return run([tool("dlreplay"), trace] + list(args), timeout=240)

    def check_window_replay(self, trace, recorded):
        """recorded: {rank: the rank's output lines as recorded}."""
        def lines(out, rank, steps):
            return [l for l in out.splitlines() if l.startswith("rank %d step " % rank) and
                    int(l.split()[3]) in steps]

        # Rank 1 alone, to its NaN: the default jump is the window's latest snapshot.
        p = self.replay(trace, "--rank", "1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("jumping to the snapshot of step 8: steps 0-7 are fast-forwarded (not verified)", p.stderr)
        self.assertIn("reached nan; 1 of 13 recorded steps verified bit-exact (jumped to step 8", p.stderr)
        self.assertIn("at module module.fc1 (call 0) of step 9", p.stderr)
        self.assertRegex(p.stderr, r"collectives: \d+ of \d+ recorded issued; \d+ tensors verified; [1-9]\d* results served")
        self.assertEqual(lines(p.stdout, 1, [8]), lines("\n".join(recorded[1]), 1, [8]))

        # Rank 0 alone from the window's first snapshot: steps 4-8 verified (each served the
        # all-reduced gradients of both ranks), then stopped where rank 1's NaN reached it.
        p = self.replay(trace, "--rank", "0", "--from", "step=4")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("reached nan; 5 of 13 recorded steps verified bit-exact (jumped to step 4", p.stderr)
        self.assertIn("after collective #10 (DDP all-reduce) of step 9", p.stderr)
        self.assertRegex(p.stderr, r"collectives: 6 of \d+ recorded issued; \d+ tensors verified; 24 results served")
        window = range(4, 9)
        self.assertEqual(lines(p.stdout, 0, window), lines("\n".join(recorded[0]), 0, window))
        self.assertEqual(len(lines(p.stdout, 0, window)), 5)

        # Outside the window the results are digests only: refused before anything runs.
        p = self.replay(trace, "--rank", "1", "--until", "end")
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("rank 1 cannot run alone from the start to the end: the recording kept only the digests of "
                      "its collective results of steps start-up-2", p.stderr)
        self.assertIn("'dlrecord --collectives full'", p.stderr)
        self.assertNotIn("verified", p.stderr)
        p = self.replay(trace, "--rank", "0", "--until", "end", "--from", "step=8")
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("from the snapshot of step 8 to the end", p.stderr)
        self.assertIn("results of steps 10-11", p.stderr)
        p = self.replay(trace, "--rank", "1", "--until", "step=2")
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("cannot run alone from the start to step 2", p.stderr)

        # The results served are the window's bytes: one of them damaged, the replay stops there.
        damaged = trace + ".damaged"
        shutil.copytree(trace, damaged)
        self.assertEqual(damage_result(damaged, "rank0", 6), 1)
        p = self.replay(damaged, "--rank", "0", "--from", "step=4")
        self.assertEqual(p.returncode, 10, p.stderr)
        self.assertIn("where: collective #7 (ddp_allreduce)", p.stderr)
        self.assertIn("checksum mismatch", p.stderr)
        self.assertNotIn("reached nan", p.stderr)


def damage_result(trace, stream, step):
    """Flips a byte of the first result of the collective of `step` in the stream's blob frames
    (format.md: a BLOB frame's payload starts with the blob's hashLo); returns the frames hit."""
    out = run([tool("dltrace"), "events", trace, "--stream", stream, "--kind", "collective", "--json"],
              check=True).stdout
    lo = None
    for line in out.splitlines():
        event = json.loads(line)["event"]
        if event["step"] == step:
            lo = int(event["collective"]["results"][0]["data"]["hashLo"], 16)
    path = os.path.join(trace, stream + ".dls")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    hit, i = 0, 0
    while lo is not None:
        i = data.find(b"DLRF", i)
        if i < 0:
            break
        if data[i + 4] == 3 and struct.unpack_from("<Q", data, i + 32)[0] == lo:
            data[i + 64] ^= 0xFF
            hit += 1
        i += 4
    with open(path, "wb") as f:
        f.write(data)
    return hit


class TorchrunWindowTest(WindowReplayChecks, TraceTestCase):
    def setUp(self):
        super().setUp()
        if NO_TORCHRUN:
            self.skipTest(NO_TORCHRUN)

    def test_rank_alone_in_the_failure_window(self):
        trace = self.trace_path()
        launcher = torchrun(2, os.path.join(self.tmp, "torchrun-logs"))
        p = run([tool("dlrecord")] + RECORD + ["-o", trace, "--"] + launcher + JOB, timeout=240)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("data-less replay can start at step 4, 8; with it ", p.stderr)
        self.check_window_replay(trace, rank_lines(p.stdout))


class HandStartedWindowTest(WindowReplayChecks, TraceTestCase):
    def test_rank_alone_in_the_failure_window(self):
        trace = self.trace_path()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), USE_LIBUV="0")
        env.pop("DLRR_MODE", None)
        ranks = [subprocess.Popen([tool("dlrecord")] + RECORD + ["-o", trace, "--", PY] + JOB,
                                  env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
                 for r in range(2)]
        outs = [p.communicate(timeout=240) for p in ranks]
        for p, (out, err) in zip(ranks, outs):
            self.assertEqual(p.returncode, 0, out + err)
        self.check_window_replay(trace, {r: outs[r][0].splitlines() for r in range(2)})


if __name__ == "__main__":
    import unittest
    unittest.main()
