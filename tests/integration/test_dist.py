"""Distributed jobs (docs/distributed.md): real torchrun, real gloo process groups, 2-3 ranks.

A DDP job with a NaN planted on one rank: the trace names that rank as the origin, replay of
that rank alone reaches the NaN bit-exactly, replay of another rank alone verifies every step
(or stops where the NaN reached it), and --all-ranks relaunches and verifies every stream.
Explicit all_reduce/broadcast/all_gather/barrier; a user's DDP comm hook keeps running; the
DDP's results are bit-identical under dlrecord at world size 3; one dlrecord per rank (torchrun --no_python dlrecord ...)."""
import os
import re
import socket
import subprocess
import unittest

from harness import EXAMPLES, PY, TraceTestCase, events, info, run, tool

DDP = os.path.join(EXAMPLES, "ddp_train.py")
COLLECTIVES = os.path.join(EXAMPLES, "collectives_train.py")
FSDP_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "fsdp_train.py")


def torchrun(nproc, log_dir):
    # torch 1.13 under Python 3.11 needs --redirects/--tee 1 or 2; the c10d rendezvous on port 0
    # picks a free port (the default static one would clash with parallel tests).
    return [PY, "-m", "torch.distributed.run", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--nnodes=1",
            "--nproc_per_node=%d" % nproc, "--redirects", "1", "--tee", "1", "--log_dir", log_dir,
            "--monitor_interval", "0.2"]


def rank_lines(stdout):
    """{rank: [lines]} of torchrun's prefixed output ("[default1]:rank 1 step 0 loss ...").

    torchrun's --tee tailer reads each rank's log with readline() and writes header + what it
    read; a line read before the rank had written all of it comes out in two prefixed pieces,
    with another rank's output between them. So: every piece goes to its rank, up to the end of
    its line (anything after that newline is unprefixed output from elsewhere), and a rank's
    pieces are joined before splitting into lines."""
    parts = re.split(r"\[default(\d+)\]:", stdout)
    text = {}
    for rank, piece in zip(parts[1::2], parts[2::2]):
        end = piece.find("\n")
        text[int(rank)] = text.get(int(rank), "") + (piece if end < 0 else piece[:end + 1])
    return {rank: t.splitlines() for rank, t in text.items()}


def _tcpstore_starts():
    """torchrun's rendezvous creates a TCPStore with torch's default backend, libuv since torch
    2.4; Debian 13's torch 2.6 is built without libuv and no option or variable reaches that store."""
    code = ("import datetime, torch.distributed as d\n"
            "d.TCPStore('127.0.0.1', 0, is_master=True, timeout=datetime.timedelta(seconds=10))\n")
    return run([PY, "-c", code], timeout=60).returncode == 0


NO_TORCHRUN = "" if _tcpstore_starts() else \
    "torchrun cannot start here: this torch has no libuv for its TCPStore (Debian 13; issue 19, ranks not yet started by hand)"


class DistTest(TraceTestCase):
    def setUp(self):
        super().setUp()
        if NO_TORCHRUN and self._testMethodName != "test_a_gpu_trace_says_it_needs_a_gpu_machine":
            self.skipTest(NO_TORCHRUN)

    def launcher(self, nproc=2):
        return torchrun(nproc, os.path.join(self.tmp, "torchrun-logs"))

    def record(self, job_args, collectives="full", nproc=2, name="t.trace"):
        trace = self.trace_path(name)
        argv = [tool("dlrecord"), "--collectives", collectives, "-o", trace, "--"] + self.launcher(nproc) + job_args
        p = run(argv, timeout=240)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return trace, p

    def test_nan_on_one_rank_named_and_replayed_rank_by_rank(self):
        job = [DDP, "--steps", "6", "--nan-rank", "1", "--nan-step", "3"]
        plain = run(self.launcher() + job, timeout=240)
        trace, rec = self.record(job)
        # The job is unchanged: every rank prints the same lines as without dlrecord.
        self.assertEqual(rank_lines(rec.stdout), rank_lines(plain.stdout))
        self.assertIn("first non-finite value: rank 1, step 3, module.fc1", rec.stderr)
        self.assertIn("reached rank 0 through DDP all-reduce at step 3", rec.stderr)

        doc = info(trace)
        dist = doc["distributed"]
        self.assertEqual(dist["world_size"], 2)
        self.assertEqual([r["rank"] for r in dist["ranks"]], [0, 1])
        origin = dist["nonfinite_origin"]
        self.assertEqual((origin["rank"], origin["step"], origin["where"]), (1, 3, "module.fc1"))
        self.assertEqual(origin["reached"], [0])
        self.assertEqual(origin["via"], "DDP all-reduce")
        self.assertTrue(dist["ranks"][0]["received_nonfinite"])
        for r in dist["ranks"]:
            self.assertEqual(r["steps"], 7)
            self.assertEqual(r["exit_code"], 0)
            self.assertGreater(r["collectives"], 6)  # start-up sync + one bucket per step
            self.assertGreater(r["results_kept"], 0)

        # dltrace steps puts the ranks side by side: rank 1 went non-finite at step 3, rank 0 after.
        table = run([tool("dltrace"), "steps", trace], check=True).stdout.splitlines()
        self.assertRegex(table[0], r"^STEP +RANK 0 LOSS +NONFIN +RANK 1 LOSS +NONFIN")
        row3 = table[4].split()
        self.assertEqual((row3[0], row3[3]), ("3", "nan"))
        self.assertNotEqual(row3[1], "nan")
        self.assertIn("first non-finite value: rank 1, step 3", table[-1])

        # The default replay picks the origin rank and runs it alone, without its peer.
        p = run([tool("dlreplay"), trace], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("replaying rank 1 alone", p.stderr)
        self.assertIn("reached nan", p.stderr)
        self.assertIn("at module module.fc1 (call 0) of step 3", p.stderr)
        self.assertIn("3 of 7 recorded steps verified bit-exact", p.stderr)
        recorded = rank_lines(rec.stdout)[1]
        replayed = [l for l in p.stdout.splitlines() if l.startswith("rank 1 step")]
        self.assertEqual(replayed, recorded[:3])  # the same losses, to the last printed digit

        # The other rank alone: every step verified to the end, collectives served.
        p = run([tool("dlreplay"), trace, "--rank", "0", "--until", "end"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("replayed to the end; 7 of 7 recorded steps verified bit-exact", p.stderr)
        self.assertEqual([l for l in p.stdout.splitlines() if l.startswith("rank 0 ")], rank_lines(rec.stdout)[0])
        self.assertRegex(p.stderr, r"collectives: \d+ of \d+ recorded issued; \d+ tensors verified; [1-9]\d* results served")

        # Its nan target is where the NaN arrived: after the all-reduce, with the origin named.
        p = run([tool("dlreplay"), trace, "--rank", "0"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("rank 0 received its non-finite values; they began on rank 1, step 3", p.stderr)
        self.assertIn("after collective #4 (DDP all-reduce) of step 3", p.stderr)

        # Every rank relaunched with the recorded torchrun command: every stream verified.
        p = run([tool("dlreplay"), trace, "--all-ranks"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("rank 0: 7 of 7 recorded steps verified bit-exact", p.stderr)
        self.assertIn("rank 1: 7 of 7 recorded steps verified bit-exact", p.stderr)
        self.assertIn("every rank replayed to the end, every step verified", p.stderr)

    def test_digest_only_recording_replays_all_ranks_not_one(self):
        trace, _ = self.record([DDP, "--steps", "3"], collectives="digest")
        p = run([tool("dlreplay"), trace, "--rank", "1"], timeout=60)
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("rank 1 cannot run without its peers: the recording kept 0 of its", p.stderr)
        self.assertIn("--collectives full", p.stderr)
        p = run([tool("dlreplay"), trace], timeout=240)  # default: --all-ranks
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("recorded without collective results: relaunching every rank", p.stderr)
        self.assertIn("every rank replayed to the end, every step verified", p.stderr)
        p = run([tool("dlreplay"), trace, "--all-ranks", "--until", "nan"], timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        p = run([tool("dlreplay"), trace, "--rank", "5"], timeout=60)
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("no rank 5", p.stderr)

    def test_explicit_collectives_recorded_and_served(self):
        trace, rec = self.record([COLLECTIVES, "--steps", "3"])
        ev = run([tool("dltrace"), "events", trace, "--stream", "rank1", "--kind", "collective"], check=True).stdout
        for op in ("broadcast peer 0", "all_reduce sum", "all_gather", "barrier"):
            self.assertIn(op, ev)
        self.assertNotIn("object at 0x", ev)
        p = run([tool("dlreplay"), trace, "--rank", "1", "--until", "end"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("3 of 3 recorded steps verified bit-exact", p.stderr)
        self.assertEqual([l for l in p.stdout.splitlines() if l.startswith("rank 1 ")], rank_lines(rec.stdout)[1])

    def test_user_comm_hook_still_runs_and_buckets_are_recorded(self):
        job = [DDP, "--steps", "4", "--comm-hook"]
        plain = run(self.launcher() + job, timeout=240)
        trace, rec = self.record(job)
        self.assertEqual(rank_lines(rec.stdout), rank_lines(plain.stdout))
        self.assertIn("user comm hook calls: 4", rank_lines(rec.stdout)[0])
        ev = run([tool("dltrace"), "events", trace, "--stream", "rank0", "--kind", "collective"], check=True).stdout
        self.assertEqual(len(re.findall(r"ddp_bucket bucket 0", ev)), 4, ev)
        self.assertNotIn(" all_reduce ", ev)  # the hook's own all_reduce belongs to its bucket
        # Alone, the hook is not run (it would communicate): its buckets are served.
        p = run([tool("dlreplay"), trace, "--rank", "1", "--until", "end"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("user comm hook calls: 0", p.stdout)
        self.assertIn("comm_hook: the job's DDP comm hook user_allreduce_hook is not run", p.stderr)

    def test_user_comm_hook_registered_after_the_first_step(self):
        # DDP takes a hook any time before the next backward: recording follows the switch.
        job = [DDP, "--steps", "4", "--comm-hook", "--late-comm-hook", "--param-hash"]
        plain = run(self.launcher() + job, timeout=240)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        trace, rec = self.record(job)
        self.assertEqual(rank_lines(rec.stdout), rank_lines(plain.stdout))
        self.assertIn("user comm hook calls: 3", rank_lines(rec.stdout)[0])
        ev = run([tool("dltrace"), "events", trace, "--stream", "rank0", "--kind", "collective"], check=True).stdout
        # Step 0 ran DDP's built-in all-reduce (its gradients recorded), then the job's hook.
        self.assertEqual(len(re.findall(r"ddp_allreduce avg", ev)), 1, ev)
        self.assertEqual(len(re.findall(r"ddp_bucket bucket 0", ev)), 3, ev)
        p = run([tool("dlreplay"), trace, "--rank", "1", "--until", "end"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("4 of 4 recorded steps verified bit-exact", p.stderr)

    def test_recording_leaves_ddp_results_bit_identical(self):
        # World size 3 (1/3 is inexact): any change to how gradients are scaled or summed shows.
        job = [DDP, "--steps", "5", "--lr", "0.3", "--param-hash"]
        plain = run(self.launcher(3) + job, timeout=240)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        _, rec = self.record(job, nproc=3)
        hashes = lambda out: sorted(l for l in out.splitlines() if " params " in l)
        self.assertEqual(len(hashes(plain.stdout)), 3)
        self.assertEqual(hashes(rec.stdout), hashes(plain.stdout))

    def test_one_dlrecord_per_rank(self):
        trace = self.trace_path()
        job = [PY, DDP, "--steps", "3", "--nan-rank", "0", "--nan-step", "1"]
        p = run(self.launcher() + ["--no_python", tool("dlrecord"), "--collectives", "full", "-o", trace, "--"] + job,
                timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        names = sorted(os.listdir(trace))
        self.assertEqual(names, ["launcher.rank0.dls", "launcher.rank1.dls", "rank0.dls", "rank1.dls"])
        doc = info(trace)
        self.assertEqual(doc["exit_code"], 0)
        self.assertEqual(doc["distributed"]["nonfinite_origin"]["rank"], 0)
        # A second recording into the same trace is refused for a rank already there.
        again = run(self.launcher() + ["--no_python", tool("dlrecord"), "-o", trace, "--"] + job, timeout=240)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("already holds the recording of this rank", again.stdout + again.stderr)
        p = run([tool("dlreplay"), trace, "--rank", "0"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("at module module.fc1 (call 0) of step 1", p.stderr)
        # --all-ranks needs the launcher command: dlreplay says which one.
        p = run([tool("dlreplay"), trace, "--all-ranks"], timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--no_python " + PY + " " + DDP, p.stderr)
        p = run([tool("dlreplay"), trace, "--all-ranks", "--"] + self.launcher() + ["--no_python"] + job, timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("every rank replayed to the end, every step verified", p.stderr)

    @unittest.skipIf(any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version", "/dev/dxg")),
                     "this machine has a CUDA device")
    def test_a_gpu_trace_says_it_needs_a_gpu_machine(self):
        # A job whose process reported CUDA in use (as the hook does on a GPU), replayed here.
        job = [PY, "-c", "import ctypes; lib = ctypes.CDLL(None); "
               "lib.dlrr_runtime_info(b'cuda.initialized', b'1'); "
               "lib.dlrr_runtime_info(b'cuda.device.0', b'NVIDIA H100 80GB HBM3'); "
               "lib.dlrr_runtime_info(b'dist.backend', b'nccl')"]
        trace = self.trace_path()
        run([tool("dlrecord"), "-o", trace, "--"] + job, check=True)
        p = run([tool("dlreplay"), trace], timeout=60)
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("ran on a GPU (NVIDIA H100 80GB HBM3, NCCL): it replays on a machine with a CUDA device only",
                      p.stderr)
        self.assertNotIn("dlreplay: running", p.stderr)



class HandStartedRanksTest(TraceTestCase):
    """Ranks started by hand (env://, as torchrun would set them up), one dlrecord each: runs
    where torchrun cannot (Debian 13's torch has no libuv; env:// honours USE_LIBUV=0)."""

    def start_ranks(self, job, trace=None, collectives="full"):
        """Runs job on 2 hand-started ranks (each under dlrecord when trace is given); returns their
        (stdout, stderr), after checking that both exited 0."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), USE_LIBUV="0")
        env.pop("DLRR_MODE", None)
        prefix = [tool("dlrecord"), "--collectives", collectives, "-o", trace, "--"] if trace else []
        ranks = [subprocess.Popen(prefix + job, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
                 for r in range(2)]
        outs = [p.communicate(timeout=240) for p in ranks]
        for p, (out, err) in zip(ranks, outs):
            self.assertEqual(p.returncode, 0, out + err)
        return outs

    def test_one_dlrecord_per_hand_started_rank_and_replay_of_one_rank_alone(self):
        trace = self.trace_path()
        self.start_ranks([PY, DDP, "--steps", "3", "--nan-rank", "0", "--nan-step", "1"], trace)
        self.assertEqual(sorted(os.listdir(trace)), ["launcher.rank0.dls", "launcher.rank1.dls", "rank0.dls", "rank1.dls"])
        doc = info(trace)
        self.assertEqual(doc["distributed"]["nonfinite_origin"]["rank"], 0)
        # Each rank alone, over the replay process group: rank 0 reaches the NaN it made.
        p = run([tool("dlreplay"), trace, "--rank", "0"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("at module module.fc1 (call 0) of step 1", p.stderr)
        p = run([tool("dlreplay"), trace, "--rank", "1", "--until", "end"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"replayed to the end; (\d+) of \1 recorded steps verified bit-exact")
        self.assertRegex(p.stderr, r"collectives: \d+ of \d+ recorded issued; \d+ tensors verified; [1-9]\d* results served")

    def test_all_ranks_started_by_dlreplay_as_they_were_started(self):
        # No launcher was recorded (no torchrun: it cannot start on Debian 13's torch), and a
        # digest-only recording cannot replay a rank alone: dlreplay starts both ranks itself,
        # with their recorded commands, at a free port, and verifies every stream.
        job = [PY, DDP, "--steps", "4", "--nan-rank", "1", "--nan-step", "2"]
        trace = self.trace_path()
        recorded = self.start_ranks(job, trace, collectives="digest")
        p = run([tool("dlreplay"), trace, "--dry-run"], timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        for r in range(2):
            self.assertIn("dlreplay: would run rank %d: %s" % (r, " ".join(job)), p.stderr)
        self.assertEqual(p.stdout, "")
        p = run([tool("dlreplay"), trace], timeout=300)  # --all-ranks: the only replay of this trace
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("relaunching every rank (--all-ranks)", p.stderr)
        self.assertIn("every rank (2) started by dlreplay as it was started (by hand, no launcher recorded)", p.stderr)
        # Both ranks write to dlreplay's stdout; unbuffered (PYTHONUNBUFFERED), print() writes a
        # line and its newline apart, so one rank's line may land inside another's.
        replayed = [l for l in p.stdout.replace("rank ", "\nrank ").splitlines() if l]
        for r in range(2):
            self.assertRegex(p.stderr, r"rank %d: (\d+) of \1 recorded steps verified bit-exact" % r)
            lines = [l for l in replayed if l.startswith("rank %d " % r)]
            self.assertEqual(lines, recorded[r][0].splitlines(), p.stderr)  # the same losses, NaN included
        self.assertIn("every rank replayed to the end, every step verified", p.stderr)
        p = run([tool("dlreplay"), trace, "--all-ranks", "--until", "nan"], timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)  # every rank replays to the end

    def test_fsdp_collectives_recorded_and_replayed_rank_alone_and_all_ranks(self):
        # FSDP (torch 2.x; torch 1.13's cannot be imported on Python 3.11) shards the model and
        # issues its own all-gathers (parameters) and reduce-scatters (gradients) through
        # torch.distributed's functions: each is recorded, a rank alone gets its results served,
        # and both ranks together verify both sides.
        major = run([PY, "-c", "import torch; print(torch.__version__)"], check=True).stdout.split(".")[0]
        if int(major) < 2:
            self.skipTest("torch 1.13's FSDP does not import on Python 3.11 (a dataclass with a mutable default)")
        job = [PY, FSDP_JOB, "--steps", "3"]
        trace = self.trace_path()
        recorded = self.start_ranks(job, trace)
        kinds = [e["event"]["collective"]["op"] for e in events(trace, kind="collective") if e["stream"] == "rank1"]
        # On gloo FSDP gathers parameters with all_gather (gloo has no all_gather_into_tensor).
        self.assertTrue({"all_gather_into_tensor", "all_gather"} & set(kinds), kinds)
        self.assertIn("reduce_scatter_tensor", kinds)
        p = run([tool("dlreplay"), trace, "--rank", "1"], timeout=240)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stderr, r"replayed to the end; (\d+) of \1 recorded steps verified bit-exact")
        self.assertRegex(p.stderr, r"collectives: (\d+) of \1 recorded issued; \d+ tensors verified; [1-9]\d* results served")
        self.assertEqual([l for l in p.stdout.splitlines() if l.startswith("rank 1 ")], recorded[1][0].splitlines())
        p = run([tool("dlreplay"), trace, "--all-ranks"], timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        for r in range(2):
            self.assertRegex(p.stderr, r"rank %d: (\d+) of \1 recorded steps verified bit-exact; collectives: (\d+) of \2"
                             % r)
        self.assertIn("every rank replayed to the end, every step verified", p.stderr)

    def test_all_ranks_a_rank_that_ends_otherwise_than_recorded_is_a_divergence(self):
        # Every step verifies, but rank 1 then exits 3 (the script changed after the recording):
        # not a verified replay.
        job = os.path.join(self.tmp, "ddp_copy.py")
        with open(DDP) as src, open(job, "w") as dst:
            dst.write(src.read())
        trace = self.trace_path()
        self.start_ranks([PY, job, "--steps", "2"], trace, collectives="digest")
        with open(job) as f:
            text = f.read()
        self.assertIn("    sys.exit(main(sys.argv[1:]))", text)
        with open(job, "w") as f:
            f.write(text.replace("    sys.exit(main(sys.argv[1:]))",
                                 "    main(sys.argv[1:])\n    sys.exit(3 if os.environ.get('RANK') == '1' else 0)"))
        p = run([tool("dlreplay"), trace, "--all-ranks"], timeout=300)
        self.assertEqual(p.returncode, 11, p.stderr)
        self.assertRegex(p.stderr, r"rank 1: (\d+) of \1 recorded steps verified bit-exact")
        self.assertIn("every rank verified every step, but the job ended otherwise (rank 1 exited with 3; "
                      "recorded: exit status 0)", p.stderr)

    def test_all_ranks_whose_script_simply_ends(self):
        # A rank script that returns from main (no sys.exit) recorded exit status -1 (its library
        # cannot know the code): --all-ranks said "the job ended otherwise ... recorded: exit
        # status -1" and exited 11 after every step verified (issue 28 item 9).
        job = os.path.join(self.tmp, "ddp_ends.py")
        with open(DDP) as src:
            text = src.read()
        self.assertIn("    sys.exit(main(sys.argv[1:]))", text)
        with open(job, "w") as dst:
            dst.write(text.replace("    sys.exit(main(sys.argv[1:]))", "    main(sys.argv[1:])"))
        trace = self.trace_path()
        self.start_ranks([PY, job, "--steps", "2"], trace, collectives="digest")
        p = run([tool("dlreplay"), trace, "--all-ranks"], timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("every rank replayed to the end, every step verified", p.stderr)
        self.assertNotIn("-1", p.stderr)

    def test_comm_hook_and_a_compiled_collective_on_hand_started_ranks(self):
        # A user DDP comm hook (its all_reduce recorded and served), and on torch 2.x an all_reduce
        # inside a torch.compile'd function: dynamo makes it a functional collective in the graph,
        # past the hooks, which the trace and the replay say rather than verify.
        compiled = _torch_major() >= 2
        job = [PY, DDP, "--steps", "4", "--comm-hook"] + (["--compiled-mean"] if compiled else [])
        plain = self.start_ranks(job)
        trace = self.trace_path()
        recorded = self.start_ranks(job, trace)
        for r in range(2):
            self.assertEqual(recorded[r][0], plain[r][0])  # losses, means, comm hook calls
        note = "torch.distributed collectives called inside torch.compile'd code run as functional collectives"
        notes = run([tool("dltrace"), "info", trace], timeout=120).stdout
        self.assertEqual(notes.count(note), 2 if compiled else 0)  # once per rank
        for r in range(2):
            p = run([tool("dlreplay"), trace, "--rank", str(r), "--until", "end"], timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("replayed to the end; 4 of 4 recorded steps verified bit-exact", p.stderr)
            # alone, the recorded gradients replace the bucket's all-reduce: the hook is said, not run
            self.assertIn("user comm hook calls: 0", p.stdout)
            self.assertIn("comm_hook: the job's DDP comm hook user_allreduce_hook is not run", p.stderr)
            self.assertRegex(p.stderr, r"collectives: (\d+) of \1 recorded issued")
            self.assertEqual(p.stderr.count("unverified: " + note), 1 if compiled else 0)
            losses = [l for l in p.stdout.splitlines() if " loss " in l]
            self.assertEqual(losses, [l for l in plain[r][0].splitlines() if " loss " in l])


def _torch_major():
    p = run([PY, "-c", "import torch; print(torch.__version__.split('.')[0])"], timeout=120)
    return int(p.stdout.strip() or 0)


if __name__ == "__main__":
    unittest.main()
