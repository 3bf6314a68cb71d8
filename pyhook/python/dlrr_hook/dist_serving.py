"""A rank replayed alone (dlreplay --rank R, docs/distributed.md): its collectives are served
their recorded results and checked against what it sends, init_process_group gets a local
stand-in group with no peers (ReplayGroup), and where the recording cannot serve, the replay
stops (unservable). A mixin of dist.DistHooks."""

import ctypes
import inspect
import os
import sys

from . import native
from .dist_collectives import DIST_REPLAY_ALONE, _display


class ServeError(Exception):
    """A collective the recording cannot serve to a rank replayed alone."""



class ServingHooks:
    """The serving side of DistHooks (replayed alone), and the nan stop of any replay."""

    def _serve(self, seq, index, tensor, what):
        """Copies the recorded result `index` of `seq` into tensor; ServeError when unavailable."""
        data = ctypes.c_void_p()
        n = ctypes.c_uint64()
        rc = self._lib.dlrr_replay_collective_result(seq, index, ctypes.byref(data), ctypes.byref(n))
        if rc != 1:
            raise ServeError(
                "collective #%d (%s): %s" % (seq, what, "the recording kept only its digests (a recording with "
                                             "--window keeps results for the failure window only); record with "
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
            if self._fast_forwarding():
                return True  # the snapshot at the jump restores what these would have set
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

    def _fast_forwarding(self):
        """Replayed alone, before a jump's snapshot (replay.py): the steps' compute is skipped, so
        a collective is neither checked nor served (a failure-window recording keeps no results
        before the window) and leaves its tensors as the stand-in group does."""
        return bool(getattr(self._rec.strategy, "fast_forwarding", False))

    def _unservable(self, exc):
        """Stops the replay: the rank cannot go on without its peers."""
        self._rec.strategy.stop("unservable", str(exc), sys._getframe(2))
        raise RuntimeError("dlrr: %s" % exc)

    def _received_nonfinite(self, seq, op, sent_finite, results):
        """Replay with a nan target: stop where non-finite values reach this rank from its peers.

        The rank's own computation was finite up to here (what it sent was); anomaly detection
        or module hooks would never name a cause on this rank, so the stop is right after the
        collective that delivered them.
        """
        rec = self._rec
        target = getattr(rec.strategy, "target", None)  # replaying: the strategy's --until
        if not sent_finite or not results or target is None or target.kind != native.TARGET_NAN:
            return
        if getattr(rec.strategy, "stopped", True) or rec.steps.current != target.step or self._finite(results):
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

    def _served_call(self, name, op, p, inputs_of, results_of, peer_param, reduce_param):
        """Replay alone: the op and what is sent are checked; the results come from the trace."""
        async_op = bool(p.get("async_op")) or name in ("isend", "irecv")
        seq = self._begin(op, p.get("group"), None, -1, -1, async_op)
        if not self._fast_forwarding():
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

