"""dlpreflight on real jobs whose late phases fail (docs/preflight.md): a torchvision ResNet
trained on torchvision's FakeData with validation, checkpoints and a TorchScript export, and a
nanoGPT-shaped language model over an np.memmap without a DataLoader.  Each failure happens
only after training (in evaluation, checkpointing or export): preflight must reach it with
every pass cut to K batches, name it, and exit 1; a healthy job passes with exit 0."""
import json
import os
import unittest

import numpy as np

from harness import PY, ROOT, TraceTestCase, run, steps, tool

JOBS = os.path.join(ROOT, "tests", "integration", "jobs")
VISION = os.path.join(JOBS, "preflight_vision.py")
LM = os.path.join(JOBS, "preflight_lm.py")


def have_torchvision():
    return run([PY, "-c", "import torchvision"]).returncode == 0


class PreflightTest(TraceTestCase):
    def preflight(self, argv, k=None, extra=()):
        args = [tool("dlpreflight"), "--json", "-o", self.trace_path()] + list(extra)
        if k is not None:
            args += ["-k", str(k)]
        p = run(args + ["--"] + argv, timeout=600)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        self.assertTrue(lines, "no JSON report\nstdout:\n%s\nstderr:\n%s" % (p.stdout, p.stderr))
        return p, json.loads(lines[-1])

    def vision(self, fail, k=None):
        out = os.path.join(self.tmp, "out")
        os.makedirs(out, exist_ok=True)
        return self.preflight([PY, VISION, "--out", out, "--fail", fail], k=k)

    def assert_cut(self, doc, k, loaders):
        """Every pass of every loader was cut to k batches (the full job's are far longer)."""
        seen = {p["loader"] for p in doc["passes"]}
        self.assertEqual(seen, set(loaders), doc["passes"])
        for p in doc["passes"]:
            self.assertEqual(p["batches"], k, p)
            self.assertTrue(p["cut"], p)
            self.assertGreater(p["of"], k, p)

    def setUp(self):
        super().setUp()
        if not have_torchvision():
            self.skipTest("python3-torchvision is not installed (scripts/setup.sh installs it)")

    def test_a_healthy_job_passes_with_every_phase_in_miniature(self):
        p, doc = self.vision("none")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(doc["passed"])
        self.assertIsNone(doc["failure"])
        self.assert_cut(doc, 2, [0, 1])
        phases = {(q["loader"], q["phase"]) for q in doc["passes"]}
        self.assertEqual(phases, {(0, "training"), (1, "evaluation")})
        self.assertEqual(len(doc["passes"]), 6)  # 3 epochs x (train + validation)
        self.assertEqual([s.split()[0] for s in doc["saves"]], ["torch.save"] * 3 + ["ScriptModule.save"])
        self.assertTrue(all(" ok " in s for s in doc["saves"]), doc["saves"])
        written = {q["path"] for q in doc["paths"] if q["how"] == "write"}
        self.assertIn(os.path.join(self.tmp, "out", "model.ts"), written)
        self.assertIn("exported", p.stdout)  # the job's own output, whole
        # Its writes went to the scratch directory, not to its output directory.
        self.assertEqual(os.listdir(os.path.join(self.tmp, "out")), [])
        # ...on the overlay, by the kernel (test_isolation.py has every other path a write takes);
        # where no sandbox can be made (scripts/torch2.sh's chroot), redirected by the libc layer.
        exported = os.path.join(self.tmp, "out", "model.ts")
        if os.environ.get("DLRR_TEST_CHROOT"):
            self.assertTrue(os.path.isfile(os.path.join(doc["scratch"], "written") + exported), doc)
        else:
            self.assertIn(exported, doc["overlay_written"])
        self.assertIn("dlpreflight: PASSED", p.stderr)
        # The trace is a recording like any other: 3 epochs x 2 training batches.
        self.assertEqual(len(steps(self.trace_path())), 6)

    def test_memory_at_the_full_batch_size_from_two_small_runs(self):
        out = os.path.join(self.tmp, "out")
        os.makedirs(out)
        first = self.trace_path("bs4.trace")
        p = run([tool("dlpreflight"), "-o", first, "--", PY, VISION, "--out", out, "--batch-size", "4"], timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        args = [tool("dlpreflight"), "--json", "-o", self.trace_path("bs16b.trace"), "--compare", first,
                "--memory-at", "256", "--", PY, VISION, "--out", out, "--batch-size", "16"]
        p = run(args, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout.splitlines()[-1])
        est = {(e["loader"], e["phase"]): e for e in doc["memory_estimates"]}
        self.assertEqual(set(est), {(0, "training"), (1, "evaluation")})
        train = est[(0, "training")]
        self.assertEqual(train["batch_sizes"], [4, 16])
        self.assertEqual(train["target_batch_size"], 256)
        a, b = train["peaks_rss_bytes"]
        self.assertIsInstance(a, int)
        # On the line through the two points, or the larger peak when memory did not grow.
        expected = b + (b - a) * (256 - 16) // 12 if b > a else max(a, b)
        self.assertLess(abs(train["estimate_rss_bytes"] - expected), 1 << 20)
        self.assertIn("peak RSS at batch size 256", p.stderr)

    def test_a_missing_path_opened_only_in_evaluation(self):
        p, doc = self.vision("eval-path")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertFalse(doc["passed"])
        self.assertEqual(doc["failure"]["category"], "path_not_found")
        self.assertEqual(doc["failure"]["phase"], "evaluation")
        self.assertIn("/data/imagenet/val/index.json", doc["missing_paths"])
        self.assertIn("in evaluate", doc["failure"]["location"])
        self.assert_cut(doc, 2, [0])  # epoch 0's training pass ran, cut; validation never began

    def test_a_key_error_in_metric_code(self):
        p, doc = self.vision("metric-key", k=3)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(doc["failure"]["category"], "key_not_found")
        self.assertIn("top5", doc["failure"]["summary"])
        self.assert_cut(doc, 3, [0, 1])

    def test_a_checkpoint_directory_that_cannot_be_written(self):
        p, doc = self.vision("ckpt-dir")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(len(doc["saves"]), 1)
        self.assertIn("failed", doc["saves"][0])
        self.assertIn("ckpt-file/ckpt/epoch0.pt", doc["saves"][0])
        self.assertEqual(doc["failure"]["category"], "path_not_found")

    def test_an_export_that_fails_after_the_last_epoch(self):
        p, doc = self.vision("export")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assert_cut(doc, 2, [0, 1])
        self.assertEqual(len(doc["passes"]), 6)  # every epoch ran before the export
        self.assertIn("ScriptModule.save", doc["saves"][-1])
        self.assertIn("failed", doc["saves"][-1])
        self.assertIn("missing-export-dir", doc["failure"]["summary"])

    def test_a_language_model_loop_without_a_dataloader_is_cut(self):
        if run([PY, "-c", "import sys; sys.exit(0 if sys.version_info[:2] in ((3, 11), (3, 13)) else 1)"]).returncode:
            self.skipTest("leaving a loop without a DataLoader is enabled on Python 3.11 and 3.13 only "
                          "(dlrr_hook.preflight.LOOP_JUMP_VERSIONS)")
        data = os.path.join(self.tmp, "tokens.bin")
        np.random.RandomState(0).randint(0, 64, size=100000).astype(np.uint16).tofile(data)
        meta = os.path.join(self.tmp, "missing", "meta.json")
        p, doc = self.preflight([PY, LM, "--data", data, "--meta", meta, "--max-iters", "5000"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(len(doc["loops"]), 1, doc)
        self.assertTrue(doc["loops"][0].startswith("cut: preflight_lm.py:"), doc["loops"])
        self.assertEqual(len(steps(self.trace_path())), 2)  # 2 of 5000 iterations
        self.assertEqual(doc["failure"]["category"], "path_not_found")
        self.assertIn(meta, doc["missing_paths"])
        self.assertIn({"how": "read", "path": data}, doc["paths"])

    def test_a_job_written_for_cuda_runs_on_the_cpu_where_there_is_no_gpu(self):
        if run([PY, "-c", "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"]).returncode == 0:
            self.skipTest("this machine has a GPU: the job runs on it")
        p, doc = self.preflight([PY, os.path.join(JOBS, "preflight_cuda_job.py")])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(doc["cpu_fallback"])
        self.assertGreater(doc["cuda_rewrites"], 4)
        self.assertIn("epoch 1 loss", p.stdout)
        self.assertIn("it ran on the CPU", p.stderr)
        plain = run([PY, os.path.join(JOBS, "preflight_cuda_job.py")])
        self.assertNotEqual(plain.returncode, 0)  # without preflight it cannot run here at all

    def test_replaying_a_preflight_trace_reaches_its_failure(self):
        p, doc = self.vision("metric-key")
        self.assertEqual(p.returncode, 1, p.stderr)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "crash"], timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("KeyError: 'top5'", r.stderr)


    def test_write_through_lets_the_job_write_in_place(self):
        out = os.path.join(self.tmp, "out")
        os.makedirs(out)
        p, doc = self.preflight([PY, VISION, "--out", out, "--epochs", "1"], extra=["--write-through"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["scratch"], "")
        self.assertTrue(os.path.isfile(os.path.join(out, "ckpt", "epoch0.pt")))


PATTERNS = os.path.join(JOBS, "preflight_patterns.py")
LOOPS_HERE = [PY, "-c", "import sys; sys.exit(0 if sys.version_info[:2] in ((3, 11), (3, 13)) else 1)"]


class PreflightPatternTest(TraceTestCase):
    """Loop shapes preflight got wrong (issue 28 item 8): jobs/preflight_patterns.py."""

    preflight = PreflightTest.preflight

    def pattern(self, name, fail=False):
        out = os.path.join(self.tmp, "out")
        os.makedirs(out, exist_ok=True)
        return self.preflight([PY, PATTERNS, "--pattern", name, "--out", out] + (["--fail"] if fail else []))

    def need_loop_jumps(self):
        if run(LOOPS_HERE).returncode:
            self.skipTest("leaving a loop without a DataLoader is enabled on Python 3.11 and 3.13 only")

    def test_validation_every_n_steps_never_reached_is_named_and_not_passed(self):
        p, doc = self.pattern("eval-every-n")
        self.assertEqual(p.returncode, 10, p.stderr)
        self.assertFalse(doc["passed"])
        self.assertEqual(doc["unused_loaders"], [{"dataset": "Ranged", "where": "preflight_patterns.py:52"}])
        self.assertIn("INCOMPLETE", doc["verdict"])
        self.assertIn("made at preflight_patterns.py:52 was never iterated", p.stderr)
        self.assertNotIn("PASSED", p.stderr)

    def test_a_nested_loop_before_a_with_block_never_fails_falsely(self):
        self.need_loop_jumps()
        p, doc = self.pattern("nested-nograd", fail=True)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertNotIn("not callable", p.stderr)
        self.assertIn("the job's own error", doc["failure"]["summary"])  # the job's real error
        self.assertEqual(doc["cut_caveat"], "")  # no cut evaluation pass came before it
        # The inner loop cannot be left (its next line is the with's); the epoch loop is, after one epoch.
        self.assertTrue(doc["loops"][0].startswith("not cut: preflight_patterns.py:72"), doc["loops"])
        self.assertTrue(doc["loops"][1].startswith("cut: preflight_patterns.py:71"), doc["loops"])
        self.assertIn("after 200 updates", doc["failure"]["summary"])

    def test_a_while_step_below_max_steps_loop_is_cut(self):
        self.need_loop_jumps()
        p, doc = self.pattern("while-steps")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["loops"], ["cut: preflight_patterns.py:86 after 2 updates"])
        self.assertIn("trained 2 steps", p.stdout)

    def test_a_while_loop_over_recreated_iterators_is_cut(self):
        self.need_loop_jumps()
        p, doc = self.pattern("while-reiter")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("trained 3 steps", p.stdout)  # K, and the first batch of the new iterator
        self.assertEqual(len(doc["passes"]), 2, doc["passes"])
        self.assertTrue(doc["loops"][0].startswith("cut: preflight_patterns.py:98"), doc["loops"])

    def test_a_failure_after_a_cut_evaluation_says_the_cut_may_cause_it(self):
        p, doc = self.pattern("sorted-eval")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("ZeroDivisionError", doc["failure"]["summary"])
        caveat = "may be caused by the cut: the evaluation saw 2 of 16 batches (loader 1, Ranged)"
        self.assertEqual(doc["cut_caveat"], caveat)
        self.assertIn("note: " + caveat, p.stderr)

    def test_dlrrs_own_package_scan_lists_no_missing_metadata(self):
        # A site module without __version__ nor its own dist-info: the hook's version lookup
        # scans every installed distribution's metadata (egg-info/METADATA misses on Debian).
        site = os.path.join(self.tmp, "lib", "site-packages")
        os.makedirs(os.path.join(site, "noversion"))
        open(os.path.join(site, "noversion", "__init__.py"), "w").close()
        job = os.path.join(self.tmp, "job.py")
        with open(job, "w") as f:
            f.write("import sys\nsys.path.insert(0, %r)\nimport noversion, torch\n" % site)
        p, doc = self.preflight([PY, job])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([m for m in doc["missing_paths"] if "-packages/" in m or "/lib/python3" in m], [])
        self.assertNotIn("METADATA", p.stderr)


class PreflightUsageTest(TraceTestCase):
    def test_usage_errors_and_missing_commands(self):
        for argv, code in ((["--batches", "0", "--", "true"], 2), (["--bogus", "--", "true"], 2), ([], 2),
                           (["--", "/nonexistent/cmd"], 127)):
            p = run([tool("dlpreflight")] + argv)
            self.assertEqual(p.returncode, code, (argv, p.stderr))
        self.assertIn("usage: dlpreflight", run([tool("dlpreflight"), "--help"]).stdout)

    def test_a_job_that_is_not_python_passes_on_its_exit_status_and_says_it_was_not_cut(self):
        p = run([tool("dlpreflight"), "-o", self.trace_path(), "--", "sh", "-c", "exit 3"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("FAILED: the job exited with status 3", p.stderr)
        self.assertIn("was not run in miniature", p.stderr)


if __name__ == "__main__":
    unittest.main()
