"""torch.distributed collectives as dlrr sees them (docs/distributed.md): which tensors of each
op are sent and received, the crossings to the native side (dlrr_collective_begin, _tensor,
_end: numbered in issue order), and the wrappers of torch.distributed's functions, which record
a call (or, with every rank replaying, check it) or hand it to the serving side (a rank replayed
alone, dist_serving.py). A mixin of dist.DistHooks, whose __init__ sets the state used here."""

import inspect

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


class CollectiveHooks:
    """The collective side of DistHooks: native calls and torch.distributed's function wrappers."""

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

    def _finite(self, tensors):
        torch = self._torch
        return all(bool(torch.isfinite(t).all()) for t in tensors
                   if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()))

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

