"""multiprocessing.Process identities (Hogwild trainers, issue 12 item 4; docs/replay.md).

Trainers a job starts with torch.multiprocessing (fork or spawn) share a command line (a
forked one shares its parent's), and which starts first is up to the scheduler.  What is
stable is the order the parent created them in: Process._identity, (1,), (2,), nested (1, 2).
Around Process.start() the hook puts it in DLRR_PROCESS_ID, where the child finds it: libdlrr
reads it at exec (spawn) or right after fork, records it in the stream header, and on replay
a process replays the stream whose identity is its own.  A forked child with a new identity
records its own stream; a fork that keeps its parent's (os.fork(), and DataLoader workers,
whose identity is marked as a worker's) records nothing, as before.

Installed in every process of a recorded or replayed job, the replayed one or not: the
parent of a replayed trainer is not replayed itself, yet must name its children.
"""

import os

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


def install(patcher):
    """Wraps multiprocessing's BaseProcess.start to pass the child its identity."""
    import multiprocessing.process as mp_process

    def make_start(original):
        def start(self):
            ident = identity_of(self)
            if not ident:
                return original(self)
            previous = os.environ.get(ENV)
            os.environ[ENV] = ident
            try:
                return original(self)
            finally:
                if previous is None:
                    os.environ.pop(ENV, None)
                else:
                    os.environ[ENV] = previous
        return start
    patcher.wrap(mp_process.BaseProcess, "start", make_start)
