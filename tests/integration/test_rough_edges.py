"""The newcomer's rough edges (issue 32, item 4), each checked the way a user meets it."""
import json
import os
import pty
import re
import shutil
import subprocess

from harness import EXAMPLES, PY, TraceTestCase, dataset, run, tool

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(HERE, "jobs", "tiny_train.py")


def on_terminal(argv, timeout=300):
    """(exit status, bytes) of argv with stdout and stderr on one pseudo-terminal."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=timeout), out


class RoughEdgesTest(TraceTestCase):
    def test_progress_line_is_erased_before_the_jobs_output(self):
        trace = self.trace_path()
        run([tool("dlrecord"), "-o", trace, "--", PY, os.path.join(EXAMPLES, "train.py"), "--data", dataset(),
             "--seed", "8", "--epochs", "1"], check=False, timeout=300)
        status, out = on_terminal([tool("dlreplay"), trace, "--until", "end"])
        self.assertIn(b"dlreplay: step ", out)  # a terminal gets the progress line
        # Whatever follows a progress line first returns to the line's start and erases it (or
        # draws the next progress line over it): the job's lines and dlreplay's report never
        # continue it.
        self.assertIsNone(re.search(rb"steps/s\)\x1b\[K(?!\r(\x1b\[K|dlreplay: step ))", out), out[-2000:])
        for line in (b"done steps 64\r\n", b"epoch 0 eval_acc"):
            self.assertIn(line, out)
        self.assertRegex(out, rb"\r\x1b\[Kdlreplay: (replayed to the end|diverged)")

    def test_info_names_the_culprit_and_dump_takes_an_xy_batch(self):
        trace = self.trace_path()
        rec = run([tool("dlrecord"), "-o", trace, "--", PY, os.path.join(EXAMPLES, "train.py"), "--data", dataset(),
                   "--seed", "8", "--epochs", "1"], timeout=300)
        self.assertEqual(rec.returncode, 0, rec.stderr)
        text = run([tool("dltrace"), "info", trace], check=True).stdout
        # The README's "what happened" names the corrupt sample (examples/prepare_data.py: 1365).
        self.assertRegex(text, r"\nculprit     sample \d+ of the batch of step 30 \(dataset index 1365\): "
                               r"12 non-finite input values in field 0\n")
        doc = json.loads(run([tool("dltrace"), "info", trace, "--json"], check=True).stdout)
        self.assertEqual(len(doc["culprit_samples"]), 1)
        self.assertIn("dataset index 1365", doc["culprit_samples"][0])
        # The launcher's row shows the command it ran (its own stream has no argv).
        launcher = next(l for l in text.splitlines() if l.startswith("  launcher "))
        self.assertTrue(launcher.endswith(" ".join(doc["command"])), launcher)
        # dump --batch on an (x, y) batch: x, with a note naming the fields.
        out = os.path.join(self.tmp, "x.npy")
        p = run([tool("dltrace"), "dump", trace, "--step", "30", "--batch", "-o", out])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("dumped field 0 (--batch 1 for the next)", p.stderr)
        shape = run([PY, "-c", "import numpy, sys; print(numpy.load(sys.argv[1]).shape)", out], check=True).stdout
        self.assertEqual(shape.strip(), "(32, 3, 16, 16)")
        # A clean run names no culprit.
        clean = self.trace_path("clean.trace")
        run([tool("dlrecord"), "-o", clean, "--", PY, TINY, "--steps", "3"], check=True, timeout=300)
        self.assertNotIn("culprit", run([tool("dltrace"), "info", clean], check=True).stdout)

    def test_replay_warns_when_the_script_changed(self):
        script = os.path.join(self.tmp, "job.py")
        shutil.copy(TINY, script)
        trace = self.trace_path()
        run([tool("dlrecord"), "-o", trace, "--", PY, script, "--steps", "3"], check=True, timeout=300)
        same = run([tool("dlreplay"), trace], timeout=300)
        self.assertEqual(same.returncode, 0, same.stderr)
        self.assertNotIn("changed since the recording", same.stderr)
        with open(script, "a") as f:
            f.write("# an edit after the recording\n")
        changed = run([tool("dlreplay"), trace], timeout=300)
        self.assertIn("dlreplay: warning: %s changed since the recording (" % script, changed.stderr)
        self.assertIn("the replay runs the code as it is now", changed.stderr)
