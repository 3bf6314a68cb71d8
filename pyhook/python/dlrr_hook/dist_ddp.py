"""DistributedDataParallel (docs/distributed.md): its start-up broadcast (ddp_init_sync), the
gradients its built-in all-reduce leaves after backward() (ddp_allreduce), and a job's own
communication hook, wrapped (ddp_bucket); replayed alone, the recorded results put in place. A
mixin of dist.DistHooks."""

from . import native
from .dist_collectives import DIST_REPLAY_ALONE
from .dist_serving import ServeError


class DdpHooks:
    """The DDP side of DistHooks."""

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
        if not self._fast_forwarding():
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

