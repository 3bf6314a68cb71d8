"""The batch window written when the job is sent SIGTERM (dlrecord --window; docs/recording.md,
"Batches by reference").

The library's SIGTERM handler (dlrr_term_notice, installed only over the default disposition)
writes a byte to a pipe this thread waits on and waits for its answer; the thread writes the
window (dlrr_window_flush) and answers, and the signal goes on to the default disposition: the
job dies of SIGTERM, as without dlrr. The thread blocks SIGTERM, so the handler never runs on
it. A distributed rank's hang watch (hang_watch.py) owns the same notice and writes the window
itself there; this one is started only outside a distributed job.

Writing while the job's thread is stopped in the handler can wait on a lock that thread held
(inside the recorder's writer): the handler's wait bounds it, and the window is then lost as
with kill -9, never the per-step record.
"""

import os
import select
import signal
import threading

WAIT_MS = 10000  # the window may hold hundreds of MB: written by the writer thread meanwhile


def distributed(environ=None):
    env = os.environ if environ is None else environ
    return bool(env.get("WORLD_SIZE") or env.get("RANK"))


class TermFlush:
    def __init__(self, lib):
        self._lib = lib
        self._notify_r = self._ack_w = -1

    def start(self):
        notify_r, notify_w = os.pipe()
        ack_r, ack_w = os.pipe()
        self._notify_r, self._ack_w = notify_r, ack_w
        threading.Thread(target=self._run, name="dlrr-window-flush", daemon=True).start()
        self._lib.dlrr_term_notice(notify_w, ack_r, WAIT_MS)

    def _run(self):
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        except (AttributeError, ValueError, OSError):
            return  # the handler could land on this thread and wait for itself
        while True:
            try:
                ready, _, _ = select.select([self._notify_r], [], [])
                if ready:
                    os.read(self._notify_r, 64)
            except (OSError, ValueError):
                return
            self._lib.dlrr_window_flush()
            try:
                os.write(self._ack_w, b"k")
            except OSError:
                return
