"""GPU capture end to end.

Without a GPU (CI): the launcher wiring (CUDA_INJECTION64_PATH set, a user's own injection
library kept), and InitializeInjection called in a recorded process turning GPU capture off
with its reason while the recording goes on.  With a GPU: the example GPU job recorded and
replayed to its NaN, kernel launches checked step by step (skipped here, with the reason)."""
import json
import os
import unittest

from harness import EXAMPLES, PY, TraceTestCase, events, info, run, tool

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except Exception:  # no torch at all: the GPU half is skipped the same way
    HAVE_CUDA = False

INJECT = """
import ctypes, os, sys
print("injection", os.environ.get("CUDA_INJECTION64_PATH", ""))
lib = ctypes.CDLL(None)
lib.InitializeInjection()  # what the CUDA driver does at cuInit
lib.dlrr_gpu_capture_status.restype = ctypes.c_char_p
print("status", lib.dlrr_gpu_capture_status().decode())
"""


class GpuLauncherTest(TraceTestCase):
    def job(self):
        path = os.path.join(self.tmp, "inject.py")
        with open(path, "w") as f:
            f.write(INJECT)
        return [PY, path]

    def test_record_points_cuda_at_the_library_and_reports_capture_off(self):
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job(), check=True)
        lib = os.path.realpath(os.path.join(os.path.dirname(tool("dlrecord")), "..", "lib", "dlrr", "libdlrr.so"))
        injected = rec.stdout.splitlines()[0].split(" ", 1)[1]
        self.assertEqual(os.path.realpath(injected), lib)
        status = rec.stdout.splitlines()[1].split(" ", 1)[1]
        if status.startswith("on:"):
            self.skipTest("this machine has a usable GPU: capture started (%s)" % status)
        self.assertTrue(status.startswith("off: "), status)
        # The reason reaches dlrecord's summary and the trace; the recording itself is whole.
        self.assertIn(": GPU capture off: ", rec.stderr)
        doc = info(self.trace_path())
        self.assertEqual(doc["exit_code"], 0)
        notes = [e for e in events(self.trace_path(), kind="recorderStatus")]
        self.assertTrue(any(n["event"]["recorderStatus"]["message"].startswith("GPU capture off: ") for n in notes))
        rt = {}
        for e in events(self.trace_path(), kind="runtimeInfo"):
            for kv in e["event"]["runtimeInfo"]["items"]:
                rt[kv["key"]] = kv["value"]
        self.assertTrue(rt["gpu.capture"].startswith("off: "), rt)

    def test_a_users_injection_library_is_kept(self):
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job(),
                  env={"CUDA_INJECTION64_PATH": "/opt/theirs/libinject.so"}, check=True)
        self.assertIn("injection /opt/theirs/libinject.so", rec.stdout)
        self.assertIn("dlrecord: GPU capture off: another injection library is configured "
                      "(CUDA_INJECTION64_PATH=/opt/theirs/libinject.so); it is kept", rec.stderr)
        notes = [e["event"]["recorderStatus"]["message"] for e in events(self.trace_path(), kind="recorderStatus")]
        self.assertIn("GPU capture off: another injection library is configured "
                      "(CUDA_INJECTION64_PATH=/opt/theirs/libinject.so); it is kept", notes)

    def test_replay_points_cuda_at_the_library_too(self):
        run([tool("dlrecord"), "-o", self.trace_path(), "--"] + self.job(), check=True)
        rep = run([tool("dlreplay"), self.trace_path(), "--until", "end"])
        self.assertIn("injection ", rep.stdout)
        injected = rep.stdout.splitlines()[0].split(" ", 1)[1]
        self.assertTrue(injected.endswith("/libdlrr.so"), rep.stdout)


@unittest.skipUnless(HAVE_CUDA, "no CUDA device (torch.cuda.is_available() is false): GPU record/replay not run")
class GpuRecordReplayTest(TraceTestCase):
    def test_gpu_job_launches_recorded_and_replayed_to_nan(self):
        argv = [PY, os.path.join(EXAMPLES, "gpu_train.py"), "--steps", "30", "--explode-at", "20", "--require-cuda"]
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + argv, timeout=900, check=True)
        self.assertNotIn("GPU capture off", rec.stderr)
        launches = events(self.trace_path(), kind="cudaLaunch")
        per_step = {}
        for e in launches:
            per_step[e["event"]["step"]] = per_step.get(e["event"]["step"], 0) + 1
        self.assertTrue(all(per_step.get(s, 0) > 10 for s in range(20)), per_step)
        copies = events(self.trace_path(), kind="cudaMemcpy", step=3)
        self.assertTrue(any(c["event"]["cudaMemcpy"]["direction"] == "hostToDevice" and
                            c["event"]["cudaMemcpy"]["digest"] for c in copies))
        rep = run([tool("dlreplay"), self.trace_path(), "--until", "nan", "--json"], timeout=900)
        doc = json.loads(rep.stdout.strip().splitlines()[-1])
        self.assertEqual(doc["outcome"], "reached", rep.stderr)
        report = doc["report"]
        self.assertEqual(report.get("gpu.capture"), "on", report)
        self.assertEqual(report.get("launch.steps_checked"), report.get("launch.steps_matched"), report)
        self.assertNotIn("launch.divergence.step", report)


if __name__ == "__main__":
    unittest.main()
