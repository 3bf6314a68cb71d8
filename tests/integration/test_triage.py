"""Failure triage end to end: one small failing job per category this CPU machine can
produce (jobs/triage/), recorded with dlrecord; `dltrace triage` names the category, the
dimension, the evidence and where in the job it happened; `dlreplay --check` says whether
the failure reproduces; `dltrace env` / `env-diff` show and compare the environment.
GPU-only categories are covered by tests/unit/TriageClassifierTest.cc on synthetic records."""
import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from harness import EXAMPLES, PY, TraceTestCase, dataset, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = os.path.join(HERE, "jobs", "triage")
CORRUPT_INDEX = 1365  # examples/prepare_data.py: the sample with +inf pixels
SEED_NAN_STEP = 30    # examples/train.py --seed 8


def job(name):
    return os.path.join(JOBS, name)


class TriageTest(TraceTestCase):
    def test_env_diff_reads_an_import_names_version_as_the_recording_did(self):
        # torchvision imports PIL, whose distribution is Pillow: on the machine that recorded
        # the trace env-diff must find the same version, not "<installed, version unknown>".
        p = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY, "-c",
                 "import torch, torchvision, PIL; print(PIL.__version__)"])
        self.assertEqual(p.returncode, 0, p.stderr)
        d = run([tool("dltrace"), "env-diff", self.trace_path()], timeout=120)
        self.assertNotIn("version unknown", d.stdout)
        self.assertNotIn("package.PIL", d.stdout)
        self.assertEqual(d.returncode, 0, d.stdout + d.stderr)

    def record(self, argv, name="t.trace", env=None, prefix=None, cwd=None, timeout=300):
        trace = self.trace_path(name)
        cmd = [tool("dlrecord"), "-q", "-o", trace, "--"] + argv
        if prefix:
            cmd = prefix + cmd
        p = run(cmd, env=env, cwd=cwd, timeout=timeout)
        self.assertTrue(os.path.isdir(trace), p.stderr)
        return p, trace

    def triage(self, trace):
        p = run([tool("dltrace"), "triage", trace, "--json"])
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def check(self, trace, *args):
        p = run([tool("dlreplay"), trace, "--check", "--yes"] + list(args))
        return p

    def assertCategory(self, doc, category, dimension, phase=None):
        self.assertEqual(doc["category"], category, json.dumps(doc, indent=1))
        self.assertEqual(doc["dimension"], dimension)
        if phase:
            self.assertEqual(doc["phase"], phase, doc["where"])

    def assertEvidence(self, doc, *needles):
        text = "\n".join(doc["evidence"])
        for n in needles:
            self.assertIn(n, text, json.dumps(doc, indent=1))

    # ---------------------------------------------------------------- execution environment
    def test_path_not_found_names_the_path_and_the_other_missing_ones(self):
        root = os.path.join(self.tmp, "mnt-data")
        p, trace = self.record([PY, job("missing_path.py"), root])
        self.assertEqual(p.returncode, 1)
        doc = self.triage(trace)
        self.assertCategory(doc, "path_not_found", "execution_environment", "initialisation")
        self.assertEqual(doc["evidence"][0], "FileNotFoundError: %s/val.json" % root)
        self.assertEvidence(doc, "recorded: open %s/val.json failed with ENOENT" % root,
                            "other missing paths under /tmp", "cache/split.json", "checkpoints/last.pt")
        self.assertEqual(doc["determinism"], "deterministic")
        self.assertIn("missing_path.py:", doc["location"])
        self.assertEqual(doc["lost"]["steps"], 0)
        # Zero steps and an exception: replay still reaches it.
        c = self.check(trace)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("deterministic: reproduced during initialisation (before the first step)", c.stderr)
        self.assertIn("triage: Path not found", c.stderr)
        # Once the file exists the failure does not repeat: replay warns first, then says so.
        os.makedirs(root)
        with open(os.path.join(root, "val.json"), "w") as f:
            f.write("[1, 2]")
        c = self.check(trace)
        self.assertEqual(c.returncode, 13, c.stderr)
        self.assertIn("not reproduced", c.stderr)
        self.assertIn("missing: %s/val.json -> <exists>" % root, c.stderr)

    def test_missing_module(self):
        p, trace = self.record([PY, job("missing_module.py")])
        self.assertEqual(p.returncode, 1)
        doc = self.triage(trace)
        self.assertCategory(doc, "library_not_found", "execution_environment", "initialisation")
        self.assertEvidence(doc, "ModuleNotFoundError: No module named 'dlrr_no_such_module'",
                            "Python module 'dlrr_no_such_module' is not installed", "top-level packages the job had imported")

    def test_missing_shared_library(self):
        p, trace = self.record([PY, job("missing_library.py")])
        self.assertEqual(p.returncode, 1)
        doc = self.triage(trace)
        self.assertCategory(doc, "library_not_found", "execution_environment")
        self.assertEvidence(doc, "dlopen(libdlrr_no_such_library.so.12) failed: libdlrr_no_such_library.so.12: "
                                 "cannot open shared object file", "LD_LIBRARY_PATH")
        # The job's own message was not consumed by the recorder reading dlerror().
        self.assertIn("OSError: libdlrr_no_such_library.so.12: cannot open shared object file", p.stderr)

    def test_gpu_job_where_torch_has_no_cuda(self):
        # The CUDA-side "library missing" that a CPU machine can really produce: the image's
        # torch is a CPU build (GPU OOM and a missing libcudart need the GPU machine).
        probe = run([PY, "-c", "import torch; print(torch.backends.cuda.is_built())"])
        if probe.stdout.strip() != "False":
            self.skipTest("this torch is built with CUDA")
        p, trace = self.record([PY, job("gpu_job_cpu_torch.py")])
        self.assertEqual(p.returncode, 1)
        self.assertIn("AssertionError: Torch not compiled with CUDA enabled", p.stderr)
        doc = self.triage(trace)
        self.assertCategory(doc, "library_not_found", "execution_environment", "initialisation")
        self.assertEvidence(doc, "AssertionError: Torch not compiled with CUDA enabled",
                            "the installed framework build does not support this GPU (or has no CUDA)")
        self.assertIn("gpu_job_cpu_torch.py:6", doc["location"])
        self.assertEqual(doc["determinism"], "deterministic")

    def test_permission_denied_as_nobody(self):
        if os.getuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv to run the job as nobody")
        shared = os.path.join(self.tmp, "shared")
        os.makedirs(shared)
        os.chmod(self.tmp, 0o755)
        os.chmod(shared, 0o777)
        secret = os.path.join(shared, "secret.txt")
        with open(secret, "w") as f:
            f.write("root only\n")
        os.chmod(secret, 0o600)
        trace = os.path.join(shared, "t.trace")
        p = run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", tool("dlrecord"), "-q", "-o", trace,
                 "--", PY, job("permission_denied.py"), secret], env={"HOME": shared})
        self.assertEqual(p.returncode, 1, p.stderr)
        doc = self.triage(trace)
        self.assertCategory(doc, "permission_denied", "execution_environment", "initialisation")
        self.assertEvidence(doc, "PermissionError: %s" % secret, "recorded: open %s failed with EACCES" % secret,
                            "the job ran as nobody (uid 65534)")

    def test_killed_from_outside(self):
        trace = self.trace_path()
        proc = subprocess.Popen([tool("dlrecord"), "-q", "-o", trace, "--", PY, job("sleeper.py")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.assertEqual(proc.stdout.readline().strip(), "ready")
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)  # dlrecord forwards it to the job
        proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 128 + signal.SIGTERM)
        doc = self.triage(trace)
        self.assertCategory(doc, "external_signal", "execution_environment")
        self.assertEqual(doc["determinism"], "nondeterministic")
        self.assertIn("SIGTERM", doc["summary"])
        c = self.check(trace)
        self.assertEqual(c.returncode, 13, c.stderr)
        self.assertIn("not reproduced: killed by SIGTERM", c.stderr)
        self.assertIn("a non-deterministic kind of failure", c.stderr)

    # ---------------------------------------------------------------- general code errors
    def test_key_error_in_a_training_step(self):
        p, trace = self.record([PY, job("key_error.py")])
        self.assertEqual(p.returncode, 1)
        doc = self.triage(trace)
        self.assertCategory(doc, "key_not_found", "general_code_error", "training")
        self.assertEqual(doc["step"], 2)
        self.assertEvidence(doc, "KeyError: 'accuracy'")
        self.assertEqual(doc["lost"]["steps"], 2)  # step 2 was still open when its logging code failed
        self.assertGreater(doc["lost"]["training_seconds"], 0)
        c = self.check(trace)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("deterministic: reproduced at step 2", c.stderr)

    def test_type_error(self):
        p, trace = self.record([PY, job("type_error.py")])
        doc = self.triage(trace)
        self.assertCategory(doc, "type_mismatch", "general_code_error", "initialisation")
        self.assertEvidence(doc, "TypeError: join() argument must be str")
        self.assertIn("called from type_error.py:5", doc["location"])

    def test_attribute_error(self):
        p, trace = self.record([PY, job("attribute_error.py")])
        doc = self.triage(trace)
        self.assertCategory(doc, "attribute_not_found", "general_code_error")
        self.assertEvidence(doc, "'Net' object has no attribute 'fc2'")

    def test_illegal_launch_argument(self):
        p, trace = self.record([PY, job("bad_args.py"), "--lr", "abc"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("invalid float value: 'abc'", p.stderr)  # argparse's own message is unchanged
        doc = self.triage(trace)
        self.assertCategory(doc, "illegal_argument", "general_code_error", "initialisation")
        self.assertEvidence(doc, "argparse.ArgumentError: bad_args.py: error: argument --lr: invalid float value: 'abc'",
                            "launch command: ")
        self.assertIn("bad_args.py:", doc["location"])
        c = self.check(trace)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("deterministic: reproduced", c.stderr)

    def test_syntax_error_in_an_imported_module(self):
        p, trace = self.record([PY, job("syntax_error.py")], cwd=JOBS, env={"PYTHONDONTWRITEBYTECODE": "1"})
        doc = self.triage(trace)
        self.assertCategory(doc, "syntax_error", "general_code_error")
        self.assertEvidence(doc, "SyntaxError:", "broken_module.py", "the code ran under Python 3.")

    def test_native_crash(self):
        tiny = os.path.join(HERE, "jobs", "tiny_train.py")
        p, trace = self.record([PY, tiny, "--steps", "5", "--segv-at", "2"])
        self.assertEqual(p.returncode, 128 + signal.SIGSEGV)
        doc = self.triage(trace)
        self.assertCategory(doc, "native_crash", "general_code_error", "training")
        self.assertEqual(doc["step"], 2)
        self.assertEvidence(doc, "killed by SIGSEGV", "Python stack of the crashing thread:",
                            "in the job's code: File \"%s\"" % tiny,
                            "SIGSEGV: address not mapped (SEGV_MAPERR) at 0x0: a null pointer dereference")
        self.assertEqual(doc["determinism"], "unknown")
        c = self.check(trace)
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("deterministic: reproduced at step 2", c.stderr)

    # ---------------------------------------------------------------- deep-learning specific
    def test_tensor_mismatch_in_evaluation(self):
        p, trace = self.record([PY, job("tensor_mismatch.py")])
        doc = self.triage(trace)
        self.assertCategory(doc, "tensor_mismatch", "deep_learning", "evaluation")
        self.assertEvidence(doc, "mat1 and mat2 shapes cannot be multiplied (8x10 and 8x16)")
        self.assertIn("evaluation (loader 1, batch 0), after training step 3", doc["where"])
        self.assertEqual(doc["lost"]["steps"], 4)

    def test_loss_nan_in_the_example_job(self):
        data = os.path.join(self.tmp, "data")
        shutil.copytree(dataset(), data)
        p, trace = self.record([PY, os.path.join(EXAMPLES, "train.py"), "--data", data, "--seed", "8"],
                               env={"OMP_NUM_THREADS": "1"})
        self.assertEqual(p.returncode, 0)  # an unguarded job trains on after the NaN
        doc = self.triage(trace)
        self.assertCategory(doc, "loss_nan", "deep_learning", "training")
        self.assertEqual(doc["step"], SEED_NAN_STEP)
        self.assertEvidence(doc, "in output of conv1 at step %d" % SEED_NAN_STEP,
                            "non-finite from step %d on" % SEED_NAN_STEP,
                            "(dataset index %d)" % CORRUPT_INDEX)
        self.assertEqual(doc["lost"]["steps"], SEED_NAN_STEP)
        shutil.rmtree(data)
        c = self.check(trace, "--json")
        self.assertEqual(c.returncode, 0, c.stderr)
        result = json.loads(c.stdout.strip().splitlines()[-1])
        self.assertTrue(result["check"]["reproduced"])
        self.assertEqual(result["check"]["category"], "loss_nan")
        self.assertIn("deterministic: reproduced at step %d" % SEED_NAN_STEP, result["check"]["verdict"])

    def test_cpu_out_of_memory_under_ulimit(self):
        # torch needs about 1 GiB of address space to import; 16 GiB cannot fit under 4 GB.
        p, trace = self.record([PY, job("cpu_oom.py")], prefix=["prlimit", "--as=4000000000"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("allocating", p.stdout)
        doc = self.triage(trace)
        self.assertCategory(doc, "cpu_out_of_memory", "deep_learning")
        self.assertEvidence(doc, "DefaultCPUAllocator: can't allocate memory", "address-space limit (ulimit -v) 3.7 GiB")
        self.assertEqual(doc["determinism"], "deterministic")

    # ---------------------------------------------------------------- data
    def test_corrupt_json(self):
        path = os.path.join(self.tmp, "annotations.json")
        with open(path, "w") as f:
            f.write('[{"image": "0001.jpg", "label": 3}, {"image": "0002.jpg", "lab')
        p, trace = self.record([PY, job("corrupt_json.py"), path])
        doc = self.triage(trace)
        self.assertCategory(doc, "corrupt_data", "data")
        self.assertEvidence(doc, "json.decoder.JSONDecodeError: Unterminated string")

    def test_corrupt_record_in_a_dataloader_worker(self):
        root = os.path.join(self.tmp, "records")
        os.makedirs(root)
        for i in range(8):
            with open(os.path.join(root, "%d.json" % i), "w") as f:
                f.write(json.dumps({"x": [float(i)] * 4, "y": i % 2}))
        with open(os.path.join(root, "5.json"), "w") as f:
            f.write('{"x": [5.0, 5.0, 5.0')  # truncated
        p, trace = self.record([PY, job("corrupt_record_worker.py"), root])
        self.assertEqual(p.returncode, 1, p.stderr)
        doc = self.triage(trace)
        self.assertCategory(doc, "corrupt_data", "data", "training")
        self.assertEvidence(doc, "raised in a DataLoader worker process, at decoder.py:")
        self.assertEqual(doc["where"], "training step 1, loading the next batch")
        self.assertEqual(doc["step"], 1)
        c = self.check(trace)  # replay serves the recorded batches and stops where loading failed
        self.assertEqual(c.returncode, 0, c.stderr)
        self.assertIn("deterministic: reproduced", c.stderr)

    def test_undecodable_bytes(self):
        path = os.path.join(self.tmp, "captions.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("un café\nune crème brûlée\n")
        p, trace = self.record([PY, job("bad_encoding.py"), path], env={"LANG": "C"})
        doc = self.triage(trace)
        self.assertCategory(doc, "unexpected_encoding", "data")
        self.assertEvidence(doc, "'ascii' codec can't decode byte 0xc3", "LANG=C")

    def test_a_failed_exec_in_a_vfork_child_does_not_end_the_recording(self):
        p, trace = self.record([PY, job("failed_exec.py")])
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(run([tool("dltrace"), "info", trace, "--json"], check=True).stdout)
        self.assertEqual(doc["steps"], 4)
        main = [x for x in doc["processes"] if x["role"] == "process"][0]
        self.assertTrue(main["clean"])
        self.assertNotEqual(main["exit_code"], 255)  # the child's _exit(255) is not the job's
        self.assertEqual(self.triage(trace)["category"], "none")

    # ---------------------------------------------------------------- text output, env, env-diff
    def test_text_output_and_env_commands(self):
        p, trace = self.record([PY, job("key_error.py")], env={"OMP_NUM_THREADS": "1", "DLRR_TEST_TOKEN": "s3cret"})
        t = run([tool("dltrace"), "triage", trace])
        self.assertEqual(t.returncode, 0, t.stderr)
        for label in ("failure", "category", "evidence", "where", "location", "lost", "retry", "advice"):
            self.assertRegex(t.stdout, r"(?m)^%s +\S" % label)
        self.assertIn("Key not found  [General code error]", t.stdout)

        e = run([tool("dltrace"), "env", trace, "--json"])
        self.assertEqual(e.returncode, 0, e.stderr)
        env = json.loads(e.stdout)
        self.assertEqual(env["launcher"]["command"], [PY, job("key_error.py")])
        self.assertEqual(env["env"]["OMP_NUM_THREADS"], "1")
        self.assertEqual(env["env"]["DLRR_TEST_TOKEN"], "<redacted>")
        self.assertIn("DLRR_TEST_TOKEN", env["redacted"])
        main = env["processes"][0]
        # The recorded facts typed for JSON readers (issue 32): counts are numbers, flags booleans,
        # other facts (versions, the environment) strings.
        self.assertEqual(main["runtime"]["torch.num_threads"], 1)
        self.assertIs(main["runtime"]["cudnn.enabled"], True)
        self.assertIs(main["runtime"]["cuda.initialized"], False)
        self.assertIsInstance(main["runtime"]["torch"], str)
        self.assertIsInstance(env["launcher"]["options"]["ring_steps"], int)
        self.assertIsInstance(env["launcher"]["cpu_count"], int)
        names = {p["name"]: p for p in main["packages"]}
        self.assertIn("torch", names)
        self.assertTrue(names["torch"]["version"])
        self.assertNotIn("os", names)  # the standard library is not a package
        self.assertTrue(any(r["reason"] == "exit" for r in main["resource_peaks"]))
        text = run([tool("dltrace"), "env", trace]).stdout
        self.assertIn("packages imported", text)
        self.assertNotIn("s3cret", text)

        # Same machine, same variables: nothing differs; other thread settings: said and why.
        same = run([tool("dltrace"), "env-diff", trace, "--no-python"], env={"OMP_NUM_THREADS": "1"})
        self.assertEqual(same.returncode, 0, same.stdout + same.stderr)
        other = run([tool("dltrace"), "env-diff", trace, "--json"], env={"OMP_NUM_THREADS": "4"})
        self.assertEqual(other.returncode, 1, other.stderr)
        diff = json.loads(other.stdout)
        keys = {d["key"]: d for d in diff["differences"]}
        self.assertIn("env.OMP_NUM_THREADS", keys)
        self.assertEqual(keys["env.OMP_NUM_THREADS"]["current"], "4")
        self.assertIn("float results", keys["env.OMP_NUM_THREADS"]["why"])
        self.assertNotIn("torch", keys)  # the same torch, asked of this machine's python3
        self.assertEqual(diff["recorded"]["torch.num_threads"], 1)
        self.assertIsInstance(diff["current"]["cpu.count"], int)
        self.assertTrue(any("versions from " + PY in n for n in diff["notes"]))


if __name__ == "__main__":
    unittest.main()
