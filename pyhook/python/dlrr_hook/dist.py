"""torch.distributed: collectives and DDP gradient buckets (docs/distributed.md).

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
         returns its recorded results (--collectives full); DDP's built-in all-reduce runs over
         the stand-in group and the recorded gradients replace what it leaves; a job's own
         comm hook is replaced by one serving its buckets (it would communicate).
"""

import ctypes
import inspect
import os
import sys
import threading
import weakref

from . import native

DIST_REPLAY_ALONE = "alone"
DIST_REPLAY_ALL = "all"


def _none(p):
    return []


def _one(name):
    return lambda p: [p[name]]


def _many(name):
    return lambda p: list(p[name] or [])


# op: (inputs, results, peer parameter, reduce-op parameter, returns the peer)
_OPS = {
    "all_reduce": (_one("tensor"), _one("tensor"), None, "op"),
    "broadcast": (_one("tensor"), _one("tensor"), "src", None),
    "reduce": (_one("tensor"), _one("tensor"), "dst", "op"),
    "all_gather": (_one("tensor"), _many("tensor_list"), None, None),
    "all_gather_into_tensor": (_one("input_tensor"), _one("output_tensor"), None, None),
    "_all_gather_base": (_one("input_tensor"), _one("output_tensor"), None, None),
    "reduce_scatter": (_many("input_list"), _one("output"), None, "op"),
    "reduce_scatter_tensor": (_one("input"), _one("output"), None, "op"),
    "_reduce_scatter_base": (_one("input"), _one("output"), None, "op"),
    "all_to_all_single": (_one("input"), _one("output"), None, None),
    "all_to_all": (_many("input_tensor_list"), _many("output_tensor_list"), None, None),
    "gather": (_one("tensor"), _many("gather_list"), "dst", None),
    "scatter": (_many("scatter_list"), _one("tensor"), "src", None),
    "barrier": (_none, _none, None, None),
    "monitored_barrier": (_none, _none, None, None),
    "send": (_one("tensor"), _none, "dst", None),
    "isend": (_one("tensor"), _none, "dst", None),
    "recv": (_none, _one("tensor"), "src", None),
    "irecv": (_none, _one("tensor"), "src", None),
}
# torch's object collectives pickle on one side and unpickle on the other (never replayed alone).
_OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
                       "send_object_list", "recv_object_list")
_PUBLIC_NAME = {"_all_gather_base": "all_gather_into_tensor", "_reduce_scatter_base": "reduce_scatter_tensor",
                "isend": "send", "irecv": "recv", "monitored_barrier": "barrier"}


class ServeError(Exception):
    """A collective the recording cannot serve to a rank replayed alone."""


class DistHooks:
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

    # ------------------------------------------------------------------ install
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

    # ------------------------------------------------------------------ native calls
    def _group_text(self, group):
        if group is None:
            return b"world"
        c10d = self._c10d
        try:
            if hasattr(c10d, "get_process_group_ranks"):
                ranks = c10d.get_process_group_ranks(group)
            else:
                ranks = sorted(c10d._pg_group_ranks[group].keys())
            if group is getattr(c10d, "GroupMember").WORLD:
                return b"world"
            return ",".join(str(r) for r in ranks).encode()
        except Exception:
            return b"group"

    def _tensor(self, seq, is_result, tensor):
        """dlrr_collective_tensor of one tensor; returns its rc (-1: not a tensor we can read)."""
        if not isinstance(tensor, self._torch.Tensor):
            return -1
        p = self._marshal.prepare(tensor)
        if p is None:
            return -1
        return self._lib.dlrr_collective_tensor(seq, is_result, p[1], p[3], p[4], p[5], p[6])

    def _begin_args(self, op, group, reduce_op, peer, bucket, async_op):
        """dlrr_collective_begin's arguments (begin1's first six)."""
        reduce_text = b"" if reduce_op is None else _reduce_name(self._torch, reduce_op, self._reduce_names).encode()
        return (op.encode(), self._group_text(group), reduce_text, int(peer) if peer is not None else -1, bucket,
                1 if async_op else 0)

    def _begin(self, op, group=None, reduce_op=None, peer=-1, bucket=-1, async_op=False):
        return self._lib.dlrr_collective_begin(*self._begin_args(op, group, reduce_op, peer, bucket, async_op))

    def _prepared_one(self, tensors):
        """TensorMarshal.prepare of the only tensor of a one-tensor list, else None."""
        if len(tensors) != 1 or not isinstance(tensors[0], self._torch.Tensor):
            return None
        return self._marshal.prepare(tensors[0])

    def _begin_sending(self, op, group, reduce_op, peer, async_op, inputs):
        """_begin, then the inputs: the common one-tensor collective in one crossing
        (dlrr_collective_begin1), anything else as separate calls. Same effect either way."""
        q = self._prepared_one(inputs)
        if q is None:
            seq = self._begin(op, group, reduce_op, peer, -1, async_op)
            self._results_as_inputs(seq, inputs)
            return seq
        return self._lib.dlrr_collective_begin1(*self._begin_args(op, group, reduce_op, peer, -1, async_op),
                                                q[1], q[3], q[4], q[5], q[6])

    def _finish(self, seq, results):
        """The results, then dlrr_collective_end: one crossing for one tensor (dlrr_collective_end1)."""
        q = self._prepared_one(results)
        if q is None:
            self._results(seq, results)
            self._lib.dlrr_collective_end(seq, b"")
        else:
            self._lib.dlrr_collective_end1(seq, q[1], q[3], q[4], q[5], q[6], b"")

    def _results(self, seq, tensors):
        for t in tensors:
            self._tensor(seq, 1, t)

    # ------------------------------------------------------------------ serving (alone)
    def _serve(self, seq, index, tensor, what):
        """Copies the recorded result `index` of `seq` into tensor; ServeError when unavailable."""
        data = ctypes.c_void_p()
        n = ctypes.c_uint64()
        rc = self._lib.dlrr_replay_collective_result(seq, index, ctypes.byref(data), ctypes.byref(n))
        if rc != 1:
            raise ServeError(
                "collective #%d (%s): %s" % (seq, what, "the recording kept only its digests; record with "
                                             "`dlrecord --collectives full` to replay one rank alone, or replay "
                                             "every rank with `dlreplay --all-ranks`" if rc == 0 else
                                             "the recording has no result %d" % index))
        torch = self._torch
        nbytes = tensor.numel() * tensor.element_size()
        if n.value != nbytes:
            raise ServeError("collective #%d (%s): result %d holds %d bytes, the replayed tensor %d"
                             % (seq, what, index, n.value, nbytes))
        if nbytes:
            raw = bytearray(ctypes.string_at(data.value, nbytes))
            host = torch.frombuffer(raw, dtype=tensor.dtype).view(tensor.shape)
            with torch.no_grad():
                tensor.copy_(host)

    def _served_or_recorded(self, seq, tensors, what):
        """What DDP left in `tensors` (C++ communication the hook does not see): replayed alone,
        the recorded results put in place (True); recording, their digests (bytes with
        --collectives full) and the collective's end (False)."""
        if self.replay_mode == DIST_REPLAY_ALONE:
            try:
                for i, t in enumerate(tensors):
                    self._serve(seq, i, t, what)
            except ServeError as exc:
                self._unservable(exc)
            return True
        self._results(seq, tensors)
        self._lib.dlrr_collective_end(seq, b"")
        if self.watch is not None:
            self.watch.complete(seq, what)
        return False

    def _unservable(self, exc):
        """Stops the replay: the rank cannot go on without its peers."""
        self._rec.strategy.stop("unservable", str(exc), sys._getframe(2))
        raise RuntimeError("dlrr: %s" % exc)

    def _finite(self, tensors):
        torch = self._torch
        return all(bool(torch.isfinite(t).all()) for t in tensors
                   if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()))

    def _received_nonfinite(self, seq, op, sent_finite, results):
        """Replay with a nan target: stop where non-finite values reach this rank from its peers.

        The rank's own computation was finite up to here (what it sent was); anomaly detection
        or module hooks would never name a cause on this rank, so the stop is right after the
        collective that delivered them.
        """
        rec = self._rec
        target = getattr(rec, "target", None)
        if not sent_finite or not results or target is None or target.kind != native.TARGET_NAN:
            return
        if getattr(rec, "_stopped", True) or rec.steps.current != target.step or self._finite(results):
            return
        rec.strategy.stop("target", "after collective #%d (%s) of step %d: its result holds the first non-finite values "
                 "this rank saw, received from other ranks (dltrace info names the rank where they began; "
                 "replay that one with --rank)" % (seq, _display(op), target.step), sys._getframe(2))

    def _completed_work(self, value):
        torch = self._torch
        fut = torch.futures.Future()
        fut.set_result(value)
        make = getattr(torch._C._distributed_c10d, "_create_work_from_future", None)
        if make is not None:
            return make(fut)
        return _DoneWork(fut)

    # ------------------------------------------------------------------ collectives
    def _wrap_collective(self, name, original):
        hooks = self
        rec = self._rec
        local = self._local
        inputs_of, results_of, peer_param, reduce_param = _OPS[name]
        op = _PUBLIC_NAME.get(name, name)
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError):
            signature = None
        fast_bind = ArgumentBinder(signature).bind if signature is not None else None

        def collective(*args, **kwargs):
            if not rec.active or signature is None or getattr(local, "depth", 0):
                return original(*args, **kwargs)
            p = fast_bind(args, kwargs)
            if p is None:
                try:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                except TypeError:
                    return original(*args, **kwargs)  # the job's own mistake: torch says what
                p = bound.arguments
            local.depth = 1
            try:
                if hooks.replay_mode == DIST_REPLAY_ALONE:
                    return hooks._served_call(name, op, p, inputs_of, results_of, peer_param, reduce_param)
                return hooks._observed_call(name, op, original, args, kwargs, p, inputs_of, results_of,
                                            peer_param, reduce_param)
            finally:
                local.depth = 0
        return collective

    def _observed_call(self, name, op, original, args, kwargs, p, inputs_of, results_of, peer_param, reduce_param):
        """Record, or replay with real peers: the call runs; both sides go to the native side."""
        rec = self._rec
        async_op = bool(p.get("async_op")) or name in ("isend", "irecv")
        seq = rec.guarded(self._begin_sending, op, p.get("group"), p.get(reduce_param) if reduce_param else None,
                          self._peer(p, peer_param), async_op, inputs_of(p))
        if seq is None:
            return original(*args, **kwargs)
        sent_finite = rec.guarded(self._finite, inputs_of(p)) if self.replay_mode is not None else None
        watch = self.watch
        if watch is not None and not async_op:
            watch.issue(seq, op, p.get("group"))  # named by the watch only when it writes
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            rec.guarded(self._lib.dlrr_collective_end, seq, native.text("failed: %s: %s" % (type(exc).__name__, exc)))
            raise
        if watch is not None:
            watch.complete(seq, op)
        if async_op and result is not None:
            return rec.guarded(self._complete_later, seq, result, results_of(p)) or result
        else:
            if name == "recv" and isinstance(result, int):
                pass  # the sender's rank; replay returns the recorded peer
            rec.guarded(self._finish, seq, results_of(p))
            if sent_finite:
                rec.guarded(self._received_nonfinite, seq, op, sent_finite, results_of(p))
        return result

    def _peer(self, p, peer_param):
        """The peer's global rank (None: any/unknown; -1: no peer parameter)."""
        if not peer_param:
            return -1
        peer = p.get(peer_param)
        group_peer = p.get("group_" + peer_param)
        if peer is None and group_peer is not None:
            # torch 2.6+: send/recv/broadcast/reduce/gather/scatter take group_dst/group_src
            # (a rank in `group`) as an alternative to the global dst/src.
            group = p.get("group")
            try:
                if group is None or group is self._c10d.GroupMember.WORLD:
                    return group_peer
                return self._c10d.get_global_rank(group, group_peer)
            except Exception:  # torch itself reports a bad rank
                return group_peer
        return peer

    def _results_as_inputs(self, seq, tensors):
        for t in tensors:
            self._tensor(seq, 0, t)

    def _complete_later(self, seq, work, tensors):
        """async_op=True: the job gets its Work back behind a proxy whose wait() records the
        results right when they arrived (before the job can change them in place). A work
        never waited on is recorded at the next step boundary if it completed by then. No
        callback on the communication thread (see _pending)."""
        with self._pending_lock:
            self._async[seq] = (work, tensors)
        return _RecordedWork(work, self, seq)

    def finish_async(self, seq, force=False):
        """Records the results of async collective `seq` once (from wait(), or a flush)."""
        with self._pending_lock:
            entry = self._async.get(seq)
            if entry is None:
                return
            work, tensors = entry
            if not force:
                try:
                    if not work.is_completed():
                        return
                except Exception:
                    return
            del self._async[seq]
        self._results(seq, tensors)
        self._lib.dlrr_collective_end(seq, b"")

    def flush_async(self):
        for seq in list(self._async):
            self.finish_async(seq)

    def _served_call(self, name, op, p, inputs_of, results_of, peer_param, reduce_param):
        """Replay alone: the op and what is sent are checked; the results come from the trace."""
        async_op = bool(p.get("async_op")) or name in ("isend", "irecv")
        seq = self._begin(op, p.get("group"), None, -1, -1, async_op)
        for t in inputs_of(p):
            self._tensor(seq, 0, t)
        try:
            for i, t in enumerate(results_of(p)):
                self._serve(seq, i, t, op)
        except ServeError as exc:
            self._unservable(exc)
        self._received_nonfinite(seq, op, self._finite(inputs_of(p)), results_of(p))
        if name == "recv":
            src = self._peer(p, "src")
            return src if src is not None else -1
        if async_op:
            return self._completed_work(results_of(p))
        return None

    def _refuse_object_collective(self, name):
        """Alone, an object collective's bytes would come from the trace, and torch unpickles
        them: loading a trace must never run code, so the replay stops there instead."""
        hooks = self

        def refused(*args, **kwargs):
            exc = ServeError("%s: torch unpickles what it receives, and replayed alone that would come "
                             "from the trace; replay every rank with --all-ranks instead" % name)
            hooks._unservable(exc)
        return refused

    # ------------------------------------------------------------------ init_process_group
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

    def _recorded(self, key):
        return native.decode(self._lib.dlrr_replay_runtime_info(native.text(key)))

    def _init_alone(self, original, args, kwargs):
        """init_process_group of a rank replayed alone: a local group with the recorded shape."""
        rank, world = self._recorded("dist.rank"), self._recorded("dist.world_size")
        if not (rank.isdigit() and world.isdigit()):
            rank = str(self._lib.dlrr_replay_rank())
            world = os.environ.get("WORLD_SIZE", "")
        if not (rank.isdigit() and world.isdigit()):
            raise RuntimeError("dlrr: the recording does not say which rank this is; replay it with --all-ranks")
        c10d = self._c10d
        self._register_replay_backend()
        # No peers will ever check in: the store-based barrier of 1.x would wait for them.
        if hasattr(c10d, "_store_based_barrier"):
            c10d._store_based_barrier = lambda *a, **k: None
        timeout = kwargs.get("timeout")
        call = {"backend": "dlrr_replay", "store": self._torch.distributed.HashStore(), "rank": int(rank), "world_size": int(world)}
        if timeout is not None:
            call["timeout"] = timeout
        self._rec.guarded(self._rec.strategy.fact, "dist.group",
                          "rank %s of %s replayed alone: collectives served from the trace" % (rank, world))
        return original(**call)

    def _register_replay_backend(self):
        if self.replay_group_class is not None:
            return
        self.replay_group_class = make_replay_group_class(self._torch, self)
        cls = self.replay_group_class
        register = self._torch.distributed.Backend.register_backend
        extra = {}
        try:
            # torch 2.x: register_backend(..., devices=None) warns (into the job's stderr) and
            # assumes cpu and cuda when devices is left out; 1.13 has no such parameter.
            if "devices" in inspect.signature(register).parameters:
                extra["devices"] = ["cpu", "cuda"]
        except (TypeError, ValueError):
            pass
        register("dlrr_replay", lambda store, rank, size, timeout: cls(rank, size), **extra)

    def _wrap_get_backend(self, original):
        hooks = self

        def get_backend(group=None):
            value = original(group)
            # The job sees the recorded backend; torch.distributed itself must see ours (it
            # would otherwise ask gloo-only things of the stand-in group).
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if value == "dlrr_replay" and not caller.startswith("torch."):
                recorded = hooks._recorded("dist.backend")
                return recorded or value
            return value
        return get_backend

    # ------------------------------------------------------------------ DDP
    def _wrap_ddp_init(self, original):
        hooks = self

        def __init__(ddp, *args, **kwargs):
            original(ddp, *args, **kwargs)
            if hooks._rec.active:
                hooks._rec.guarded(hooks._after_ddp_init, ddp)
        return __init__

    def _after_ddp_init(self, ddp):
        # DDP copied rank 0's parameters and buffers to this rank (C++ broadcast): the state
        # after it is what the rank trains from.
        state = list(ddp.module.parameters()) + list(ddp.module.buffers())
        seq = self._begin("ddp_init_sync", getattr(ddp, "process_group", None))
        self._served_or_recorded(seq, state, "ddp_init_sync")

    def _wrap_ddp_forward(self, original):
        hooks = self

        def forward(ddp, *args, **kwargs):
            if (hooks._rec.active and hooks._ddp_hooked.get(ddp) != "user" and
                    getattr(ddp, "require_backward_grad_sync", True) and hooks._torch.is_grad_enabled()):
                hooks._sync_pending.add(ddp)
            return original(ddp, *args, **kwargs)
        return forward

    def _wrap_register_comm_hook(self, original):
        hooks = self

        def register_comm_hook(ddp, state, hook):
            if not hooks._rec.active:
                return original(ddp, state, hook)
            if hooks.replay_mode == DIST_REPLAY_ALONE:
                # Alone, the job's hook would communicate: dlrr's serves its buckets instead.
                hooks._rec.guarded(hooks._rec.strategy.fact, "dist.comm_hook",
                                   "the job's DDP comm hook %s is not run: its results are served from the trace"
                                   % getattr(hook, "__name__", "?"))
                result = original(ddp, None, hooks._served_hook)
            else:
                result = original(ddp, state, _user_hook(hooks, hook))
            hooks._ddp_hooked[ddp] = "user"
            hooks._sync_pending.discard(ddp)
            return result
        return register_comm_hook

    def _wrap_register_builtin(self, original):
        hooks = self

        def _register_builtin_comm_hook(ddp, comm_hook_type):
            # A C++ hook (e.g. fp16 compression): like DDP's own all-reduce, its results are
            # recorded as the gradients it leaves (replayed alone, it reduces over the
            # stand-in group and the recorded gradients replace what it leaves).
            result = original(ddp, comm_hook_type)
            if hooks._rec.active:
                hooks._ddp_hooked[ddp] = "builtin"
            return result
        return _register_builtin_comm_hook

    def bucket_begin(self, bucket, ddp=None):
        """Numbers a DDP bucket's all-reduce and reports what this rank sends; returns
        (seq, whether what it sent was finite: replay only)."""
        index = bucket.index() if hasattr(bucket, "index") else -1
        seq = self._begin("ddp_bucket", getattr(ddp, "process_group", None) if ddp is not None else None,
                          "sum", -1, index, True)
        buffer = bucket.buffer()
        self._tensor(seq, 0, buffer)
        return seq, (self._finite([buffer]) if self.replay_mode is not None else None)

    def bucket_end(self, seq, value, sent=None):
        tensors = value if isinstance(value, (list, tuple)) else [value]
        self._results(seq, tensors)
        self._lib.dlrr_collective_end(seq, b"")
        if self.watch is not None:
            self.watch.complete(seq, "ddp_bucket")
        if sent is not None:
            self._received_nonfinite(seq, "ddp_bucket", sent, tensors)

    def note_bucket(self, begun, result):
        """A bucket's all-reduce was issued; result: its future, or the tensor it reduces in place."""
        with self._pending_lock:
            self._pending.append((begun[0], result, begun[1]))

    def flush_buckets(self):
        """Records the results of the buckets whose all-reduce completed (the job's thread)."""
        if not self._pending:
            return
        with self._pending_lock:
            pending, self._pending = self._pending, []
        keep = []
        for seq, result, sent in pending:
            if isinstance(result, self._torch.Tensor):
                value = result
            elif result.done():
                try:
                    value = result.value()
                except Exception as exc:  # the job's own wait() reports it
                    self._lib.dlrr_collective_end(seq, native.text("failed: %s" % exc))
                    continue
            else:
                keep.append((seq, result, sent))
                continue
            self.bucket_end(seq, value, sent)
        if keep:
            with self._pending_lock:
                self._pending[:0] = keep

    def flush_gradients(self):
        """After backward(): the gradients DDP's built-in all-reduce left, per DDP (the job's
        thread; DDP waited for every bucket before backward() returned). Record: their digests
        (bytes with --collectives full); replayed alone: the recorded ones put in place."""
        if not len(self._sync_pending):
            return
        ddps = list(self._sync_pending)
        self._sync_pending.clear()
        local_finite, self.local_grads_finite = self.local_grads_finite, True
        for ddp in ddps:
            grads = [p.grad for p in ddp.module.parameters() if p.requires_grad and p.grad is not None]
            seq = self._begin("ddp_allreduce", getattr(ddp, "process_group", None), "avg")
            if self._served_or_recorded(seq, grads, "ddp_allreduce"):
                self._received_nonfinite(seq, "ddp_allreduce", local_finite, grads)

    def _served_hook(self, state, bucket):
        """Replay alone: a DDP bucket's all-reduced gradients, from the trace."""
        torch = self._torch
        seq, sent = self.bucket_begin(bucket)
        buffer = bucket.buffer()
        try:
            self._serve(seq, 0, buffer, "ddp_bucket %d" % (bucket.index() if hasattr(bucket, "index") else -1))
        except ServeError as exc:
            self._unservable(exc)
        self._received_nonfinite(seq, "ddp_bucket", sent, [buffer])
        fut = torch.futures.Future()
        fut.set_result(buffer)
        return fut


def _user_hook(hooks, hook):
    """The job's DDP comm hook, recorded around: the bucket it is given, then (flush_buckets)
    what its future returned. The future the job's hook returns goes to DDP untouched."""
    rec = hooks._rec

    def dlrr_recorded_comm_hook(state, bucket):
        if not rec.active:
            return hook(state, bucket)
        begun = rec.guarded(hooks.bucket_begin, bucket)
        # The bucket is the unit: the collectives the hook issues to reduce it are not numbered
        # on their own (a rank replayed alone gets the bucket's result without running the hook).
        local = hooks._local
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        try:
            fut = hook(state, bucket)
        finally:
            local.depth = depth
        if begun is not None:
            rec.guarded(hooks.note_bucket, begun, fut)
        return fut
    dlrr_recorded_comm_hook.__name__ = getattr(hook, "__name__", "comm_hook")
    return dlrr_recorded_comm_hook


class _RecordedWork:
    """The job's async Work: wait() records the results as they arrived, then returns as the
    Work's own wait() does; everything else is the Work's (is_completed, get_future, ...)."""

    def __init__(self, work, hooks, seq):
        self._dlrr_work = work
        self._dlrr_hooks = hooks
        self._dlrr_seq = seq

    def wait(self, *args, **kwargs):
        result = self._dlrr_work.wait(*args, **kwargs)
        hooks = self._dlrr_hooks
        hooks._rec.guarded(hooks.finish_async, self._dlrr_seq, True)
        return result

    def __getattr__(self, name):
        return getattr(self._dlrr_work, name)


class ArgumentBinder:
    """signature.bind(*args, **kwargs) + apply_defaults(), as a dict, for the common call.

    inspect's bind costs ~10 us a call, a quarter of a recorded collective's hook cost.  For a
    signature of positional-or-keyword parameters only (torch's collectives), the same
    mapping is built here; anything else (another parameter kind, an unknown or repeated
    keyword, too many or missing arguments) returns None, and the caller binds with
    inspect, which then also raises the TypeError the job would see.
    """

    def __init__(self, signature):
        params = list(signature.parameters.values())
        self._plain = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params)
        self._names = tuple(p.name for p in params)
        self._index = {name: i for i, name in enumerate(self._names)}
        self._defaults = tuple(p.default for p in params)
        self._empty = inspect.Parameter.empty

    def bind(self, args, kwargs):
        names = self._names
        n = len(args)
        if not self._plain or n > len(names):
            return None
        index = self._index
        for key in kwargs:
            i = index.get(key)
            if i is None or i < n:
                return None
        out = dict(zip(names, args))
        empty = self._empty
        for i in range(n, len(names)):
            name = names[i]
            if name in kwargs:
                out[name] = kwargs[name]
            else:
                default = self._defaults[i]
                if default is empty:
                    return None
                out[name] = default
        return out


def _reduce_name(torch, op, cache):
    """"sum", "avg", ... for a ReduceOp, remembered per op object in `cache` (id(op) -> (op,
    name), the hooks' own: ops are few and long-lived) since the lookup below is ~1 us."""
    entry = cache.get(id(op))
    if entry is not None and entry[0] is op:
        return entry[1]
    name = _reduce_name_of(torch, op)
    if len(cache) < 64:  # the op is kept alive with its entry, so its id stays its own
        cache[id(op)] = (op, name)
    return name


def _reduce_name_of(torch, op):
    """"sum", "avg", ... for a ReduceOp (1.13's default argument is a legacy object whose str
    is not its name: compare with the members instead)."""
    members = getattr(torch.distributed, "ReduceOp", None)
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        try:
            if op == getattr(members, name):
                return name.lower()
        except Exception:
            continue
    return str(getattr(op, "name", op)).split(".")[-1].lower()[:32]


def _display(op):
    return "DDP all-reduce" if op in ("ddp_bucket", "ddp_allreduce") else op


def _Same(fn):
    """A Patcher wrapper factory's result that is an existing wrapper (re-exports)."""
    return fn


class _DoneWork:
    """A completed Work for torch versions without _create_work_from_future."""

    def __init__(self, fut):
        self._fut = fut

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def get_future(self):
        return self._fut

    def result(self):
        return self._fut.value()


def make_replay_group_class(torch, hooks=None):
    """A process group with no peers for a rank replayed alone (torch 1.13: Python subclasses of
    ProcessGroup are dispatched to from C++, so DDP's own calls reach it too).

    What reaches it are DDP's internal calls (the parameter-shape check, the start-up and
    buffer broadcasts); collectives the job calls are served before they get here. Each
    answers as if this rank's own tensors were everyone's: the recorded state is then put in
    place by the caller (ddp_init_sync), and digests catch anything else.
    """
    c10d = torch._C._distributed_c10d
    base = c10d.ProcessGroup
    make_work = getattr(c10d, "_create_work_from_future", None)

    class ReplayGroup(base):
        def __init__(self, rank, size):
            super().__init__(rank, size)
            self.calls = 0

        def _done(self, value):
            self.calls += 1
            fut = torch.futures.Future()
            fut.set_result(value)
            return make_work(fut) if make_work is not None else _DoneWork(fut)

        def allreduce(self, tensors, opts=None):
            if hooks is not None and hooks.local_grads_finite:
                # DDP's buckets: what this rank would have sent (a nan stop needs to know)
                hooks.local_grads_finite = hooks._finite(tensors)
            return self._done(tensors)

        def allreduce_coalesced(self, tensors, opts=None):
            return self._done(tensors)

        def broadcast(self, tensors, opts=None):
            return self._done(tensors)

        def reduce(self, tensors, opts=None):
            return self._done(tensors)

        def allgather(self, output_lists, inputs, opts=None):
            for outs, inp in zip(output_lists, inputs):
                for out in outs:
                    out.copy_(inp)
            return self._done(output_lists)

        def _allgather_base(self, output, inp, opts=None):
            output.copy_(inp.repeat(output.numel() // max(inp.numel(), 1)).view_as(output))
            return self._done([output])

        def barrier(self, opts=None):
            return self._done(None)

        # Newer torch 2.x's C++ trampoline (PyProcessGroup) looks the Python override of
        # all_gather_single up by that name, with no fallback to _allgather_base.
        all_gather_single = _allgather_base

        def getBackendName(self):
            return "dlrr_replay"

        # torch 2.x keeps a group's name in its backends, and this group has none: dynamo reads
        # group_name when it traces a collective (functional collectives look the group up by it).
        def _set_group_name(self, name):
            self._dlrr_group_name = name

        @property
        def group_name(self):
            return getattr(self, "_dlrr_group_name", "")

    return ReplayGroup
