"""torch.distributed in the hook (fake library, a real one-rank gloo group): what each
collective and DDP step reports, in what order, and that the job's calls behave as before."""

import os
import tempfile
import unittest

import torch
import torch.distributed as dist
from torch import nn

from support import RecorderTestCase, small_model  # first
from dlrr_hook import dist as dlrr_dist


class CollectivesTest(RecorderTestCase):
    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="dlrr-dist-")
        store = dist.FileStore(os.path.join(self.tmp, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    def tearDown(self):
        if dist.is_initialized():
            dist.destroy_process_group()
        super().tearDown()

    def collectives(self):
        """[(op, group, reduce op, peer, bucket, [input tensors' shapes], [result shapes], status)]."""
        out, open_ = [], {}
        for call in self.lib.calls:
            if call[0] == "collective_begin":
                _, seq, op, group, reduce_op, peer, bucket, _async = call
                open_[seq] = [op, group, reduce_op, peer, bucket, [], []]
            elif call[0] == "collective_tensor":
                _, seq, is_result, _dtype, shape, _data = call
                open_[seq][6 if is_result else 5].append(shape)
            elif call[0] == "collective_end":
                out.append(tuple(open_.pop(call[1])) + (call[2],))
        return out

    def test_collectives_in_issue_order_with_both_sides(self):
        t = torch.ones(3)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        dist.broadcast(t, src=0)
        gathered = [torch.zeros(3)]
        dist.all_gather(gathered, t)
        dist.barrier()
        work = dist.all_reduce(t, async_op=True)
        self.assertTrue(work.wait())  # the job's Work, as torch returns it (behind dlrr's wait)
        self.assertTrue(work.is_completed())
        self.assertEqual(work.get_future().value()[0].tolist(), [1.0, 1.0, 1.0])
        self.assertEqual(t.tolist(), [1.0, 1.0, 1.0])  # the job's results are torch's
        got = self.collectives()
        self.assertEqual([c[0] for c in got], ["all_reduce", "broadcast", "all_gather", "barrier", "all_reduce"])
        self.assertEqual(got[0][1:3], ("world", "max"))
        self.assertEqual(got[1][3], 0)  # the root
        self.assertEqual(got[2][5:7], ([[3]], [[3]]))
        self.assertEqual(got[3][5:7], ([], []))
        self.assertEqual(got[4][2], "sum")
        self.assertTrue(all(c[7] == "" for c in got))

    def test_one_tensor_collectives_take_two_crossings_with_the_same_calls(self):
        # dlrr_collective_begin1/end1 stand for begin + input and result + end: the same calls,
        # bytes included, as the four separate crossings the hook makes otherwise.
        used = []
        for name in ("dlrr_collective_begin1", "dlrr_collective_end1"):
            fn = getattr(self.lib, name)
            setattr(self.lib, name, lambda *a, _fn=fn, _name=name: (used.append(_name), _fn(*a))[1])

        def run():
            t = torch.arange(4.0)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            dist.broadcast(t, src=0)
            dist.all_gather([torch.zeros(4)], t)  # a list of one result (world of 1)
            dist.barrier()  # no tensor: separate begin and end
            calls = [c[:1] + c[2:] for c in self.lib.calls if c[0].startswith("collective_")]  # seqs aside
            self.lib.clear()
            return calls
        fast = run()
        self.assertEqual(used.count("dlrr_collective_begin1"), 3)
        self.assertEqual(used.count("dlrr_collective_end1"), 3)
        hooks = self.rec.dist
        original = hooks._prepared_one
        hooks._prepared_one = lambda tensors: None
        try:
            separate = run()
        finally:
            hooks._prepared_one = original
        self.assertEqual(len(used), 6, "the separate calls took the one-crossing forms")
        self.assertEqual(fast, separate)
        self.assertIn(("collective_tensor", 1, "float32", [4], torch.arange(4.0).numpy().tobytes()), fast)

    def test_object_collectives_are_recorded_as_their_tensor_collectives(self):
        objs = [None]
        dist.all_gather_object(objs, {"a": 1})
        self.assertEqual(objs, [{"a": 1}])
        ops = [c[0] for c in self.collectives()]
        self.assertTrue(ops and set(ops) <= {"all_gather", "broadcast"}, ops)

    def test_a_failing_collective_still_raises_and_is_marked(self):
        with self.assertRaises(Exception):
            dist.broadcast(torch.ones(2), src=5)  # no rank 5 in a world of 1
        got = self.collectives()
        self.assertEqual(got[-1][0], "broadcast")
        self.assertTrue(got[-1][7].startswith("failed: "), got[-1])

    def test_ddp_gradients_recorded_after_backward_and_results_unchanged(self):
        torch.manual_seed(1)
        plain = small_model()
        x = torch.randn(8, 3)
        plain(x).pow(2).mean().backward()
        self.lib.calls.clear()  # what follows is the DDP job's alone
        torch.manual_seed(1)
        model = small_model()
        ddp = nn.parallel.DistributedDataParallel(model)
        ddp(x).pow(2).mean().backward()
        for a, b in zip(plain.parameters(), model.parameters()):
            self.assertTrue(torch.equal(a.grad, b.grad))  # world of 1: DDP leaves them as they are
        got = self.collectives()
        self.assertEqual([c[0] for c in got], ["ddp_init_sync", "ddp_allreduce"])
        self.assertEqual(got[1][6], [[4, 3], [4], [1, 4], [1]])
        # Recorded before the step's gradient digests: a reader sees what arrived first.
        calls = self.lib.calls
        last_end = max(i for i, c in enumerate(calls) if c[0] == "collective_end")
        first_grad = min(i for i, c in enumerate(calls) if c[0] == "digest" and c[1] == 1)
        self.assertLess(last_end, first_grad)

    def test_a_jobs_comm_hook_runs_and_its_buckets_are_recorded(self):
        calls = []

        def hook(state, bucket):
            calls.append(bucket.index())
            fut = torch.futures.Future()
            fut.set_result(bucket.buffer())
            return fut
        ddp = nn.parallel.DistributedDataParallel(small_model())
        ddp.register_comm_hook(None, hook)
        for _ in range(2):
            ddp(torch.randn(4, 3)).sum().backward()
        self.assertEqual(calls, [0, 0])
        got = self.collectives()
        self.assertEqual([c[0] for c in got], ["ddp_init_sync", "ddp_bucket", "ddp_bucket"])
        self.assertEqual(got[1][4], 0)  # bucket index
        self.assertEqual(got[1][5], [[21]])  # what was sent: the flattened gradients
        self.assertEqual(got[1][6], [[21]])


class _AloneStub:
    """Just what DistHooks needs of a Session replaying one rank alone (it is its own strategy)."""

    def __init__(self, lib, torch_module):
        from dlrr_hook.tensors import TensorMarshal
        self.lib = lib
        self.marshal = TensorMarshal(torch_module)
        self.active = True
        self.stops = []
        self.strategy = self

    def guarded(self, fn, *args):
        return fn(*args)

    def stop(self, reason, detail, frame):
        self.stops.append((reason, detail))


class ObjectCollectivesAloneTest(unittest.TestCase):
    def test_never_unpickled_from_a_trace(self):
        import fake_native
        from dlrr_hook.patching import Patcher
        stub = _AloneStub(fake_native.FakeLib(), torch)
        patcher = Patcher()
        dlrr_dist.DistHooks(stub, torch, dlrr_dist.DIST_REPLAY_ALONE).install(patcher)
        try:
            for call in (lambda: dist.all_gather_object([None], {"a": 1}),
                         lambda: dist.broadcast_object_list([None], src=0)):
                with self.assertRaises(RuntimeError):
                    call()
            self.assertEqual([r for r, _ in stub.stops], ["unservable", "unservable"])
            self.assertIn("unpickles", stub.stops[0][1])
        finally:
            patcher.restore()
        self.assertNotIn("refused", dist.all_gather_object.__name__)


class PeerTest(unittest.TestCase):
    def test_group_src_and_dst_of_torch_2_6_name_the_global_rank(self):
        import fake_native
        hooks = dlrr_dist.DistHooks(_AloneStub(fake_native.FakeLib(), torch), torch)
        hooks._c10d = dist.distributed_c10d
        self.assertEqual(hooks._peer({"dst": 3, "group": None}, "dst"), 3)
        self.assertEqual(hooks._peer({"src": None, "group": None, "group_src": 2}, "src"), 2)
        self.assertIsNone(hooks._peer({"src": None, "group": None}, "src"))
        self.assertEqual(hooks._peer({}, None), -1)


class ReduceNameTest(unittest.TestCase):
    def test_names(self):
        self.assertEqual(dlrr_dist._reduce_name(torch, dist.ReduceOp.SUM, {}), "sum")
        self.assertEqual(dlrr_dist._reduce_name(torch, dist.ReduceOp.MIN, {}), "min")
        self.assertEqual(dlrr_dist._reduce_name(torch, "weird.Thing", {}), "thing")

    def test_remembered_per_op_object_gives_the_same_names(self):
        import inspect
        default = inspect.signature(dist.all_reduce).parameters["op"].default  # 1.13: a legacy object
        cache = {}
        for op in (default, dist.ReduceOp.SUM, dist.ReduceOp.MAX, default, dist.ReduceOp.MAX):
            self.assertEqual(dlrr_dist._reduce_name(torch, op, cache), dlrr_dist._reduce_name_of(torch, op))
        self.assertEqual(dlrr_dist._reduce_name(torch, default, cache), "sum")
        self.assertEqual(len(cache), len({id(op) for op in (default, dist.ReduceOp.SUM, dist.ReduceOp.MAX)}))


class ArgumentBinderTest(unittest.TestCase):
    """The fast bind gives inspect's mapping (with defaults, in parameter order), or None where
    inspect has to decide (and raise the job's TypeError)."""

    def inspect_bind(self, signature, args, kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return TypeError
        bound.apply_defaults()
        return list(bound.arguments.items())

    def test_every_patched_collective_binds_as_inspect_does(self):
        import inspect
        t = torch.ones(2)
        checked = 0
        for name in dlrr_dist._OPS:
            fn = getattr(dist.distributed_c10d, name, None)
            if fn is None:
                continue
            signature = inspect.signature(fn)
            binder = dlrr_dist.ArgumentBinder(signature)
            names = list(signature.parameters)
            calls = [((), {}), ((t,), {}), ((t, t), {}), ((t,) * (len(names) + 1), {}),
                     ((t,), {names[0]: t}), ((), {"no_such_argument": t}),
                     ((), {n: t for n in names}), ((t,), {n: t for n in names[1:]})]
            calls += [((t,) * i, {names[-1]: t}) for i in range(len(names))]
            for args, kwargs in calls:
                fast = binder.bind(args, kwargs)
                expected = self.inspect_bind(signature, args, kwargs)
                if fast is None:
                    continue  # inspect decides
                checked += 1
                self.assertEqual([(k, v is t or v) for k, v in fast.items()],
                                 [(k, v is t or v) for k, v in expected], (name, args, kwargs))
            if all(p.kind is p.POSITIONAL_OR_KEYWORD for p in signature.parameters.values()):
                self.assertIsNotNone(binder.bind((t,) * (len(names) - 1), {names[-1]: t}), name)
        self.assertGreater(checked, 20)

    def test_other_parameter_kinds_are_left_to_inspect(self):
        import inspect

        def f(a, *rest, b=1, **more):
            pass
        self.assertIsNone(dlrr_dist.ArgumentBinder(inspect.signature(f)).bind((1,), {}))


if __name__ == "__main__":
    unittest.main()
