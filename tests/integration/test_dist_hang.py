"""Hangs and desyncs named (docs/distributed.md): 2 gloo ranks under torchrun stop meeting on
purpose (examples/dist_hang.py) with a short process-group timeout and --hang-after; the trace
names the suspect rank, the collective where they parted and, for a stuck rank, its stack line.
torchrun itself names rank 0 (the first to fail: it timed out waiting) as the root cause."""
import os
import subprocess

from harness import EXAMPLES, TraceTestCase, info, run, tool
from test_dist import NO_TORCHRUN, torchrun

JOB = os.path.join(EXAMPLES, "dist_hang.py")


class DistHangTest(TraceTestCase):
    def setUp(self):
        super().setUp()
        if NO_TORCHRUN:
            self.skipTest(NO_TORCHRUN)

    def record(self, fault, timeout="5", hang_after="1.5"):
        trace = self.trace_path("t.trace")
        argv = [tool("dlrecord"), "--hang-after", hang_after, "-o", trace, "--"] + \
            torchrun(2, os.path.join(self.tmp, "logs")) + [JOB, "--fault", fault, "--timeout", timeout]
        p = run(argv, timeout=240)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)  # the job failed, as without dlrecord
        hang = info(trace)["distributed"]["hang"]
        self.assertIsNotNone(hang, p.stderr)
        triage = run([tool("dltrace"), "triage", trace], timeout=60, check=True).stdout
        return trace, hang, triage

    def test_rank_stuck_before_the_collective_is_named_with_its_stack(self):
        trace, hang, triage = self.record("sleep")
        self.assertEqual(hang["kind"], "hang")
        self.assertEqual(hang["suspects"], [1])
        self.assertEqual(hang["waiting"], [0])
        self.assertEqual((hang["seq"], hang["op"], hang["step"]), (1, "all_reduce", 1))
        self.assertIn("rank 1 never reached collective #1 (all_reduce, step 1)", hang["why"][0])
        self.assertIn("dist_hang.py:22 in load_batch: time.sleep(args.sleep)", hang["why"][0])
        self.assertIn("category    Distributed hang", triage)
        self.assertIn('torchrun\'s "Root Cause"', triage)
        # The waiting rank's own stack was taken in the collective.
        events = run([tool("dltrace"), "events", trace, "--stream", "rank0", "--kind", "collectiveWait"],
                     timeout=60, check=True).stdout
        self.assertIn("hang after", events)
        self.assertIn("in #1 all_reduce group world", events)
        self.assertIn("dist.all_reduce(x)", events)

    def test_launchers_sigterm_takes_the_stuck_ranks_stack(self):
        # --hang-after longer than the job: only torchrun's SIGTERM (after rank 0 timed out) says
        # where rank 1 was; it still dies of SIGTERM as without dlrecord.
        _, hang, _ = self.record("sleep", timeout="3", hang_after="100")
        self.assertEqual(hang["suspects"], [1])
        self.assertIn("dist_hang.py:22 in load_batch: time.sleep(args.sleep)", hang["why"][0])
        self.assertIn("then stopped by SIGTERM", hang["why"][0])

    def test_desync_names_the_rank_that_called_another_collective(self):
        _, hang, triage = self.record("desync")
        self.assertEqual(hang["kind"], "desync")
        self.assertEqual(hang["suspects"], [1])
        self.assertIn("rank 1 called broadcast where rank 0 called all_reduce at collective #1 (step 1)",
                      hang["why"][0])
        self.assertIn("category    Collective desync", triage)

    def test_rank_that_ran_one_step_fewer(self):
        _, hang, triage = self.record("fewer")
        self.assertEqual(hang["suspects"], [1])
        self.assertEqual((hang["seq"], hang["op"]), (2, "all_reduce"))
        self.assertIn("rank 1 ended after completing collective #1 at step 2", hang["why"][0])
        self.assertIn("1 step(s) fewer than the others", hang["why"][0])
        self.assertIn("category    Distributed hang", triage)

    def test_rank_killed_with_sigkill(self):
        # Rank 0 is either waiting in collective #1 or stopped by torchrun before it: either way
        # rank 1, whose stream just ends, is the suspect.
        _, hang, triage = self.record("kill")
        self.assertEqual(hang["suspects"], [1])
        self.assertIn("rank 1 died after completing collective #0: its stream ends without an exit", hang["why"][0])
        self.assertIn("category    Distributed hang", triage)

    def test_hang_after_is_checked(self):
        p = run([tool("dlrecord"), "--hang-after", "soon", "-o", self.trace_path("x"), "--", "true"], timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--hang-after must be a number of seconds", p.stderr)


if __name__ == "__main__":
    import unittest
    unittest.main()
