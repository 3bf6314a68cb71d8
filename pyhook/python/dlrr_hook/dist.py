"""torch.distributed: collectives and DDP gradient buckets (docs/distributed.md).

DistHooks is made of three parts: dist_collectives.py (the ops, the native calls, the
function wrappers), dist_serving.py (a rank replayed alone) and dist_ddp.py (DDP).

Every collective goes to the native side as dlrr_collective_begin (numbered in issue order),
dlrr_collective_tensor (what this rank sends, then what it received) and dlrr_collective_end.
The native side decides: in record it digests (and with --collectives full keeps) the bytes;
in replay it checks the op and the bytes against the recording.

Patch points:
  torch.distributed collectives   all_reduce, broadcast, all_gather, reduce_scatter, send,
      recv, ... patched in torch.distributed.distributed_c10d (whose module globals the
      object collectives such as all_gather_object call) and re-exported in torch.distributed.
      Only the outermost call of a thread counts.
  DDP gradients                    DDP all-reduces gradient buckets in C++, out of Python's
      sight. Its built-in all-reduce is left alone: after backward() (DDP waited for every
      bucket) the gradients it left are recorded as one ddp_allreduce per DDP. A job's own
      communication hook (the public way in) is wrapped instead: it runs as before, and the
      bucket it is given and what its future returns are recorded (ddp_bucket), on the job's
      thread after backward(), never in a callback on the communication thread.
      (dlrr does not install a hook of its own: one that reproduced the built-in all-reduce bit
      for bit made 1 in 10 recorded torch 1.13 gloo jobs hang at exit, in the process group's
      destructor, which joins its worker while holding the GIL a worker was waiting for.)
  DDP's start-up broadcast         DistributedDataParallel.__init__ copies rank 0's parameters
      and buffers to every rank (in C++): recorded as the pseudo-collective ddp_init_sync, the
      module state right after.

Replay (DLRR_DIST_REPLAY):
  all    every rank replays under a real launcher (dlreplay --all-ranks): collectives really
         communicate and both sides of each are checked.
  alone  one rank runs by itself (dlreplay --rank R): init_process_group gets a local stand-in
         group (ReplayGroup) that answers rank and world size as recorded, every collective
         returns its recorded results (--collectives full, or in the failure window of
         --window; before a jump's snapshot nothing is served); DDP's built-in all-reduce runs
         over the stand-in group and the recorded gradients replace what it leaves; a job's own
         comm hook is replaced by one serving its buckets (it would communicate).
"""

import threading
import weakref

from . import native
from .dist_collectives import (DIST_REPLAY_ALL, DIST_REPLAY_ALONE, _OBJECT_COLLECTIVES, _OPS, ArgumentBinder,
                               CollectiveHooks, _reduce_name, _reduce_name_of)
from .dist_ddp import DdpHooks
from .dist_serving import ServeError, ServingHooks, make_replay_group_class

# What other modules and the tests use of this package's torch.distributed support.
__all__ = ["DIST_REPLAY_ALL", "DIST_REPLAY_ALONE", "ArgumentBinder", "DistHooks", "ServeError",
           "make_replay_group_class", "_OPS", "_reduce_name", "_reduce_name_of"]


class DistHooks(CollectiveHooks, ServingHooks, DdpHooks):
    """Installs the torch.distributed patches for the Session, recording or replaying."""

    def __init__(self, rec, torch, replay_mode=None):
        self._rec = rec
        self._torch = torch
        self._lib = rec.lib
        self._marshal = rec.marshal
        self._reduce_names = {}  # _reduce_name's cache
        self.replay_mode = replay_mode  # None (record), DIST_REPLAY_ALL or DIST_REPLAY_ALONE
        self._local = threading.local()
        self._ddp_hooked = weakref.WeakKeyDictionary()  # ddp -> "user" | "dlrr" | "builtin"
        # DDPs whose forward asked for a gradient all-reduce in this backward (DDP's built-in
        # all-reduce, no hook of the job's): their gradients are recorded after backward().
        self._sync_pending = weakref.WeakSet()
        self.local_grads_finite = True  # replay alone: what the rank would have sent was finite
        # DDP buckets whose all-reduce is under way: (seq, future or bucket tensor, sent finite).
        # Their results are recorded on the job's thread once backward() returned (flush_buckets),
        # never in a callback on the communication thread: a Python callback there holds
        # references that the process group's worker drops only with the GIL, and at
        # shutdown the thread destroying the group holds the GIL while joining that worker.
        self._pending = []
        self._pending_lock = threading.Lock()
        self._async = {}  # seq -> (work, result tensors) of async collectives not yet recorded
        self._c10d = None
        self.replay_group_class = None
        self.watch = None  # HangWatch, recording a distributed job (hang_watch.py)

    def install(self, patcher):
        torch = self._torch
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available():
            return
        c10d = self._c10d = __import__("torch.distributed.distributed_c10d", fromlist=["all_reduce"])
        for name in _OPS:
            if not hasattr(c10d, name):
                continue
            patcher.wrap(c10d, name, lambda original, name=name: self._wrap_collective(name, original))
            self._reexport(patcher, dist, c10d, name)
        patcher.wrap(c10d, "init_process_group", self._wrap_init)
        self._reexport(patcher, dist, c10d, "init_process_group")
        if self.replay_mode == DIST_REPLAY_ALONE:
            patcher.wrap(c10d, "get_backend", self._wrap_get_backend)
            self._reexport(patcher, dist, c10d, "get_backend")
            for name in _OBJECT_COLLECTIVES:
                if hasattr(c10d, name):
                    patcher.wrap(c10d, name, lambda original, name=name: self._refuse_object_collective(name))
                    self._reexport(patcher, dist, c10d, name)
        ddp_module = __import__("torch.nn.parallel.distributed", fromlist=["DistributedDataParallel"])
        ddp = ddp_module.DistributedDataParallel
        patcher.wrap(ddp, "__init__", self._wrap_ddp_init)
        patcher.wrap(ddp, "forward", self._wrap_ddp_forward)
        patcher.wrap(ddp, "register_comm_hook", self._wrap_register_comm_hook)
        if hasattr(ddp, "_register_builtin_comm_hook"):
            patcher.wrap(ddp, "_register_builtin_comm_hook", self._wrap_register_builtin)

    @staticmethod
    def _reexport(patcher, dist, c10d, name):
        """torch.distributed re-exports c10d's functions: the job's dist.NAME gets our wrapper too."""
        from .patching import original_of
        wrapped = getattr(c10d, name, None)
        if wrapped is not None and getattr(dist, name, None) is original_of(wrapped):
            patcher.wrap(dist, name, lambda original: _Same(wrapped))

    def _wrap_init(self, original):
        hooks = self

        def init_process_group(*args, **kwargs):
            if not hooks._rec.active:
                return original(*args, **kwargs)
            if hooks.replay_mode == DIST_REPLAY_ALONE:
                result = hooks._init_alone(original, args, kwargs)
            else:
                result = original(*args, **kwargs)
                hooks._rec.guarded(hooks._note_init)
                if hooks.replay_mode is None:
                    hooks._rec.guarded(hooks._start_watch)
            hooks._rec.guarded(hooks._rec.note_compiled_collectives)
            return result
        return init_process_group

    def _note_init(self):
        c10d = self._c10d
        info = self._lib.dlrr_runtime_info
        info(b"dist.backend", native.text(self._original_get_backend()()))
        info(b"dist.rank", native.text(c10d.get_rank()))
        info(b"dist.world_size", native.text(c10d.get_world_size()))

    def _start_watch(self):
        """Recording: the hang watch (hang_watch.py), once per process, unless DLRR_HANG_AFTER=0."""
        from .hang_watch import HangWatch, hang_after_seconds
        seconds = hang_after_seconds()
        if self.watch is not None or not seconds:
            return
        steps = getattr(self._rec, "steps", None)

        def step_of():
            current = getattr(steps, "current", None)
            return -1 if current is None else current
        self.watch = HangWatch(self._lib, seconds, step_of, self._group_text)
        self.watch.start()

    def _original_get_backend(self):
        from .patching import original_of
        return original_of(self._c10d.get_backend)


def _Same(fn):
    """A Patcher wrapper factory's result that is an existing wrapper (re-exports)."""
    return fn

