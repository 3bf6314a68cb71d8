"""Replaying real recordings: to the NaN with the dataset deleted, to step N, to a crash
(exception and native signal), across a thread-setting change, to a divergence, and with
each debugger (pdb through stdin, gdb in batch mode, a gdb attach in wait mode)."""
import json
import os
import re
import shutil
import signal
import subprocess
import unittest

from harness import DEBUGGER_ENV, EXAMPLES, PY, TraceTestCase, dataset, info, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "jobs", "tiny_train.py")
SEED_NAN_STEP = 30
CORRUPT_INDEX = 1365  # examples/prepare_data.py: default --corrupt-index for N=2048


def paused_pid(proc):
    """The pid a `dlreplay --debug wait` job says it waits in, and the stderr lines up to it."""
    err = []
    for line in proc.stderr:
        err.append(line)
        m = re.search(r"process (\d+) is waiting for a debugger", line)
        if m:
            return int(m.group(1)), "".join(err)
    return None, "".join(err)


def replay(trace, *args, **kw):
    p = run([tool("dlreplay"), trace, "--json"] + list(args), **kw)
    last = p.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    doc = json.loads(last) if last.startswith("{") else None
    return p, doc


class ReplayExampleTest(TraceTestCase):
    """One recording of the example job (a private copy of its dataset), many replays."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.dir = tempfile.mkdtemp(prefix="dlrr-replay-")
        cls.data = os.path.join(cls.dir, "data")
        shutil.copytree(dataset(), cls.data)
        cls.trace = os.path.join(cls.dir, "run.trace")
        cls.rec = run([tool("dlrecord"), "-o", cls.trace, "--", PY, os.path.join(EXAMPLES, "train.py"),
                       "--data", cls.data, "--seed", "8"], env={"OMP_NUM_THREADS": "1"})
        assert cls.rec.returncode == 0, cls.rec.stderr
        shutil.rmtree(cls.data)  # replay must not need the dataset

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_until_nan_stops_at_the_module_with_the_sample_named(self):
        p, doc = replay(self.trace, "--until", "nan")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["outcome"], "reached")
        self.assertEqual(doc["verified_steps"], SEED_NAN_STEP)
        rep = doc["report"]
        self.assertEqual(rep["stop.step"], SEED_NAN_STEP)
        self.assertIn("at module conv1 (call 0)", rep["stop.where"])
        self.assertIn("dataset index %d" % CORRUPT_INDEX, rep["batch.samples"])
        # The job's own output up to the stop is the recording's.
        self.assertTrue(self.rec.stdout.startswith(p.stdout.rsplit("\n", 2)[0]))

    def test_default_target_is_nan_and_other_thread_settings_do_not_matter(self):
        p = run([tool("dlreplay"), self.trace], env={"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("reached nan; %d of 128 recorded steps verified bit-exact" % SEED_NAN_STEP, p.stderr)

    def test_until_step(self):
        for n in (0, 5, 70):
            p, doc = replay(self.trace, "--until", "step=%d" % n)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(doc["report"]["stop.step"], n)
            self.assertEqual(doc["verified_steps"], n)
            self.assertIn("before the forward pass", doc["report"]["stop.where"])

    def test_until_end_reproduces_the_whole_output(self):
        p = run([tool("dlreplay"), self.trace, "--until", "end"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, self.rec.stdout)
        self.assertIn("128 of 128 recorded steps verified", p.stderr)

    def test_bad_targets(self):
        p = run([tool("dlreplay"), self.trace, "--until", "step=-3"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("N >= 0", p.stderr)
        p = run([tool("dlreplay"), self.trace, "--until", "step=5000"])
        self.assertEqual(p.returncode, 7)
        self.assertIn("beyond the trace", p.stderr)
        p = run([tool("dlreplay"), self.trace, "--until", "crash"])
        self.assertEqual(p.returncode, 7)
        self.assertIn("no exception or fatal signal", p.stderr)

    def test_pdb_through_stdin(self):
        p = run([tool("dlreplay"), self.trace, "--until", "nan", "--debug", "pdb"],
                input="p dlrr.step\np dlrr.module\np sorted(dlrr.recorded_tensors())\nc\n")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertRegex(p.stdout, r"-> .*self\.conv1\(")  # the frame that calls the module
        self.assertIn("(Pdb) %d\n" % SEED_NAN_STEP, p.stdout)
        self.assertIn("'conv1'", p.stdout)
        self.assertIn("'module output:conv1#0.0'", p.stdout)  # the failing module's output
        # ... and what the failing step computed after it (issue 18.6: once lost, "recorded: none")
        self.assertIn("'loss:loss#0.0'", p.stdout)

    def test_gdb_batch_reaches_dlrr_replay_stopped(self):
        if not shutil.which("gdb"):
            self.skipTest("gdb is not installed")
        p = run([tool("dlreplay"), self.trace, "--until", "step=3", "--debug", "gdb"], timeout=600)
        self.assertRegex(p.stdout + p.stderr, r"#0 .*dlrr_replay_stopped")
        self.assertRegex(p.stdout + p.stderr, r"#1 .*dlrr_replay_stop ")
        # The report was written before the breakpoint, so gdb's kill does not lose it.
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("reached step=3; 3 of 128 recorded steps verified", p.stderr)

    def test_wait_accepts_a_gdb_attach(self):
        if not shutil.which("gdb"):
            self.skipTest("gdb is not installed")
        proc = subprocess.Popen([tool("dlreplay"), self.trace, "--until", "step=2", "--debug", "wait"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL)
        pid = None
        try:
            pid, err = paused_pid(proc)
            self.assertIsNotNone(pid, err)
            g = run(["gdb", "-p", str(pid), "-batch", "-ex", "bt 5"], timeout=120, env=DEBUGGER_ENV)
            self.assertIn("process %d) detached" % pid, g.stdout + g.stderr)
            out, rest = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:  # a failed check leaves no paused job behind
                if pid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                proc.kill()
                proc.wait()
        self.assertIn("dlrr: resumed", rest)
        self.assertEqual(proc.returncode, 0, rest)


TYPED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "typed_batches.py")


class TypedBatchTest(TraceTestCase):
    """Batches in a container of the job's own type (jobs/typed_batches.py)."""

    def test_a_batch_dlrr_did_not_record_is_refused_never_diverged(self):
        plain = run([PY, TYPED, "dataclass"], check=True)
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, TYPED, "dataclass"])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        self.assertEqual(rec.stdout, plain.stdout)
        # The job's own stderr is unchanged: the note is dlrecord's (its summary) and the trace's.
        job_err = "".join(line for line in rec.stderr.splitlines(True) if not line.startswith("dlrecord:"))
        self.assertEqual(job_err, plain.stderr)
        note = "batch 0 of loader 0 holds a value dlrr did not record (__main__.Batch)"
        self.assertIn("dlrecord: note: ", rec.stderr)
        self.assertIn(note, rec.stderr)
        self.assertEqual(rec.stderr.count("did not record"), 1, rec.stderr)  # once, not per batch
        self.assertTrue(any(note in n for n in info(self.trace_path())["notes"]))
        p, doc = replay(self.trace_path())
        self.assertEqual(p.returncode, 10, p.stdout + p.stderr)
        self.assertIn("batch 0 of loader 0 (step 0) holds a value dlrr did not record (__main__.Batch), so it "
                      "cannot be replayed from the trace", doc["message"])
        self.assertNotIn("diverge", p.stdout + p.stderr)
        self.assertEqual(doc["report"]["stop"], "unservable")

    def plain_container(self, kind, type_text):
        """The container's type is lost (served as its plain base): noted once when recorded.
        Returns dlreplay's run and --json document."""
        rec = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, TYPED, kind])
        self.assertEqual(rec.returncode, 0, rec.stderr)
        note = "batch 0 of loader 0 holds %s" % type_text
        self.assertIn(note, rec.stderr)
        self.assertEqual(rec.stderr.count("does not record the container"), 1, rec.stderr)
        self.assertTrue(any(note in n for n in info(self.trace_path())["notes"]))
        return replay(self.trace_path())

    def test_a_namedtuple_batch_is_never_a_false_divergence(self):
        # The job reads batch.x: the plain tuple served has no field x.
        type_text = "__main__.Sample (a namedtuple) as a plain tuple"
        p, doc = self.plain_container("namedtuple", type_text)
        self.assertEqual(p.returncode, 10, p.stdout + p.stderr)
        self.assertIn("cannot replay this job from the trace: the replayed job raised AttributeError", doc["message"])
        self.assertIn(type_text, doc["message"])
        self.assertNotIn("diverge", doc["message"])

    def test_a_userdict_batch_served_as_a_dict_still_replays(self):
        # The job only indexes it (batch["x"]): the plain dict serves that.
        p, doc = self.plain_container("userdict", "collections.UserDict (a Mapping) as a plain dict")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(doc["verified_steps"], 8)


class ReplayTinyJobTest(TraceTestCase):
    def record(self, *args, env=None):
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, TINY] + list(args), env=env)
        return p

    def diverged(self, steps, setting):
        """Records the tiny job, replays it with `setting` (NAME=VALUE) changed in the replay only,
        expects a divergence (exit 11); returns dlreplay's run, its --json document and its report."""
        self.assertEqual(self.record("--steps", steps).returncode, 0)
        p = run([tool("dlreplay"), self.trace_path(), "--json", "--", "env", setting, PY, TINY, "--steps", steps])
        self.assertEqual(p.returncode, 11, p.stderr)
        doc = json.loads(p.stdout.rstrip("\n").rsplit("\n", 1)[-1])
        return p, doc, doc["report"]

    def test_divergence_is_reported_at_the_first_step_and_module(self):
        _, doc, rep = self.diverged("10", "DLRR_TEST_LR=0.5")
        self.assertEqual(rep["divergence.step"], 0)
        self.assertEqual(rep["divergence.kind"], "parameter")
        self.assertIn("recorded hash", rep["divergence.detail"])
        self.assertEqual(doc["verified_steps"], 0)

    def test_a_module_output_divergence_stops_at_that_module(self):
        # Step 2's inputs doubled in the replay only: the first module's output differs; the replay
        # stops there (a debugger attached sees that forward), not at the end of the step.
        p, doc, rep = self.diverged("4", "DLRR_TEST_SCALE_FROM=2")
        self.assertEqual(rep["divergence.step"], 2)
        self.assertEqual(rep["divergence.kind"], "module output")
        self.assertEqual(doc["verified_steps"], 2)
        self.assertNotIn("loss", rep.get("divergence.path", ""))
        self.assertEqual(rep["stop.step"], 2)
        self.assertIn("step 1 loss", p.stdout)
        self.assertIn("step 1 forward done", p.stdout)
        self.assertNotIn("step 2 forward done", p.stdout)  # stopped inside step 2's forward, at that module


    def test_a_replay_that_raises_where_the_recording_did_not_is_a_divergence(self):
        # Issue 12 item 3: once reported "replayed to the end; 0 of N verified" with exit 0.
        self.assertEqual(self.record("--steps", "8").returncode, 0)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--", "env", "DLRR_TEST_RAISE_AT=3", PY,
                 TINY, "--steps", "8"])
        self.assertEqual(r.returncode, 11, r.stderr)
        ours = "\n".join(l for l in r.stderr.splitlines() if l.startswith("dlreplay"))
        self.assertIn("diverged at step 3: the replayed job raised KeyError: 'missing-key-3' at ", ours)
        self.assertIn("where the recording did not; last verified step 2", ours)
        self.assertNotIn("replayed to the end", ours)

    def test_fewer_steps_than_recorded_at_the_end_is_never_success(self):
        self.assertEqual(self.record("--steps", "8").returncode, 0)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "end", "--", "env", "DLRR_TEST_STEPS=3", PY, TINY,
                 "--steps", "8"])
        self.assertEqual(r.returncode, 11, r.stderr)
        self.assertIn("diverged: the replayed job ended after 3 of 8 recorded steps; last verified step 2; "
                      "3 of 8 recorded steps verified bit-exact", r.stderr)

    def test_check_not_reproduced_claims_no_determinism(self):
        # Issue 18 item 1: "not reproduced" and "a deterministic kind of failure" together.
        self.assertEqual(self.record("--no-loader", "--raise-at", "5").returncode, 1)
        r = run([tool("dlreplay"), self.trace_path(), "--check", "--", "env", "DLRR_TEST_RAISE_AT=-1", PY, TINY,
                 "--no-loader", "--raise-at", "5"])
        self.assertEqual(r.returncode, 13, r.stderr)
        self.assertIn("dlreplay: not reproduced: ", r.stderr)
        self.assertIn("determinism not known: this replay did not reproduce it", r.stderr)
        self.assertNotIn("a deterministic kind of failure", r.stderr)
        self.assertNotIn("bit for bit", r.stderr)

    def test_exception_right_after_an_optimizer_step_is_after_that_step(self):
        # Issue 18 item 14: raised after the 4th optimizer.step(), no step open: dlrecord said
        # "exception at step 3" and `--until crash` said "step: -".
        p = self.record("--no-loader", "--raise-at", "4")
        self.assertEqual(p.returncode, 1)
        self.assertIn("exception after step 3 (no step open): KeyError: 'missing-key-4'", p.stderr)
        self.assertIn("after step 3 (no step open)", info(self.trace_path())["failure"]["summary"])
        r = run([tool("dlreplay"), self.trace_path(), "--until", "crash"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("dlreplay:   step: none open (after step 3)\n", r.stderr)
        self.assertNotIn("step: -", r.stderr)

    def test_quit_in_pdb_ends_the_replay(self):
        # Issue 18 item 8: `q` let the job train on to the end.
        self.assertEqual(self.record("--steps", "8").returncode, 0)
        p = run([tool("dlreplay"), self.trace_path(), "--until", "step=3", "--debug", "pdb"], input="q\n")
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertIn("reached step=3", p.stderr)
        self.assertIn("dlrr: quit: the replay ends here", p.stderr)
        self.assertNotIn("step 4 loss", p.stdout)
        self.assertNotIn("done", p.stdout)

    def test_until_crash_python_exception(self):
        p = self.record("--raise-at", "6")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(info(self.trace_path())["failure"]["kind"], "exception")
        r = run([tool("dlreplay"), self.trace_path(), "--until", "crash"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("KeyError: 'missing-key-6'", r.stderr)
        # Step 6 began (its batch arrived) and was committed at exit in the recording.
        self.assertIn("reached crash; 6 of 7 recorded steps verified", r.stderr)

    def test_check_and_crash_lines_stay_one_line_for_a_multiline_exception(self):
        summary = "first-line of the message ... last-line \\x1b[31mred"  # first and last line, escaped
        # With the hook's excepthook: the stop line names the exception. With the job's own
        # (not chaining) excepthook: the replay learns of it at exit, "reproduced the exception".
        for extra, line in (((), "dlreplay:   where: the recorded exception: RuntimeError: "),
                            (("--own-excepthook",), "dlreplay: reproduced the exception: RuntimeError: ")):
            shutil.rmtree(self.trace_path(), ignore_errors=True)
            self.assertEqual(self.record("--raise-multiline-at", "3", *extra).returncode, 1)
            r = run([tool("dlreplay"), self.trace_path(), "--check"])
            self.assertEqual(r.returncode, 0, r.stderr)
            ours = [l for l in r.stderr.splitlines() if l.startswith("dlreplay")]
            self.assertIn(line + summary, "\n".join(ours), r.stderr)
            self.assertIn("dlreplay: deterministic: reproduced at step 3 (exception at step 3: RuntimeError: " +
                          summary + ")", ours, r.stderr)
            # Nothing of ours runs onto a line of its own or sends the escape sequence.
            # (The job's own traceback, printed by the default excepthook, has them once.)
            job_lines = ["second-line", "last-line \x1b[31mred"] if not extra else []
            self.assertEqual([l for l in r.stderr.splitlines() if l.startswith(("second-line", "last-line"))],
                             job_lines, r.stderr)
            self.assertEqual(r.stderr.count("\x1b"), len(job_lines) // 2, r.stderr)

    def test_until_crash_native_signal(self):
        p = self.record("--segv-at", "5")
        self.assertEqual(p.returncode, 128 + signal.SIGSEGV)
        self.assertEqual(info(self.trace_path())["failure"]["kind"], "signal")
        r = run([tool("dlreplay"), self.trace_path(), "--until", "crash"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("reproduced the crash: Segmentation fault", r.stderr)

    def test_wait_pauses_at_a_native_crash(self):
        self.assertEqual(self.record("--segv-at", "5").returncode, 128 + signal.SIGSEGV)
        ways = ["usr1"] + (["gdb"] if shutil.which("gdb") else [])
        for way in ways:
            proc = subprocess.Popen([tool("dlreplay"), self.trace_path(), "--until", "crash", "--debug", "wait"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL)
            try:
                pid = None
                pid, err = paused_pid(proc)
                self.assertIsNotNone(pid, err)
                self.assertIn("the recorded fatal signal SIGSEGV (11)", err)
                if way == "usr1":
                    os.kill(pid, signal.SIGUSR1)
                else:
                    g = run(["gdb", "-p", str(pid), "-batch", "-ex", "bt"], timeout=120, env=DEBUGGER_ENV)
                    self.assertIn("<signal handler called>", g.stdout)  # the crashing frames are there
                    self.assertIn("process %d) detached" % pid, g.stdout + g.stderr)
                out, rest = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    if pid:
                        try:
                            os.kill(pid, signal.SIGKILL)  # the paused job, not left behind
                        except OSError:
                            pass
                    proc.kill()
                    proc.wait()
            self.assertIn("dlrr: resumed; the crash goes on", rest)
            self.assertIn("reproduced the crash: Segmentation fault", rest)
            self.assertEqual(proc.returncode, 0, rest)

    def test_until_crash_under_gdb_batch(self):
        if not shutil.which("gdb"):
            self.skipTest("gdb is not installed")
        self.assertEqual(self.record("--raise-at", "6").returncode, 1)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "crash", "--debug", "gdb"], timeout=600)
        self.assertRegex(r.stdout + r.stderr, r"#0 .*dlrr_replay_stopped")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("reached crash; 6 of 7 recorded steps verified", r.stderr)
        # A native crash: gdb stops the job at the signal and kills it there.
        shutil.rmtree(self.trace_path())
        self.assertEqual(self.record("--segv-at", "5").returncode, 128 + signal.SIGSEGV)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "crash", "--debug", "gdb"], timeout=600)
        self.assertIn("received signal SIGSEGV", r.stdout + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("reproduced the crash: Segmentation fault", r.stderr)

    def test_nan_in_backward_names_the_function_and_forward_line(self):
        job = os.path.join(HERE, "jobs", "grad_nan.py")
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, job, "--zero-at", "4"])
        self.assertEqual(p.returncode, 0, p.stderr)
        failure = info(self.trace_path())["failure"]
        self.assertEqual((failure["kind"], failure["step"]), ("nonfinite", 4))
        self.assertTrue(failure["where"].startswith("grad:"), failure)  # forward outputs stayed finite
        r = run([tool("dlreplay"), self.trace_path(), "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout.rstrip("\n").rsplit("\n", 1)[-1])["report"]
        self.assertEqual(rep["stop.step"], 4)
        self.assertEqual(rep["backward.function"], "PowBackward0")
        self.assertIn("grad_nan.py\", line 22", rep["backward.forward_line"])

    def until_nan(self, *job_args):
        job = os.path.join(HERE, "jobs", "late_nan.py")
        shutil.rmtree(self.trace_path(), ignore_errors=True)
        p = run([tool("dlrecord"), "-o", self.trace_path(), "--", PY, job] + list(job_args))
        self.assertEqual(p.returncode, 0, p.stderr)
        failure = info(self.trace_path())["failure"]
        r = run([tool("dlreplay"), self.trace_path(), "--until", "nan"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("dlreplay: reached nan", r.stderr)
        return failure, r

    def test_nan_in_the_loss_first_stops_before_backward(self):
        failure, r = self.until_nan("loss", "--at", "3")
        self.assertEqual((failure["kind"], failure["step"], failure["where"]), ("nonfinite", 3, "loss"))
        self.assertIn("dlreplay:   step: 3\n", r.stderr)
        self.assertIn("where: before backward() of step 3: every module output was finite, the loss was not",
                      r.stderr)
        self.assertNotIn("step 3 loss", r.stdout)  # stopped before the step's end

    def test_nan_in_the_loss_under_minimal_capture_says_what_is_not_known(self):
        # Issue 18 item 4: minimal capture records no module outputs; the stop must not claim
        # they were all finite.
        job = os.path.join(HERE, "jobs", "late_nan.py")
        p = run([tool("dlrecord"), "--capture", "minimal", "-o", self.trace_path(), "--", PY, job, "loss"])
        self.assertEqual(p.returncode, 0, p.stderr)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "nan"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("where: before backward() of step 3: the loss was not finite (module outputs were not "
                      "recorded under --capture minimal: whether one was non-finite first is not known)", r.stderr)
        self.assertNotIn("every module output was finite", r.stderr)

    def test_process_capture_records_no_step_and_replay_compares_none(self):
        # Issue 33: the cheapest level. The hook leaves torch unpatched (no batch, step, loss or
        # digest); replay runs the job on its own data and says that no step was compared.
        plain = run([PY, TINY, "--steps", "3", "--raise-at", "2"])
        p = run([tool("dlrecord"), "--capture", "process", "-o", self.trace_path(), "--", PY, TINY, "--steps", "3",
                 "--raise-at", "2"])
        self.assertEqual(p.returncode, plain.returncode, p.stderr)
        self.assertIn("no steps captured: --capture process records none", p.stderr)
        i = info(self.trace_path())
        self.assertEqual(sum(s["steps"] for s in i["processes"]), 0)
        self.assertEqual(i["failure"]["kind"], "exception")  # process-wide hooks stay
        events = run([tool("dltrace"), "events", self.trace_path(), "--json"], check=True).stdout
        self.assertNotIn('"batch"', events)
        self.assertIn("torch", events)  # runtime facts: versions
        triage = run([tool("dltrace"), "triage", self.trace_path()]).stdout
        self.assertIn("where       not known (no steps are recorded under --capture process)", triage)
        self.assertIn("of wall time since launch; steps not recorded (--capture process)", triage)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "end"])
        # The job's own loop ran (nothing served) on the recorded entropy: its seeds, so its losses.
        self.assertEqual(r.stdout, p.stdout)
        self.assertIn("step 1 loss", r.stdout)
        self.assertIn("0 of 0 recorded steps verified", r.stderr)
        self.assertIn("unverified: recorded with --capture process", r.stderr)

    def test_nan_in_a_parameter_first_stops_after_the_optimizer_step(self):
        # Steps counted by optimizer.step() (the step has ended when step() returns) and by batch.
        for extra in ((), ("--loader",)):
            failure, r = self.until_nan("param", "--at", "3", *extra)
            self.assertEqual((failure["kind"], failure["step"], failure["where"]), ("nonfinite", 3, "param:0.weight"))
            self.assertIn("dlreplay:   step: 3\n", r.stderr)
            self.assertIn("where: after SGD.step() of step 3: gradients were finite, the update made "
                          "param:0.weight non-finite", r.stderr)
            self.assertIn("step 2 loss", r.stdout)
            self.assertNotIn("step 3 loss", r.stdout)  # the job's print after step() did not run

    def test_optimizer_counted_steps_replay(self):
        self.assertEqual(self.record("--no-loader", "--steps", "15").returncode, 0)
        r = run([tool("dlreplay"), self.trace_path(), "--until", "end"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("15 of 15 recorded steps verified", r.stderr)

    def test_foreign_trace_needs_consent(self):
        # A trace whose launcher recorded another host: rewrite nothing, just fake the host
        # through the environment dlreplay compares with (HOSTNAME is not used: the header is).
        self.assertEqual(self.record("--steps", "2").returncode, 0)
        p = run(["unshare", "--uts", "sh", "-c", "hostname other-host && %s %s" % (tool("dlreplay"), self.trace_path())])
        if p.returncode != 0 and "unshare" in p.stderr and "Operation not permitted" in p.stderr:
            self.skipTest("no UTS namespace here")
        self.assertEqual(p.returncode, 9, p.stderr)
        self.assertIn("--yes", p.stderr)
        self.assertIn("running " if False else "dlreplay: running", p.stderr.replace("would run", "running"))


if __name__ == "__main__":
    unittest.main()
