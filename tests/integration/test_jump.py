"""Jump replay (issue 15): snapshots while recording, dlreplay jumping to the latest snapshot
before the target, fast-forwarding the steps before it and verifying every step after it."""
import json
import os
import re
import signal
import subprocess
import time
import unittest

from harness import PY, ROOT, TraceTestCase, children, info, run, tool

JOB = os.path.join(ROOT, "tests", "integration", "jobs", "jump_job.py")
NONDETERMINISTIC = os.path.join(ROOT, "tests", "integration", "jobs", "nondeterministic_step.py")


def record(trace, mode, *job_args, every="50steps"):
    p = run([tool("dlrecord"), "-o", trace, "--snapshot-every", every, "--", PY, JOB, mode] + list(job_args))
    if p.returncode != 0:
        raise AssertionError("dlrecord failed:\n" + p.stderr)
    return p


def replay(trace, *args):
    p = run([tool("dlreplay"), trace, "--json"] + list(args))
    doc = json.loads(p.stdout.splitlines()[-1]) if p.stdout.strip() else {}
    return p, doc


class JumpReplayTest(TraceTestCase):
    def check_reaches_the_failure(self, mode, *job_args):
        trace = self.trace_path()
        record(trace, mode, *job_args)
        doc = info(trace)
        fail = doc["failure"]["step"]
        self.assertGreaterEqual(fail, 150, "the job must go non-finite late for a jump to mean anything")
        snaps = doc["snapshots"]
        # The job stops at its first non-finite *loss*; the recorded failure is the first
        # non-finite value, which may be a module output some steps earlier (torch 2.6: an
        # activation overflows before the loss does), so snapshots may go on past it.
        periodic = [s["step"] for s in snaps if s["reason"] == "periodic" and s["step"] <= fail]
        self.assertEqual(periodic, list(range(50, fail + 1, 50)))
        self.assertEqual([s["step"] for s in snaps if s["reason"] == "failure"], [fail])
        # Unchanged tensors are stored once: the later snapshots add less than they hold.
        self.assertTrue(all(s["new_bytes"] <= s["tensor_bytes"] for s in snaps))
        # Jump to a periodic snapshot well before the failure: every step after it is verified
        # bit-exactly up to the failing step, where the replay stops before the recorded value.
        jump = periodic[-3]
        p, rep = replay(trace, "--from", "step=%d" % jump)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["jump_step"], jump)
        self.assertEqual(rep["report"]["stop.step"], fail)
        self.assertEqual(rep["verified_steps"], fail - jump, p.stderr)
        self.assertIn("jumping to the snapshot of step %d" % jump, p.stderr)
        self.assertEqual(rep["report"]["stop"], "target")
        # The default picks the latest periodic snapshot; --from snapshot may take the failure
        # snapshot: the failing step replayed alone.
        p, rep = replay(trace)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["jump_step"], periodic[-1])
        self.assertEqual(rep["verified_steps"], fail - periodic[-1])
        p, rep = replay(trace, "--from", "snapshot")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["jump_step"], fail)
        self.assertEqual(rep["report"]["stop.step"], fail)
        return trace, fail

    def test_dataloader_mlp_with_lambda_lr_and_gradient_accumulation(self):
        trace, fail = self.check_reaches_the_failure("loader")
        # To the end from a snapshot: every step after the jump verified, none before it counted.
        p, rep = replay(trace, "--from", "step=100", "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        # to the job's last step (its non-finite loss: the failure step or a few after it)
        self.assertGreaterEqual(rep["recorded_steps"], fail + 1)
        self.assertEqual(rep["verified_steps"], rep["recorded_steps"] - 100)

    def test_loop_without_dataloader_computing_its_lr_from_its_counter(self):
        self.check_reaches_the_failure("lm")

    def test_loop_without_optimizer_updating_by_hand(self):  # steps counted by backward()
        self.check_reaches_the_failure("lm", "--by-hand")

    def test_check_uses_the_failure_snapshot(self):
        trace = self.trace_path()
        record(trace, "lm", every="off")
        doc = info(trace)
        self.assertEqual([s["reason"] for s in doc["snapshots"]], ["failure"])
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("jumping to the snapshot of step %d (the failure snapshot)" % doc["failure"]["step"], p.stderr)
        self.assertIn("deterministic: reproduced at step %d" % doc["failure"]["step"], p.stderr)

    def test_an_exception_before_backward_takes_the_failure_snapshot(self):
        trace = self.trace_path()
        p = run([tool("dlrecord"), "-o", trace, "--snapshot-every", "off", "--", PY, JOB, "loader",
                 "--raise-at", "61"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("KeyError", p.stderr)
        doc = info(trace)
        self.assertEqual(doc["failure"]["step"], 61)
        self.assertEqual([(s["step"], s["reason"]) for s in doc["snapshots"]], [(61, "failure")])
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("jumping to the snapshot of step 61 (the failure snapshot)", p.stderr)
        self.assertIn("deterministic: reproduced at step 61", p.stderr)
        # Raised after the step's backward() (its gradients have moved on): no snapshot, and
        # --check replays every step instead.
        after = self.trace_path("after.trace")
        p = run([tool("dlrecord"), "-o", after, "--snapshot-every", "off", "--", PY, JOB, "loader",
                 "--raise-at", "61", "--after-backward"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(info(after)["snapshots"], [])
        p = run([tool("dlreplay"), after, "--check"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("jumping", p.stderr)
        self.assertIn("deterministic: reproduced at step 61", p.stderr)

    def test_state_the_snapshot_cannot_hold_is_reported_never_verified(self):
        trace = self.trace_path()
        record(trace, "pyside")
        fail = info(trace)["failure"]["step"]
        p, rep = replay(trace, "--from", "step=100")
        self.assertEqual(p.returncode, 11, p.stderr)
        self.assertIn("jump replay diverged after the jump at step 100", rep["message"])
        self.assertIn("run with --from start for a full replay", rep["message"])
        # computed a second time from the snapshot: the same values, a deterministic step
        self.assertIn("was not restored (a second computation from the snapshot computed the same: the step is "
                      "deterministic)", rep["message"])
        self.assertNotIn("non-deterministic", rep["message"])
        self.assertEqual(rep["verified_steps"], 0)
        # The full replay verifies it.
        p, rep = replay(trace, "--from", "start")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["verified_steps"], fail)

    def test_a_non_deterministic_step_is_named_not_blamed_on_the_snapshot(self):
        # Steps 0-5 deterministic, from step 6 on a module's output depends on the clock: the replay
        # verifies up to step 5, and from the snapshot of step 6 two computations of the step differ.
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-q", "--snapshot-every", "2steps", "-o", trace, "--", PY, NONDETERMINISTIC,
                   "10", "6", "8"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        p, rep = replay(trace, "--from", "step=2", "--until", "step=6")
        self.assertEqual((p.returncode, rep["verified_steps"]), (0, 4), p.stderr)
        p, rep = replay(trace, "--from", "step=6", "--until", "end")
        self.assertEqual(p.returncode, 11, p.stderr)
        self.assertIn("diverged at step 6: module output 1 (Jitter) (call 0, output 0): recorded hash", rep["message"])
        self.assertIn("the computation is non-deterministic: computed twice from the same restored state (the "
                      "snapshot of step 6), it differs at module output 1 (Jitter) (call 0, output 0) of step 6",
                      rep["message"])
        self.assertNotIn("was not restored", rep["message"])
        # --check replays the failing step (8: its target is Inf, its loss too) from its failure snapshot
        p = run([tool("dlreplay"), trace, "--check"])
        self.assertEqual(p.returncode, 13, p.stderr)
        self.assertIn("dlreplay: not reproduced: diverged at step 8: module output 1 (Jitter)", p.stderr)
        self.assertIn("it differs at module output 1 (Jitter) (call 0, output 0) of step 8\n", p.stderr)
        self.assertNotIn("transient fault", p.stderr)
        self.assertNotIn("was not restored", p.stderr)

    def test_reduce_lr_on_plateau_state_is_restored(self):
        # ReduceLROnPlateau is no LRScheduler (torch 1.x) or skips its __init__ (2.x): its best
        # loss and bad-epoch count must still be in the snapshot, or the fast-forward's (the
        # model not updated) decide the later learning rates and the replay falsely diverges.
        job = os.path.join(ROOT, "tests", "integration", "jobs", "plateau_job.py")
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--snapshot-every", "2steps", "--", PY, job])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        p, rep = replay(trace, "--from", "step=4", "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual((rep["jump_step"], rep["verified_steps"], rep["recorded_steps"]), (4, 12, 16), p.stderr)
        self.assertEqual(p.stdout.splitlines()[4:-1], rec.stdout.splitlines()[4:])  # the last line: --json's

    def test_state_the_job_keeps_itself_diverges_where_it_first_acts(self):
        # The same rule in the job's own code (plateau_job.py --own): its state is no snapshot's.
        # It acts at an epoch's end, steps after the jump: the replay says that the steps from
        # the jump verified, the step that diverged (not "after step 1", counted from 0), and
        # that such state may be why, as it does when the jump step itself diverges.
        job = os.path.join(ROOT, "tests", "integration", "jobs", "plateau_job.py")
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-q", "-o", trace, "--snapshot-every", "2steps", "--", PY, job, "--own"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        p = run([tool("dlreplay"), trace, "--from", "step=4", "--until", "end"])
        self.assertEqual(p.returncode, 11, p.stderr)
        m = re.search(r"dlreplay: jump replay diverged at step (\d+), after the jump to step 4 \(last verified "
                      r"step (\d+)\): parameter ", p.stderr)
        self.assertIsNotNone(m, p.stderr)
        self.assertEqual(int(m.group(2)), int(m.group(1)) - 1)
        self.assertIn("was not restored and may have changed it (a second computation from the snapshot computed "
                      "the same: the step is deterministic); run with --from start for a full replay", p.stderr)
        self.assertIn("dlreplay:   step: %s (diverged; no step open when it stopped)\n" % m.group(1), p.stderr)

    def test_torchvision_resnet18_with_steplr(self):
        trace = self.trace_path()
        record(trace, "vision", "--steps", "12", every="4steps")
        doc = info(trace)
        self.assertEqual([s["step"] for s in doc["snapshots"]], [4, 8])
        p, rep = replay(trace, "--from", "step=8", "--until", "end")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["verified_steps"], 4)
        self.assertIn("jump.restored", rep["report"])
        self.assertNotIn("warning", rep["report"])

    def test_kill_9_leaves_readable_snapshots(self):
        trace = self.trace_path()
        proc = subprocess.Popen([tool("dlrecord"), "-o", trace, "--snapshot-every", "20steps", "--", PY, JOB, "loader",
                                 "--growth", "1.0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            snaps = []
            deadline = time.monotonic() + 120
            while len(snaps) < 3 and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                p = run([tool("dltrace"), "info", trace, "--json"])
                if p.returncode == 0:
                    snaps = json.loads(p.stdout).get("snapshots", [])
            self.assertGreaterEqual(len(snaps), 3, "the job never wrote three snapshots")
            job = children(proc.pid)
            self.assertTrue(job)
            os.kill(job[0], signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        doc = info(trace)
        steps = [s["step"] for s in doc["snapshots"]]
        self.assertGreaterEqual(len(steps), 3)
        self.assertTrue(all(s < doc["steps"] for s in steps), (steps, doc["steps"]))
        last = steps[-1]
        p, rep = replay(trace, "--from", "snapshot", "--until", "step=%d" % (doc["steps"] - 1))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(rep["jump_step"], last)
        self.assertEqual(rep["verified_steps"], doc["steps"] - 1 - last)


if __name__ == "__main__":
    unittest.main()
