"""multiprocessing.Process identities (Hogwild trainers, issue 12 item 4; docs/replay.md).

Trainers a job starts with torch.multiprocessing (fork or spawn) share a command line (a
forked one shares its parent's), and which starts first is up to the scheduler.  What is
stable is the order the parent created them in: Process._identity, (1,), (2,), nested (1, 2).
Around Process.start() the hook puts it in DLRR_PROCESS_ID, where the child finds it: libdlrr
reads it at exec (spawn) or right after fork, records it in the stream header, and on replay
a process replays the stream whose identity is its own.  A forked child with a new identity
records its own stream; DataLoader workers, whose identity is marked as a worker's, record
nothing.

A plain os.fork() (no multiprocessing: a Hogwild loop written by hand, a forked helper) is
named too, by the order of such forks in its parent: "fork1", "fork2", nested "1:fork1".
Python runs at-fork callbacks for every fork it makes (os.fork, os.forkpty, pty.fork, posix.fork),
so the name is in the environment when libdlrr's fork handlers run: the child records its own
stream, and the parent's Fork event says so (a fork by native code, which runs no callback,
is marked as not recorded there).

Installed in every process of a recorded or replayed job, the replayed one or not: the
parent of a replayed trainer is not replayed itself, yet must name its children.
"""

import os
import threading

ENV = "DLRR_PROCESS_ID"
WORKER_PREFIX = "dataloader-worker:"  # libdlrr: never a trainer (interpose: afterForkChild)


def _is_loader_worker(process):
    target = getattr(process, "_target", None)
    return (getattr(target, "__name__", "") == "_worker_loop"
            and getattr(target, "__module__", "").startswith("torch.utils.data"))


def identity_of(process):
    ident = ":".join(str(i) for i in getattr(process, "_identity", ()) or ())
    if ident and _is_loader_worker(process):
        ident = WORKER_PREFIX + ident
    return ident


def is_trainer_identity(ident):
    return bool(ident) and not ident.startswith(WORKER_PREFIX)


def _set_env(value):
    if value is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = value


def fork_identity(parent, number):
    """The identity of the number-th os.fork() child of a process whose identity is parent."""
    return "%s:fork%d" % (parent, number) if parent else "fork%d" % number


class ForkNaming:
    """At-fork callbacks naming plain os.fork() children (see the module's docstring).  One per
    process, registered once (os.register_at_fork cannot be undone)."""

    def __init__(self):
        self.forks = 0  # plain forks of this process so far
        self._local = threading.local()  # .starting: inside Process.start (it names the child)

    def starting(self):
        return getattr(self._local, "starting", 0) > 0

    def enter_start(self, delta):
        self._local.starting = getattr(self._local, "starting", 0) + delta

    def before(self):
        self._local.saved = None
        if self.starting():
            return
        previous = os.environ.get(ENV)
        self.forks += 1
        self._local.saved = (previous,)
        os.environ[ENV] = fork_identity(previous or "", self.forks)

    def after_in_parent(self):
        saved, self._local.saved = getattr(self._local, "saved", None), None
        if saved is not None:
            _set_env(saved[0])

    def after_in_child(self):
        self._local.saved = None  # the child keeps its new identity
        self.forks = 0


_naming = None  # this process's ForkNaming, once registered


def _guard(fn):
    def call():
        try:
            fn()
        except Exception:
            pass  # never into the job's fork
    return call


def install(patcher):
    """Wraps multiprocessing's BaseProcess.start to pass the child its identity, and names
    plain os.fork() children."""
    global _naming
    import multiprocessing.process as mp_process

    if _naming is None:
        naming = ForkNaming()
        # after_in_parent/child run in registration order, before in reverse: ours first and last.
        os.register_at_fork(before=_guard(naming.before), after_in_parent=_guard(naming.after_in_parent),
                            after_in_child=_guard(naming.after_in_child))
        _naming = naming
    naming = _naming

    def make_start(original):
        def start(self):
            ident = identity_of(self)
            if not ident:
                return original(self)
            previous = os.environ.get(ENV)
            os.environ[ENV] = ident
            naming.enter_start(1)
            try:
                return original(self)
            finally:
                naming.enter_start(-1)
                _set_env(previous)
        return start
    patcher.wrap(mp_process.BaseProcess, "start", make_start)
