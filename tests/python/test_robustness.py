"""The hook never breaks the job: internal errors, forked workers, modes, lazy torch."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import torch
from torch.utils.data import DataLoader

from support import IndexDataset, RecorderTestCase, small_model, train_step  # first
import fake_native
import dlrr_hook
from dlrr_hook import native, processes
from dlrr_hook.imports import ImportWatcher


class InternalErrorTest(RecorderTestCase):
    def test_error_in_batch_capture_disables_and_job_goes_on(self):
        def broken(value, depth=0):
            raise RuntimeError("walker bug")

        self.rec.values.write = broken
        loader = DataLoader(IndexDataset(12), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        seen = 0
        for x, _ in loader:
            train_step(model, optimizer, x)
            seen += 1
        self.assertEqual(seen, 3)
        self.assertFalse(self.rec.active)
        statuses = self.lib.of("recorder_status")
        self.assertEqual(len(statuses), 1)
        self.assertEqual(statuses[0][1], 0)
        self.assertIn("walker bug", statuses[0][2])
        self.assertIn("python hook disabled", statuses[0][2])
        # the step that was open is committed; the batch builder was closed
        self.assertEqual(self.step_events(), [("step_begin", 0, 0, 0, 0, 0), ("step_end", 0, self.step_events()[1][2])])
        self.assertEqual(self.lib.names().count("batch_begin"), self.lib.names().count("batch_end"))
        # patches fall through: no more calls at all
        n = len(self.lib.calls)
        train_step(model, optimizer, torch.randn(2, 3))
        self.assertEqual(len(self.lib.calls), n)

    def test_error_in_module_hook(self):
        def broken(path, output):
            raise ValueError("digest bug")

        self.rec.modules._on_output = broken
        self.rec.modules.uninstall()
        self.rec.modules.install(__import__("torch.nn.modules.module", fromlist=["x"]))
        out = small_model()(torch.randn(2, 3))
        self.assertEqual(tuple(out.shape), (2, 1))
        self.assertFalse(self.rec.active)
        self.assertEqual(len(self.lib.of("recorder_status")), 1)


class ForkTest(RecorderTestCase):
    def fork_and_ask(self, child):
        """Runs child() in a forked child; its answer (bytes) back through a pipe."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.write(write_end, child())
            finally:
                os._exit(0)
        os.close(write_end)
        answer = os.read(read_end, 100)
        os.close(read_end)
        os.waitpid(pid, 0)
        return answer

    def test_a_plain_os_fork_child_records_its_own_stream(self):
        # Issue 12.4: named by the hook's at-fork callback (processes.py), it records on,
        # opening its stream with the generator states it inherited.
        def child():
            before = len(self.lib.calls)
            ident = os.environ.get(processes.ENV, "")
            model = small_model()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for p in model.parameters():
                p.grad = torch.ones_like(p)
            optimizer.step()
            calls = [c[0] for c in self.lib.calls[before:]]
            at_fork = [c[0] for c in self.lib.calls[:before] if c[0].startswith("rng_state")][-1]
            return ("%s %s %s %s %s" % (ident, self.rec.active, self.rec.process_identity,
                                        at_fork, "runtime_info" in calls)).encode()
        words = self.fork_and_ask(child).decode().split()
        self.assertRegex(words[0], r"^fork\d+$")
        # Active, its own identity, the inherited states as it began (after the parent's last
        # states), then what it does (its first optimizer.step notes torch.shared_parameters).
        self.assertEqual(words[1:], ["True", words[0], "rng_state_at_fork", "True"], words)
        self.assertNotIn(processes.ENV, os.environ)  # the parent's environment is its own again
        self.assertTrue(self.rec.active)

    def test_a_dataloader_worker_fork_records_nothing(self):
        naming = processes._naming
        naming.enter_start(1)  # as inside Process.start of a DataLoader worker
        os.environ[processes.ENV] = processes.WORKER_PREFIX + "1"
        try:
            self.check_child_records_nothing()
        finally:
            naming.enter_start(-1)
            del os.environ[processes.ENV]

    def check_child_records_nothing(self):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            try:
                before = len(self.lib.calls)
                # A step without autograd: torch 2.x refuses backward() in a child forked after
                # the parent used autograd's threads ("Unable to handle autograd's threading in
                # combination with fork-based multiprocessing"), with or without dlrr.
                model = small_model()
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                optimizer.zero_grad()
                model(torch.randn(2, 3)).pow(2).mean().item()
                for p in model.parameters():
                    p.grad = torch.ones_like(p)
                optimizer.step()
                ok = (not self.rec.active) and len(self.lib.calls) == before
                os.write(write_end, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write_end)
        answer = os.read(read_end, 1)
        os.close(read_end)
        os.waitpid(pid, 0)
        self.assertEqual(answer, b"1")
        self.assertTrue(self.rec.active)


class ModeTest(unittest.TestCase):
    def test_off_mode_installs_nothing(self):
        lib = fake_native.FakeLib(mode=native.MODE_OFF)
        hook = sys.excepthook
        self.assertIsNone(dlrr_hook.install(lib=lib))
        self.assertIsNone(dlrr_hook.current())
        self.assertIs(sys.excepthook, hook)
        self.assertEqual(lib.calls, [])

    def test_replay_mode_installs_the_replayer(self):
        from dlrr_hook.replay import ReplayStrategy
        hook = sys.excepthook
        try:
            self.assertIsInstance(dlrr_hook.install(lib=fake_native.FakeLib(mode=native.MODE_REPLAY)).strategy,
                                  ReplayStrategy)
            self.assertIsNot(sys.excepthook, hook)
        finally:
            dlrr_hook.uninstall()
        self.assertIs(sys.excepthook, hook)  # the replayer's own excepthook is undone too

    def test_recorded_digests_cross_as_structs_and_read_as_the_replay_prints_them(self):
        lib = fake_native.FakeLib(mode=native.MODE_REPLAY)
        nan = float("nan")
        lib.recorded_digests[3] = [
            native.RecordedDigestT(b"", native.DIGEST_MODULE_OUTPUT, 0, 1, 0,
                                   native.DigestT(0xAB, 0, 0, -0.0, 1.5e10)),
            native.RecordedDigestT(b"fc1.weight", native.DIGEST_GRADIENT, 2, 0, 0,
                                   native.DigestT(2 ** 64 - 1, 7, 1, nan, nan)),
            native.RecordedDigestT(b"x", 99, 0, 0, 0, native.DigestT(1, 0, 0, 1.0 / 3, float("-inf"))),
        ]
        try:
            rep = dlrr_hook.install(lib=lib)
            self.assertEqual(rep.strategy.recorded_digests(3), [
                ("module output", "<root>", "0", "1", "0x00000000000000ab", "0", "0", "-0", "1.5e+10"),
                ("gradient", "fc1.weight", "2", "0", "0xffffffffffffffff", "7", "1", "nan", "nan"),
                ("tensor", "x", "0", "0", "0x0000000000000001", "0", "0", "0.333333333", "-inf"),
            ])
            self.assertEqual(rep.strategy.recorded_digests(4), [])
            self.assertEqual(rep.strategy.recorded_digests(None), [])
        finally:
            dlrr_hook.uninstall()

    def test_every_report_fact_the_hook_sends_has_a_field_in_the_report(self):
        # The library keeps a fact only under a key its report has a field for
        # (replayer/ReplayReport.cc, addHookFact); an unknown one becomes a warning.
        import re
        with open(os.path.join(fake_native.REPO, "replayer", "ReplayReport.cc")) as f:
            source = f.read()
        tables = source[source.index("kHookTexts[] = {"):source.index("}  // namespace", source.index("kHookLists"))]
        known = set(re.findall(r'\{"([a-z_.]+)", &ReplayReport::', tables))
        hook_dir = os.path.join(fake_native.REPO, "pyhook", "python", "dlrr_hook")
        sent = set()
        for name in os.listdir(hook_dir):
            if name.endswith(".py") and name != "preflight.py":  # preflight's facts are runtime info
                with open(os.path.join(hook_dir, name)) as f:
                    sent |= set(re.findall(r'\bfact(?:\(|, )"([a-z_.]+)"', f.read()))
        self.assertIn("stop.where", sent)
        self.assertIn("dist.group", sent)
        self.assertEqual(sent - known, set())

    def test_digest_kind_names_are_the_librarys(self):
        with open(os.path.join(fake_native.REPO, "replayer", "RecordingIndex.cc")) as f:
            source = f.read()
        names = source[source.index("static const char* names[] = {") :].split("}", 1)[0]
        self.assertEqual(tuple(n for n in names.split('"')[1::2]), native.DIGEST_KIND_NAMES)
        self.assertEqual(len(native.DIGEST_KIND_NAMES), native.DIGEST_MODULE_INPUT + 1)


class ImportWatcherTest(unittest.TestCase):
    def test_fires_after_module_executed_and_only_then(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "dlrr_watched_mod.py"), "w") as f:
                f.write("import sys\nVALUE = 41\nsys.modules[__name__].VALUE += 1\n")
            fired = []
            watcher = ImportWatcher("dlrr_watched_mod", lambda m: fired.append(m.VALUE))
            watcher.start()
            sys.path.insert(0, tmp)
            try:
                self.assertEqual(fired, [])
                import dlrr_watched_mod
                self.assertEqual(fired, [42])
                self.assertNotIn(watcher, sys.meta_path)
                self.assertNotIn("exec_module", vars(dlrr_watched_mod.__spec__.loader))
                self.assertIs(type(dlrr_watched_mod.__loader__).__name__, "SourceFileLoader")
            finally:
                sys.path.remove(tmp)
                sys.modules.pop("dlrr_watched_mod", None)
                watcher.stop()

    def test_failed_import_passes_through(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "dlrr_broken_mod.py"), "w") as f:
                f.write("raise ImportError('broken on purpose')\n")
            fired = []
            watcher = ImportWatcher("dlrr_broken_mod", fired.append)
            watcher.start()
            sys.path.insert(0, tmp)
            try:
                with self.assertRaisesRegex(ImportError, "broken on purpose"):
                    import dlrr_broken_mod  # noqa: F401
                self.assertEqual(fired, [])
            finally:
                sys.path.remove(tmp)
                watcher.stop()

    def test_torch_not_imported_until_the_job_does(self):
        script = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            import fake_native, dlrr_hook
            lib = fake_native.FakeLib()
            rec = dlrr_hook.install(lib=lib)
            assert "torch" not in sys.modules, "the hook imported torch"
            assert rec.torch is None
            import torch
            assert rec.torch is torch
            assert torch.Tensor.backward.__name__ == "backward"
            assert hasattr(torch.Tensor.backward, "__dlrr_original__")
            rec._at_exit()
            print(lib.of("recorder_status"))
        """ % os.path.dirname(os.path.abspath(__file__)))
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("no steps captured", result.stdout)


if __name__ == "__main__":
    unittest.main()
