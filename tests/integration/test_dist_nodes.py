"""A job of two machines (docs/distributed.md, "Several machines"): two network namespaces
joined by a veth pair stand in for two hosts, each running torchrun --nnodes=2 under its own
dlrecord into its own trace, as a cluster job would. Each machine's dlreplay --all-ranks
replays that machine's ranks through the recorded torchrun, meeting the other machine's
replay over the network (--net host: without it, dlreplay says why and runs nothing), and its
verdict is about the ranks it replayed. Needs root and ip(8); torchrun must be able to start
(torch 1.13 here; Debian 13's torch has no libuv for torchrun's store)."""
import os
import shutil
import subprocess
import unittest

from harness import EXAMPLES, PY, TraceTestCase, info, run, tool
from test_dist import NO_TORCHRUN

DDP = os.path.join(EXAMPLES, "ddp_train.py")
SUBNET = "10.213.%d.%d"


def why_not():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip"):
        return "needs ip(8) (iproute2)"
    if os.environ.get("DLRR_TEST_CHROOT"):
        return "network namespaces are not made inside the test chroot"
    return NO_TORCHRUN


class TwoMachinesTest(TraceTestCase):
    @classmethod
    def setUpClass(cls):
        cls.skip = why_not()
        if cls.skip:
            return
        tag = "%d" % (os.getpid() % 100000)
        cls.ns = ["dlrrn%sa" % tag, "dlrrn%sb" % tag]
        cls.dev = ["dlrv%sa" % tag, "dlrv%sb" % tag]
        cls.addr = [SUBNET % (os.getpid() % 200, 1), SUBNET % (os.getpid() % 200, 2)]
        cmds = [["ip", "netns", "add", cls.ns[0]], ["ip", "netns", "add", cls.ns[1]],
                ["ip", "link", "add", cls.dev[0], "type", "veth", "peer", "name", cls.dev[1]]]
        for i in range(2):
            cmds += [["ip", "link", "set", cls.dev[i], "netns", cls.ns[i]],
                     ["ip", "-n", cls.ns[i], "addr", "add", cls.addr[i] + "/24", "dev", cls.dev[i]],
                     ["ip", "-n", cls.ns[i], "link", "set", cls.dev[i], "up"],
                     ["ip", "-n", cls.ns[i], "link", "set", "lo", "up"]]
        for c in cmds:
            p = subprocess.run(c, capture_output=True, text=True)
            if p.returncode != 0:
                cls.tearDownClass()
                raise unittest.SkipTest("cannot make the two machines: %s: %s" % (" ".join(c), p.stderr.strip()))

    @classmethod
    def tearDownClass(cls):
        for ns in getattr(cls, "ns", []):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # takes its veth end along

    def setUp(self):
        super().setUp()
        if self.skip:
            self.skipTest(self.skip)

    def on(self, node, argv):
        # gloo binds to the interface named, not to what the host name resolves to.
        return ["ip", "netns", "exec", self.ns[node], "env", "GLOO_SOCKET_IFNAME=" + self.dev[node]] + argv

    def torchrun(self, node):
        return [PY, "-m", "torch.distributed.run", "--nnodes=2", "--node_rank=%d" % node, "--nproc_per_node=1",
                "--master_addr=" + self.addr[0], "--master_port=29533", "--redirects", "1", "--tee", "1",
                "--log_dir", os.path.join(self.tmp, "logs%d" % node), "--monitor_interval", "0.2"]

    def both(self, argv_of):
        """Runs argv_of(0) and argv_of(1) at the same time (the two machines); their results."""
        procs = [subprocess.Popen(argv_of(n), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(2)]
        out = []
        for p in procs:
            try:
                o, e = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise
            out.append((p.returncode, o, e))
        return out

    def test_each_machine_records_and_replays_its_ranks(self):
        job = [DDP, "--steps", "4"]
        traces = [self.trace_path("node%d.trace" % n) for n in range(2)]
        rec = self.both(lambda n: self.on(n, [tool("dlrecord"), "-q", "--collectives", "digest", "-o", traces[n],
                                              "--"] + self.torchrun(n) + job))
        for n, (rc, out, err) in enumerate(rec):
            self.assertEqual(rc, 0, err)
            self.assertIn("rank %d done" % n, out)
        for n in range(2):
            doc = info(traces[n])
            dist = doc["distributed"]
            self.assertEqual((dist["world_size"], [r["rank"] for r in dist["ranks"]]), (2, [n]), dist)

        # Without --net host the replay could not meet the other machine: said, nothing run.
        p = run(self.on(0, [tool("dlreplay"), traces[0], "--all-ranks"]))
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("this trace holds 1 of the job's 2 ranks", p.stderr)
        self.assertIn("--all-ranks --net host", p.stderr)
        self.assertNotIn("rank 0 done", p.stdout)

        rep = self.both(lambda n: self.on(n, [tool("dlreplay"), traces[n], "--all-ranks", "--net", "host"]))
        for n, (rc, out, err) in enumerate(rep):
            self.assertEqual(rc, 0, err)
            self.assertIn("every rank recorded on this machine (1 of world size 2)", err)
            self.assertRegex(err, r"rank %d: (\d+) of \1 recorded steps verified bit-exact; collectives: (\d+) of \2"
                             % n)
            self.assertIn("every rank of this machine (1 of world size 2) replayed to the end, every step verified",
                          err)
            # The replay computed the same losses the recording printed.
            self.assertEqual([l for l in out.splitlines() if " loss " in l],
                             [l for l in rec[n][1].splitlines() if " loss " in l])


if __name__ == "__main__":
    unittest.main()
