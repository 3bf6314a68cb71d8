"""The newcomer's rough edges (issue 32, item 4), each checked the way a user meets it."""
import os
import pty
import re
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
