"""Recording real PyTorch jobs: the example job (workers, NaN mid-run, exception variant),
a shell launcher, a loop without DataLoader, and kill -9 of the job mid-run."""
import os
import re
import signal
import subprocess
import unittest

from harness import EXAMPLES, PY, TraceTestCase, children, dataset, events, info, run, steps, tool

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "jobs", "tiny_train.py")
RNN_LM = os.path.join(HERE, "jobs", "rnn_lm.py")
NAN_THEN_HANG = os.path.join(HERE, "jobs", "nan_then_hang.py")
NATIVE_PROBE = os.path.join(HERE, "jobs", "native_probe.py")
RNG_STEPS = os.path.join(HERE, "jobs", "rng_steps.py")
SEED_NAN_STEP = 30  # examples/README.md: --seed 8 puts the first NaN at step 30


def job_events(trace, kinds):
    """[(kind, event body without its time)] of the job's streams, of the given kinds, in order:
    what two recordings of the same job must agree on."""
    kept = []
    for e in events(trace):
        if e["kind"] in kinds and e["stream"] != "launcher":
            body = dict(e["event"])
            body.pop("tNs")
            kept.append((e["kind"], body))
    return kept


def printed_losses(stdout):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^step (\d+) loss (\S+)$", stdout, re.M)}


class RecordExampleTest(TraceTestCase):
    def test_example_job_trace_and_transparency(self):
        data = dataset()
        argv = [PY, os.path.join(EXAMPLES, "train.py"), "--data", data, "--seed", "8"]
        plain = run(argv)
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + argv)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertEqual(rec.stdout, plain.stdout)  # same output, byte for byte
        self.assertIn("first non-finite value at step %d: conv1" % SEED_NAN_STEP, rec.stderr)

        doc = info(self.trace_path())
        self.assertEqual(doc["exit_code"], 0)
        self.assertEqual(doc["steps"], 128)
        self.assertEqual(doc["failure"]["kind"], "nonfinite")
        self.assertEqual(doc["failure"]["step"], SEED_NAN_STEP)
        self.assertEqual(doc["failure"]["where"], "conv1")
        losses = printed_losses(rec.stdout)
        first_nan = min(s for s, l in losses.items() if l == "nan")
        self.assertEqual(first_nan, SEED_NAN_STEP)

        st = steps(self.trace_path())
        self.assertEqual([s["step"] for s in st], list(range(128)))
        for s in st[:SEED_NAN_STEP]:
            self.assertEqual("%.6f" % s["loss"], losses[s["step"]])
            self.assertEqual(s["non_finite"], 0)
        self.assertGreater(st[SEED_NAN_STEP]["non_finite"], 0)
        self.assertEqual(st[0]["batch_bytes"], 32 * 3 * 16 * 16 * 4 + 32 * 8)

        batches = events(self.trace_path(), kind="batch")
        self.assertEqual(len(batches), 128 + 2 * 4)  # training + two evaluations of 4 batches
        first = batches[0]["event"]["batch"]
        self.assertEqual(len(first["sampleIndices"]), 32)  # indices captured through workers
        rng = events(self.trace_path(), kind="rngState", step=3)
        self.assertGreaterEqual(len({e["event"]["rngState"]["kind"] for e in rng}), 3)  # torch, numpy, random
        kinds = {e["event"]["digest"]["kind"] for e in events(self.trace_path(), kind="digest", step=3)}
        self.assertTrue({"moduleOutput", "gradient", "parameter", "loss"} <= kinds, kinds)
        # The failure ring: full tensors of the failing step (and the one before) were kept.
        kept = events(self.trace_path(), kind="tensor")
        self.assertTrue(any(e["event"]["tensor"]["path"] == "conv1" for e in kept))
        # It keeps module outputs and the loss, as `dltrace dump --help` says; gradients and
        # parameters are only digested.
        self.assertEqual({e["event"]["tensor"]["kind"] for e in kept}, {"moduleOutput", "loss"})
        dump_help = run([tool("dltrace"), "dump", "--help"], check=True).stdout
        self.assertIn("--tensor-kind K (moduleOutput, loss)", dump_help)
        self.assertNotIn("parameter name", dump_help)
        npy = os.path.join(self.tmp, "conv1.npy")
        run([tool("dltrace"), "dump", self.trace_path(), "--step", str(SEED_NAN_STEP), "--tensor", "conv1",
             "-o", npy], check=True)
        # The ring's tensors of the step before the failure are written during the failing
        # step (stamped with their own step): `events --step` and `dump --step` find them.
        before = SEED_NAN_STEP - 1
        kept_before = events(self.trace_path(), kind="tensor", step=before)
        self.assertIn("conv1", {e["event"]["tensor"]["path"] for e in kept_before})
        self.assertTrue(all(e["event"]["step"] == before for e in kept_before), kept_before)
        npy_before = os.path.join(self.tmp, "conv1-before.npy")
        run([tool("dltrace"), "dump", self.trace_path(), "--step", str(before), "--tensor", "conv1",
             "-o", npy_before], check=True)
        check = run([PY, "-c", "import numpy, sys; a = numpy.load(sys.argv[1]); "
                     "print(a.shape, bool(numpy.isfinite(a).all()))", npy_before], check=True)
        self.assertEqual(check.stdout.strip(), "(32, 8, 16, 16) True")
        run([tool("dltrace"), "verify", self.trace_path()], check=True)

    def test_exception_variant(self):
        data = dataset("bad", malformed_index=1000)
        argv = [PY, os.path.join(EXAMPLES, "train.py"), "--data", data, "--seed", "8"]
        plain = run(argv)
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--"] + argv)
        self.assertEqual(plain.returncode, 1)
        self.assertEqual(rec.returncode, 1)
        self.assertEqual(rec.stdout, plain.stdout)
        doc = info(self.trace_path())
        self.assertEqual(doc["failure"]["kind"], "exception")
        self.assertEqual(doc["failure"]["exception_type"], "RuntimeError")
        self.assertEqual(doc["exit_code"], 1)
        # The worker's exception carries its traceback: the summary is still one line, with
        # the message's first line and its last (the error).
        self.assertIn("\n", doc["failure"]["message"])
        summary = [l for l in rec.stderr.splitlines() if "exception at step" in l]
        self.assertEqual(len(summary), 1, rec.stderr)
        self.assertTrue(summary[0].startswith("dlrecord: trace "), rec.stderr)
        self.assertIn("Caught RuntimeError in DataLoader worker process", summary[0])
        self.assertRegex(summary[0], r" \.\.\. RuntimeError: \S")
        after = rec.stderr[rec.stderr.index(summary[0]) + len(summary[0]):]
        self.assertEqual(after, "\n", "nothing may follow the summary line")

    def test_shell_launcher_script(self):
        data = dataset()
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", os.path.join(EXAMPLES, "run_train.sh"),
                 "--data", data, "--seed", "8", "--epochs", "1"])
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = info(self.trace_path())
        self.assertEqual(doc["steps"], 64)
        self.assertEqual(doc["failure"]["step"], SEED_NAN_STEP)

    def test_loop_without_dataloader_counts_optimizer_steps(self):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, TINY, "--no-loader", "--steps", "12"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(info(self.trace_path())["steps"], 12)
        begins = events(self.trace_path(), kind="stepBegin")
        self.assertTrue(all(e["event"]["stepBegin"]["byOptimizer"] for e in begins))

    def test_dump_with_several_matching_tensors_lists_the_matches_only(self):
        # The word-language-model loop: the LSTM `rnn` has several outputs kept by the failure
        # ring; the error lists those, not `encoder`, `drop` or the loss.
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, RNN_LM, "--nan-at", "2"])
        self.assertEqual(p.returncode, 0, p.stderr)
        # Steps are counted by backward() (issue 18.3): the failure ring holds step 1 whole (the
        # failing step 2 was written out at its first non-finite output, the encoder's).
        step = info(self.trace_path())["failure"]["step"] - 1
        self.assertEqual(step, 1)
        d = run([tool("dltrace"), "dump", self.trace_path(), "--step", str(step), "--tensor", "rnn",
                 "-o", os.path.join(self.tmp, "rnn.npy")])
        self.assertEqual(d.returncode, 7, d.stderr)  # not found: ambiguous
        listed = re.search(r"several tensors match 'rnn' in [^(]*\((.*)\); narrow", d.stderr)
        self.assertIsNotNone(listed, d.stderr)
        labels = listed.group(1).split(", ")
        self.assertGreater(len(labels), 1)
        for label in labels:
            self.assertRegex(label, r"^moduleOutput 'rnn' call \d+ output \d+$")
        for other in ("encoder", "drop", "decoder", "loss"):
            self.assertNotIn(other, listed.group(1))

    def test_python_process_exit_code_is_the_one_the_launcher_saw(self):
        # Python leaves by returning from main: its library cannot know the code (it recorded
        # -1, and `dltrace info` showed -1 for a job that exited 0).
        for code, want in (("pass", 0), ("import sys; sys.exit(3)", 3), ("import os; os._exit(-1)", 255)):
            t = os.path.join(self.tmp, "t%d" % want)
            p = run([tool("dlrecord"), "-q", "-o", t, "--", PY, "-c", "import torch\n" + code])
            self.assertEqual(p.returncode, want, p.stderr)
            doc = info(t)
            self.assertEqual(doc["exit_code"], want)
            procs = [x for x in doc["processes"] if x["role"] == "process"]
            self.assertEqual([x["exit_code"] for x in procs], [want], procs)

    def test_warnings_name_the_jobs_lines_as_without_recording(self):
        # A warning raised with stacklevel > 1 inside a function the hook wraps (an optimizer's
        # __init__; GradScaler's on torch 2.x) named the wrapper's frame: dlrr_hook/training.py,
        # `original(self, *args, **kwargs)`, instead of the line it names without dlrr.
        argv = [PY, os.path.join(HERE, "jobs", "warns_through_wrappers.py")]
        plain = run(argv)
        rec = run([tool("dlrecord"), "-q", "-o", self.trace_path(), "--"] + argv)
        self.assertEqual(plain.returncode, 0, plain.stderr)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertIn("duplicate parameters", plain.stderr)
        if "torch 2" in run([PY, "-c", "import torch; print('torch', torch.__version__)"]).stdout:
            self.assertIn("torch.cuda.amp.GradScaler(args...)` is deprecated", plain.stderr)
        self.assertEqual(rec.stderr, plain.stderr)
        self.assertEqual(rec.stdout, plain.stdout)

    def test_python_dash_m_module(self):
        pkg = os.path.join(self.tmp, "pkg")
        os.makedirs(os.path.join(pkg, "mypkg"))
        open(os.path.join(pkg, "mypkg", "__init__.py"), "w").close()
        with open(TINY) as src, open(os.path.join(pkg, "mypkg", "train.py"), "w") as dst:
            dst.write(src.read())
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-m", "mypkg.train", "--steps", "6"], cwd=pkg)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(info(self.trace_path())["steps"], 6)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "end"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("6 of 6 recorded steps verified", r.stderr)

    def test_job_without_torch_says_so(self):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, "-c", "print('hello')"])
        self.assertEqual(p.returncode, 0)
        self.assertEqual(p.stdout, "hello\n")
        self.assertIn("no steps captured: torch was never imported", p.stderr)

    def test_job_killed_by_timeout_during_its_failing_step_keeps_its_tensors(self):
        # Issue 18.6: a job that `timeout` ended during its failing step lost that step's ring
        # tensors ("recorded: none") while the step before was being written. The failing
        # step's tensors come first, those computed after the failure (`2`, after `1` went
        # NaN) included; the step before follows.
        argv = ["timeout", "-s", "TERM", "600", tool("dlrecord"), "-q", "-o", self.trace_path(), "--", PY,
                NAN_THEN_HANG, "--at", "3"]
        env = dict(os.environ)
        env.pop("DLRR_MODE", None)
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=env, text=True)
        try:
            for line in p.stdout:
                if line == "failing step computed\n":
                    break
            p.send_signal(signal.SIGTERM)  # to `timeout`, which sends it on, as when its time is up
            _, err = p.communicate(timeout=120)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        doc = info(self.trace_path())
        self.assertEqual(doc["failure"]["kind"], "nonfinite")
        self.assertEqual(doc["failure"]["step"], 3)
        self.assertEqual(doc["failure"]["where"], "1 (Boom)")  # an nn.Sequential's child, with its class
        self.assertGreater(doc["failure"]["ring_tensors"], 0)
        self.assertEqual(doc["failure"]["ring_tensors_written"], doc["failure"]["ring_tensors"])
        self.assertEqual(doc["failure"]["ring_tensors_missing"], "")
        for step, module in ((3, "0 (Linear)"), (3, "1 (Boom)"), (3, "2 (Linear)"), (3, "4 (Linear)"), (2, "2 (Linear)")):
            out = os.path.join(self.tmp, "s%d_%s.npy" % (step, module.split()[0]))
            d = run([tool("dltrace"), "dump", self.trace_path(), "--step", str(step), "--tensor", module, "-o", out])
            self.assertEqual(d.returncode, 0, "step %d module %s: %s" % (step, module, d.stderr))
            self.assertGreater(os.path.getsize(out), 64 * 4)
        t = run([tool("dltrace"), "info", self.trace_path()])
        self.assertNotIn("failure-ring tensors", t.stdout)

    def test_kill_9_mid_run_keeps_completed_steps(self):
        data = dataset()
        p = subprocess.Popen([tool("dlrecord"), "-o", self.trace_path(), "--", PY,
                              os.path.join(EXAMPLES, "train.py"), "--data", data, "--seed", "8"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        last = -1
        for line in p.stdout:
            m = re.match(r"step (\d+) ", line)
            if m:
                last = int(m.group(1))
                if last == 40:
                    break
        # The job is dlrecord's only child; read from /proc rather than with pgrep, which
        # deadlocks at start-up when libasan.so is preloaded (scripts/asan_integration.sh).
        job = children(p.pid)[0]
        os.kill(job, signal.SIGKILL)
        p.communicate(timeout=60)
        self.assertEqual(p.returncode, 128 + signal.SIGKILL)
        doc = info(self.trace_path())
        # Steps 0..last-1 were completed before the print of step `last`; `last` may be in flight.
        self.assertGreaterEqual(doc["steps"], last)
        v = run([tool("dltrace"), "verify", self.trace_path()])
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)


class NativeHooksTest(TraceTestCase):
    """The module hooks, the gradient and parameter digests and the batch value walk of the
    _dlrr_native extension (the default where it was built for the job's interpreter) record what
    the Python hooks record (DLRR_NATIVE_HOOKS=0), event for event: batches and snapshots
    included."""

    KINDS = ("digest", "failure", "tensor", "snapshot", "stepBegin", "stepEnd", "batch", "rngState")

    def record(self, native):
        data = dataset()
        trace = self.trace_path("native.trace" if native else "python.trace")
        argv = [tool("dlrecord"), "-o", trace, "--", PY, NATIVE_PROBE, os.path.join(EXAMPLES, "train.py"),
                "--data", data, "--seed", "8", "--epochs", "1"]
        p = run(argv, env={"DLRR_NATIVE_HOOKS": None if native else "0"})
        self.assertEqual(p.returncode, 0, p.stderr)
        hooks = re.search(r"^dlrr-test: module hooks (\w+)$", p.stderr, re.M).group(1)
        lists = re.search(r"^dlrr-test: tensor lists (\w+)$", p.stderr, re.M).group(1)
        self.assertEqual(lists, hooks)
        values = re.search(r"^dlrr-test: batch values (\w+)$", p.stderr, re.M).group(1)
        self.assertEqual(values, hooks)
        kept = job_events(trace, self.KINDS)
        return hooks, p.stdout, kept

    def test_same_events_as_the_python_hooks(self):
        hooks, out, native = self.record(True)
        if hooks != "native":
            self.skipTest("the _dlrr_native extension was not built for %s" % PY)
        python_hooks, python_out, python = self.record(False)
        self.assertEqual(python_hooks, "python")
        self.assertEqual(out, python_out)
        self.assertEqual(len(native), len(python))
        for i, (a, b) in enumerate(zip(native, python)):
            self.assertEqual(a, b, "event %d differs" % i)
        kinds = {k for k, _ in native}
        self.assertTrue({"digest", "failure", "tensor", "snapshot", "batch"} <= kinds, kinds)  # NaN at step 30
        outputs = [b["digest"] for k, b in native if k == "digest" and b["digest"]["kind"] == "moduleOutput"]
        self.assertGreater(len(outputs), 64 * 3)
        for kind in ("gradient", "parameter"):  # TensorListDigest's
            self.assertGreater(len([b for k, b in native if k == "digest" and b["digest"]["kind"] == kind]), 64 * 3,
                               kind)


class NativeRngStepsTest(TraceTestCase):
    """Steps without a DataLoader (counted by backward(), then by optimizer.step()) take their RNG
    states through _dlrr_native.RngSnapshot where the extension is built: taken where the previous
    step ended, written as the step begins, as the Python path (DLRR_NATIVE_HOOKS=0) does, event for
    event; the job draws after each step's end (jobs/rng_steps.py), which must not reach them.
    Replay restores them and reproduces every step."""

    STEPS = 12
    KINDS = ("rngState", "stepBegin", "stepEnd", "digest")

    def record(self, native):
        trace = self.trace_path("native.trace" if native else "python.trace")
        p = run([tool("dlrecord"), "-o", trace, "--", PY, NATIVE_PROBE, RNG_STEPS, str(self.STEPS)],
                env={"DLRR_NATIVE_HOOKS": None if native else "0"})
        self.assertEqual(p.returncode, 0, p.stderr)
        states = re.search(r"^dlrr-test: rng states (\w+)$", p.stderr, re.M).group(1)
        kept = job_events(trace, self.KINDS)
        return trace, states, p.stdout, kept

    def test_same_states_as_the_python_path_and_replayed(self):
        trace, states, out, native = self.record(True)
        if states != "native":
            self.skipTest("the _dlrr_native extension was not built for %s" % PY)
        _, python_states, python_out, python = self.record(False)
        self.assertEqual(python_states, "python")
        self.assertEqual(out, python_out)
        self.assertEqual(len(native), len(python))
        for i, (a, b) in enumerate(zip(native, python)):
            self.assertEqual(a, b, "event %d differs" % i)
        rules = {b["stepBegin"]["byOptimizer"] for k, b in native if k == "stepBegin"}
        self.assertEqual(len(rules), 2, rules)  # backward(), then optimizer.step()
        for step in range(self.STEPS):
            kinds = sorted(e["event"]["rngState"]["kind"] for e in events(trace, kind="rngState", step=step))
            self.assertEqual(kinds, sorted(["torchCpu", "numpy", "python"]), step)
        r = run([tool("dlreplay"), trace, "--until", "end"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("%d of %d recorded steps verified" % (self.STEPS, self.STEPS), r.stderr)
        self.assertEqual(r.stdout, out)


if __name__ == "__main__":
    unittest.main()
