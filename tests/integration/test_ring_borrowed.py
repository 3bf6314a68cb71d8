"""The failure ring holds host module outputs by reference (docs/recording.md): what a failure
writes is what the hooks digested, outputs changed in place after their hook (BatchNorm, then
ReLU(inplace=True)) included, and the tensors reach `dltrace dump` as the job computed them."""
import os
import re
import unittest

from harness import PY, TraceTestCase, events, info, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
INPLACE_NAN = os.path.join(HERE, "jobs", "inplace_nan.py")
AT = 4  # the step whose input holds a NaN


def load(path):
    """The array of an .npy file, through the interpreter the jobs run on (it has numpy)."""
    p = run([PY, "-c", "import sys, numpy; a = numpy.load(sys.argv[1]); print(a.dtype, a.shape); "
                       "sys.stdout.write(a.tobytes().hex())", path], check=True)
    head, data = p.stdout.split("\n", 1)
    return head, bytes.fromhex(data)


class BorrowedRingTest(TraceTestCase):
    def record(self, at):
        out = os.path.join(self.tmp, "saved")
        os.makedirs(out, exist_ok=True)
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, INPLACE_NAN, "--out", out,
                 "--at", str(at)])
        self.assertEqual(p.returncode, 0, p.stderr)
        m = re.search(r"^borrowed held (\d+) eager (\S*)$", p.stdout, re.M)
        self.assertIsNotNone(m, p.stdout + p.stderr)  # the native hooks digested the outputs
        return out, int(m.group(1)), m.group(2).split(",")

    def test_ring_tensors_of_the_failing_step_and_the_one_before_are_the_digested_bytes(self):
        out, held, eager = self.record(AT)
        # bn's output is changed by the ReLU after bn's hook: its path is copied from then on.
        self.assertEqual(eager, ["bn"])
        self.assertEqual(held, 0, "the failure wrote the ring: no reference is held any more")
        doc = info(self.trace_path())
        self.assertEqual(doc["failure"]["step"], AT)
        self.assertEqual(doc["failure"]["where"], "fc1")
        self.assertEqual(doc["failure"]["ring_tensors_changed"], 0)
        kept = {(e["event"]["step"], e["event"]["tensor"]["path"]) for e in events(self.trace_path(), kind="tensor")}
        for step in (AT - 1, AT):
            for module in ("bn", "act"):
                self.assertIn((step, module), kept)
                dumped = os.path.join(self.tmp, "%s_%d_dump.npy" % (module, step))
                d = run([tool("dltrace"), "dump", self.trace_path(), "--step", str(step), "--tensor", module,
                         "-o", dumped])
                self.assertEqual(d.returncode, 0, d.stderr)
                self.assertEqual(load(dumped), load(os.path.join(out, "%s_%d.npy" % (module, step))),
                                 "step %d %s: the ring's bytes are what its hook saw" % (step, module))
        t = run([tool("dltrace"), "info", self.trace_path()])
        self.assertNotIn("changed in place", t.stdout)

    def test_without_a_failure_the_hook_holds_the_ring_steps_and_one_more(self):
        # No NaN: 4 outputs a step (fc1, act, fc2, the model; bn is copied from step 1 on),
        # held for the ring's 2 steps plus the one the ring has just evicted.
        _, held, eager = self.record(99)
        self.assertEqual(eager, ["bn"])
        self.assertGreater(held, 0)
        self.assertLessEqual(held, 3 * 5)
        self.assertIsNone(info(self.trace_path())["failure"])

    def test_inference_tensors_are_borrowed_without_a_version_counter(self):
        # torch.inference_mode's outputs have no `_version`: held all the same, capture stays on.
        job = os.path.join(self.tmp, "infer.py")
        with open(job, "w") as f:
            f.write("import torch\nfrom torch import nn\nm = nn.Sequential(nn.Linear(8, 8), nn.ReLU())\n"
                    "opt = torch.optim.SGD(m.parameters(), lr=0.1)\nfor step in range(4):\n"
                    "    m(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()\n"
                    "    with torch.inference_mode():\n        m(torch.randn(4, 8))\n"
                    "from dlrr_hook import _dlrr_native\nprint('held', _dlrr_native.borrowed_state()[0])\n")
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, job])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertGreater(int(re.search(r"^held (\d+)$", p.stdout, re.M).group(1)), 0)
        digests = events(self.trace_path(), kind="digest", step=3)
        self.assertEqual(sum(e["event"]["digest"]["path"] == "1 (ReLU)" for e in digests), 2)  # train and eval
        self.assertEqual(events(self.trace_path(), kind="recorderStatus"), [])


if __name__ == "__main__":
    unittest.main()
