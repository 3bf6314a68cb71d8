"""Uncaught exceptions and fatal signals, recorded as failures.

Patch points: sys.excepthook and threading.excepthook are wrapped; the wrapper reports to
dlrr_failure_exception and then calls the hook it replaced, so what the job prints is
byte-identical to a run without dlrr.  A job (or a later sitecustomize) that installs its
own excepthook without chaining would hide exceptions from us, so at exit the recorder also
reports sys.last_value (set by the interpreter for the uncaught exception that ended the
main thread) when no hook reported it.

The hook's own wrappers (DataLoader.__next__, backward, optimizer.step) sit in the call
chain of the job, so an exception that passes through them carries their frames.  Before
reporting or handing an uncaught exception to the previous hook, those frames are unlinked
from its traceback (and from the tracebacks of its __cause__/__context__ chain): the job
prints exactly the traceback it prints without dlrr.

Fatal signals are caught natively; faulthandler writes the Python stacks of all threads into
the library's pystack file (dlrr_pystack_fd(): the library's own descriptor, so the job keeps
every number it would have without dlrr), which the native handler embeds in the trace.  The native
handler runs first (faulthandler re-raises, which would hide the fault's code and address) and
calls faulthandler itself.  If the job already enabled faulthandler (PYTHONFAULTHANDLER,
-X faulthandler) it is left alone, and in front.
"""

import ctypes
import faulthandler
import os
import sys
import threading
import traceback

from . import gpu, native


_HOOK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_hook_frame(tb):
    return tb.tb_frame.f_code.co_filename.startswith(_HOOK_DIR)


def strip_hook_frames(tb):
    """The traceback `tb` with the hook's frames unlinked (in place); tb if all are ours."""
    kept = []
    entry = tb
    while entry is not None:
        if not _is_hook_frame(entry):
            kept.append(entry)
        entry = entry.tb_next
    if not kept or len(kept) == _length(tb):
        return tb
    for current, following in zip(kept, kept[1:] + [None]):
        current.tb_next = following
    return kept[0]


def _length(tb):
    n = 0
    while tb is not None:
        n += 1
        tb = tb.tb_next
    return n


def strip_exception(exc, tb):
    """strip_hook_frames for an exception, its traceback and its cause/context chain."""
    tb = strip_hook_frames(tb) if tb is not None else tb
    seen = set()
    linked = exc
    while linked is not None and id(linked) not in seen:
        seen.add(id(linked))
        for chained in (linked.__cause__, linked.__context__):
            if chained is not None and chained.__traceback__ is not None:
                chained.__traceback__ = strip_hook_frames(chained.__traceback__)
        linked = linked.__cause__ or linked.__context__
    if exc is not None and tb is not None:
        exc.__traceback__ = tb
    return tb


def _stripped(exc, tb):
    try:
        return strip_exception(exc, tb)
    except Exception:  # never let the tidying hide the job's exception
        return tb


def exception_type_name(exc_type):
    module = getattr(exc_type, "__module__", None)
    name = getattr(exc_type, "__qualname__", getattr(exc_type, "__name__", str(exc_type)))
    if module in (None, "builtins", "__main__"):
        return name
    return "%s.%s" % (module, name)


def _safe_str(exc):
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not hide the failure
        return "<unprintable %s>" % type(exc).__name__


class FailureHooks:
    """Exception hooks and faulthandler for one recorder."""

    def __init__(self, recorder, lib):
        self._rec = recorder
        self._lib = lib
        self._reported = None
        self._prev_excepthook = None
        self._prev_threading_hook = None
        self._our_excepthook = None
        self._our_threading_hook = None
        self._pystack_fd = None  # the library's descriptor while our faulthandler writes to it
        self._library_first = False

    # -- reporting
    def report(self, exc_type, exc, tb):
        """dlrr_failure_exception for one exception (once per exception object)."""
        if exc is not None and exc is self._reported:
            return
        self._reported = exc
        frames = traceback.extract_tb(tb) if tb is not None else []
        n = len(frames)
        files = (ctypes.c_char_p * max(n, 1))(*[native.text(f.filename) for f in frames])
        lines = (ctypes.c_int32 * max(n, 1))(*[f.lineno or 0 for f in frames])
        functions = (ctypes.c_char_p * max(n, 1))(*[native.text(f.name) for f in frames])
        code = (ctypes.c_char_p * max(n, 1))(*[native.text(f.line or "") for f in frames])
        where = "%s:%d" % (frames[-1].filename, frames[-1].lineno or 0) if frames else ""
        triage = getattr(self._rec, "triage", None)
        if triage is not None:
            triage.report("failure")  # packages and GPU peaks, written with the failure
        message = _safe_str(exc)
        before_failure = getattr(self._rec, "before_failure", None)
        if before_failure is not None:
            before_failure()  # the failing step's deferred GPU digests first: a NaN came before
        detail, items = gpu.out_of_memory_detail(getattr(self._rec, "torch", None), exc)
        if detail:  # GPU OOM: the allocator's figures at the failing step
            for key, value in items:
                self._lib.dlrr_runtime_info(native.text(key), native.text(value))
            message += "\n[dlrr] " + detail
        self._lib.dlrr_failure_exception(native.text(exception_type_name(exc_type)),
                                         native.text(message), native.text(where), n,
                                         files, lines, functions, code)

    def report_unhooked_exit_exception(self):
        """At exit: the exception that ended the main thread, if no hook reported it."""
        exc = getattr(sys, "last_value", None)
        if exc is not None and exc is not self._reported:
            self.report(type(exc), exc, _stripped(exc, getattr(exc, "__traceback__", None)))

    # -- installation
    def install(self):
        rec = self._rec
        hooks = self
        previous = sys.excepthook

        def excepthook(exc_type, exc, tb):
            tb = _stripped(exc, tb)
            if rec.active and not issubclass(exc_type, SystemExit):
                rec.guarded(hooks.report, exc_type, exc, tb)
            return previous(exc_type, exc, tb)

        self._prev_excepthook = previous
        self._our_excepthook = excepthook
        sys.excepthook = excepthook

        previous_threading = threading.excepthook

        def threading_excepthook(args):
            tb = _stripped(args.exc_value, args.exc_traceback)
            if tb is not args.exc_traceback:
                args = threading.ExceptHookArgs([args.exc_type, args.exc_value, tb, args.thread])
            if rec.active and args.exc_type is not None and not issubclass(args.exc_type, SystemExit):
                rec.guarded(hooks.report, args.exc_type, args.exc_value, args.exc_traceback)
            return previous_threading(args)

        self._prev_threading_hook = previous_threading
        self._our_threading_hook = threading_excepthook
        threading.excepthook = threading_excepthook

    def enable_faulthandler(self):
        if faulthandler.is_enabled():
            return  # the job's own choice
        # The library created the file (exclusively, private) and keeps it open: faulthandler
        # writes through that same descriptor; nothing is opened by path here.
        fd = self._lib.dlrr_pystack_fd()
        if fd is None or fd < 0:
            return
        faulthandler.enable(file=fd, all_threads=True)
        self._pystack_fd = fd
        self.faulthandler_first(False)

    def faulthandler_first(self, first):
        """Which of faulthandler and the library's fatal-signal handler runs first. The library's
        (first=False) sees the kernel's siginfo (fault code and address) and then runs
        faulthandler itself; faulthandler goes back in front before it is disabled (it then
        restores the library's) and at exit, once the interpreter is being torn down."""
        if self._pystack_fd is not None and self._library_first != (not first):
            self._library_first = not first
            self._lib.dlrr_fatal_signals_first(0 if first else 1)

    def retake_first(self):
        """While the library's handler runs first: take the top slot back from handlers installed
        over it since (UCX at torch's import); the library then calls them itself."""
        if self._pystack_fd is not None and self._library_first:
            self._lib.dlrr_fatal_signals_first(1)

    def disable_faulthandler(self):
        """Turn our faulthandler off (forked children, uninstall); theirs stays."""
        if self._pystack_fd is not None:
            self.faulthandler_first(True)
            faulthandler.disable()
            self._pystack_fd = None  # the library's: it closes it

    def uninstall(self):
        if sys.excepthook is self._our_excepthook:
            sys.excepthook = self._prev_excepthook
        if threading.excepthook is self._our_threading_hook:
            threading.excepthook = self._prev_threading_hook
        self.disable_faulthandler()
