"""Hangs of distributed jobs (docs/distributed.md): where this rank waits, and its stacks.

A daemon thread wakes every quarter of --hang-after (DLRR_HANG_AFTER seconds, default 60, 0 =
off) and writes one CollectiveWait event (committed at once) when
  hang        the collective in flight was issued longer than that ago (a rank blocked in a
              gloo/NCCL collective has released the GIL, so its stack can be read here);
  stalled     no collective began for that long after the last one completed (a rank stuck in
              data loading, a deadlock of its own, a long compute phase: triage decides);
  terminated  the launcher's SIGTERM came (torchrun stops every rank when one fails) before
              either was written for the current wait.
At most one event per wait: a rank that moves on and waits again gets a new one.

The SIGTERM path: the library's handler (dlrr_term_notice) writes a byte to a pipe this thread
waits on, then waits up to TERM_WAIT_MS for this thread's answer before chaining to the
previous disposition (the default: the rank dies of SIGTERM, as without dlrr). This thread
blocks SIGTERM so that the handler never runs on it.

The job's thread only stores two tuples per collective (_issue, _complete); nothing runs in
the job's threads otherwise, and nothing runs at all when the job is not distributed.
"""

import os
import select
import signal
import sys
import threading
import time

from . import native

HANG = 0
STALLED = 1
TERMINATED = 2
TERM_WAIT_MS = 3000
_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def hang_after_seconds(environ=os.environ):
    """DLRR_HANG_AFTER as seconds (float), 60 when unset or unreadable, 0 = off."""
    try:
        value = float(environ.get("DLRR_HANG_AFTER", "60"))
    except ValueError:
        return 60.0
    return value if value > 0 else 0.0


def format_stacks(frames, threads, first_ident):
    """Every thread's Python stack as traceback text, `first_ident`'s first, innermost call
    last; dlrr's own frames (the hook's wrappers) and the calling (watch) thread left out."""
    names = {t.ident: t.name for t in threads}
    own = threading.get_ident()
    order = sorted((ident for ident in frames if ident != own), key=lambda ident: (ident != first_ident, names.get(ident, "~")))
    out = []
    for ident in order:
        lines = []
        f = frames[ident]
        while f is not None:
            code = f.f_code
            if not os.path.abspath(code.co_filename).startswith(_HOOK_DIR):
                lines.append((code.co_filename, f.f_lineno, code.co_name))
            f = f.f_back
        if not lines:
            continue
        out.append("Thread %s:" % names.get(ident, ident))
        for filename, lineno, name in reversed(lines):
            out.append('  File "%s", line %d, in %s' % (filename, lineno, name))
            text = _source_line(filename, lineno)
            if text:
                out.append("    " + text)
    return "\n".join(out) + "\n"


def _source_line(filename, lineno):
    import linecache
    try:
        return linecache.getline(filename, lineno).strip()
    except Exception:
        return ""


class HangWatch:
    def __init__(self, lib, hang_after, step_of, group_text=None):
        self._lib = lib
        self._group_text = group_text  # (group object) -> its name as bytes ("world", "0,2")
        self._hang_after = hang_after
        self._step_of = step_of  # () -> the step in progress (-1 none)
        self._period = min(max(hang_after / 4.0, 0.05), 15.0)
        # (seq, op, group object, step, monotonic) of the collective in flight on the job's thread.
        self.inflight = None
        # (seq, op, step, monotonic) of the last collective completed.
        self.completed = None
        self._written = None  # the wait the last event was about
        self._main = threading.main_thread().ident
        self._lock = threading.Lock()
        self._notify_r = self._ack_w = -1

    # ---- the job's thread (cheap: two stores)
    def issue(self, seq, op, group):
        self.inflight = (seq, op, group, self._step_of(), time.monotonic())

    def complete(self, seq, op):
        self.inflight = None
        self.completed = (seq, op, self._step_of(), time.monotonic())

    # ---- start
    def start(self):
        notify_r, notify_w = os.pipe()
        ack_r, ack_w = os.pipe()
        self._notify_r, self._ack_w = notify_r, ack_w
        thread = threading.Thread(target=self._run, name="dlrr-hang-watch", daemon=True)
        thread.start()
        # Installed last: the thread that answers it exists (it blocks SIGTERM itself).
        self._lib.dlrr_term_notice(notify_w, ack_r, TERM_WAIT_MS)
        # At exit the thread may be gone: closing the answer's end makes a later SIGTERM go on at once.
        import atexit
        atexit.register(self._close_answer)

    def _close_answer(self):
        ack_w, self._ack_w = self._ack_w, -1
        if ack_w >= 0:
            try:
                os.close(ack_w)
            except OSError:
                pass

    def _run(self):
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        except (AttributeError, ValueError, OSError):
            return  # the handler could land on this thread and wait for itself: no watch
        while True:
            try:
                ready, _, _ = select.select([self._notify_r], [], [], self._period)
            except (OSError, ValueError):
                return
            if ready:
                try:
                    os.read(self._notify_r, 64)
                except OSError:
                    pass
                self._check(TERMINATED)
                try:
                    self._lib.dlrr_window_flush()  # dlrecord --window: the held batches too
                except Exception:
                    pass
                try:
                    if self._ack_w >= 0:
                        os.write(self._ack_w, b"k")
                except OSError:
                    pass
            else:
                self._check(None)

    def _check(self, reason):
        """Writes the event the current wait deserves, once per wait; reason TERMINATED forces one."""
        try:
            with self._lock:
                now = time.monotonic()
                inflight, completed = self.inflight, self.completed
                if inflight is not None:
                    key = ("issued", inflight[0])
                    waited = now - inflight[4]
                    kind = HANG
                elif completed is not None:
                    key = ("after", completed[0], completed[3])
                    waited = now - completed[3]
                    kind = STALLED
                else:
                    return
                if reason is None and (waited < self._hang_after or key == self._written):
                    return
                if reason is not None and key == self._written:
                    return  # already said where this wait is
                self._written = key
                self._write(reason if reason is not None else kind, inflight, completed, waited)
        except Exception as exc:  # never the job's problem
            try:
                sys.stderr.write("dlrr: hang watch: %s\n" % exc)
            except Exception:
                pass

    def _write(self, reason, inflight, completed, waited):
        stacks = format_stacks(sys._current_frames(), threading.enumerate(), self._main)
        c_seq, c_op, c_step = (completed[0], completed[1], completed[2]) if completed is not None else (-1, "", -1)
        if inflight is not None:
            seq, op, group, step = inflight[0], inflight[1], inflight[2], inflight[3]
        else:
            seq, op, group, step = 0, "", "", -1
        if self._group_text is not None and inflight is not None:
            group = self._group_text(group)
        self._lib.dlrr_collective_wait(reason, 1 if inflight is not None else 0, seq, native.text(op),
                                       group if isinstance(group, bytes) else native.text(group), step, c_seq,
                                       native.text(c_op), c_step, int(waited * 1000), native.text(stacks))
