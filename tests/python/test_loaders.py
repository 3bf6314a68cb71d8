"""DataLoader capture with the fake library: numbering, sample indices, steps, values."""

import unittest

import numpy as np
import torch
from torch.utils.data import DataLoader

from support import (CountingIterable, IndexDataset, RecorderTestCase, small_model,
                     tensor_values, train_step)  # first: puts the hook on sys.path
from dlrr_hook import loaders, native


class LoaderIndicesTest(RecorderTestCase):
    def _train(self, loader, epochs, break_after=None):
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        losses, seen = [], []
        for epoch in range(epochs):
            for i, (x, y) in enumerate(loader):
                seen.append(y.tolist())
                if break_after is not None and epoch == 0 and i == break_after:
                    break
                losses.append(train_step(model, optimizer, x))
        return losses, seen

    def _check_indices_match_data(self, batches):
        for begin, values in batches:
            self.assertIn(values[0], (("list", 2), ("tuple", 2)))  # default_collate: list in 1.x
            x_call, y_call = values[1], values[2]
            self.assertEqual(x_call[0], "tensor")
            self.assertEqual(y_call[0], "tensor")
            labels = tensor_values(y_call).tolist()
            self.assertEqual(begin[5], labels, "sample indices of batch %r" % (begin[1:4],))
            self.assertEqual(tensor_values(x_call)[:, 0].tolist(), [float(i) for i in labels])

    def _check_epochs(self, n, batch_size, epochs):
        batches = self.batches()
        per_epoch = (n + batch_size - 1) // batch_size
        self.assertEqual(len(batches), per_epoch * epochs)
        for k, (begin, _) in enumerate(batches):
            self.assertEqual(begin[1:5], (0, k // per_epoch, k, 1))  # loader, iteration, index, training
        for epoch in range(epochs):
            indices = sum((b[0][5] for b in batches[epoch * per_epoch:(epoch + 1) * per_epoch]), [])
            self.assertEqual(sorted(indices), list(range(n)))
        self.assertEqual(self.lib.of("loader_end"), [("loader_end", 0, e, per_epoch) for e in range(epochs)])
        self._check_indices_match_data(batches)

    def test_single_process(self):
        loader = DataLoader(IndexDataset(22), batch_size=4, shuffle=True)
        losses, _ = self._train(loader, 2)
        self._check_epochs(22, 4, 2)
        self.assert_steps_well_formed(12)
        ends = self.lib.of("step_end")
        self.assertEqual([c[2] for c in ends], losses)

    def test_two_workers(self):
        loader = DataLoader(IndexDataset(40), batch_size=4, shuffle=True, num_workers=2)
        losses, seen = self._train(loader, 2)
        self._check_epochs(40, 4, 2)
        self.assertEqual([b[0][5] for b in self.batches()], seen)
        self.assert_steps_well_formed(20)
        self.assertEqual([c[2] for c in self.lib.of("step_end")], losses)
        self.assert_no_status_errors()

    def test_two_workers_persistent(self):
        loader = DataLoader(IndexDataset(24), batch_size=4, shuffle=True, num_workers=2,
                            persistent_workers=True, prefetch_factor=3)
        self._train(loader, 3)
        self._check_epochs(24, 4, 3)

    def test_two_workers_break_early(self):
        loader = DataLoader(IndexDataset(40), batch_size=4, shuffle=True, num_workers=2)
        _, seen = self._train(loader, 2, break_after=3)
        batches = self.batches()
        self.assertEqual(len(batches), 14)
        self.assertEqual([b[0][5] for b in batches], seen)
        self.assertEqual([b[0][2] for b in batches], [0] * 4 + [1] * 10)
        self.assertEqual(self.lib.of("loader_end"), [("loader_end", 0, 1, 10)])
        self._check_indices_match_data(batches)

    def test_iterable_dataset_workers_has_no_indices(self):
        loader = DataLoader(CountingIterable(12), batch_size=3, num_workers=2)
        self._train(loader, 1)
        batches = self.batches()
        self.assertEqual(len(batches), 4)
        self.assertTrue(all(b[0][5] == [] for b in batches))
        self.assertEqual(len(self.lib.of("loader_end")), 1)

    def test_batch_size_none(self):
        loader = DataLoader(IndexDataset(5), batch_size=None, shuffle=True)
        for _ in loader:
            pass
        for begin, values in self.batches():
            self.assertEqual(begin[5], [tensor_values(values[2]).item()] if values[2][0] == "tensor"
                             else [values[2][1]])


class LoaderStepsTest(RecorderTestCase):
    def test_eval_loader_under_no_grad(self):
        train = DataLoader(IndexDataset(12), batch_size=4, shuffle=True)
        evals = DataLoader(IndexDataset(8), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(2):
            for x, _ in train:
                train_step(model, optimizer, x)
            with torch.no_grad():
                for x, _ in evals:
                    model(x)
        self.assert_steps_well_formed(6)
        kinds = [(c[0], c[1]) for c in self.lib.calls
                 if c[0] in ("step_begin", "step_end", "batch_begin", "loader_end")]
        epoch = [("step_begin", 0), ("batch_begin", 0), ("step_end", 0),
                 ("step_begin", 1), ("batch_begin", 0), ("step_end", 1),
                 ("step_begin", 2), ("batch_begin", 0),
                 ("loader_end", 0), ("step_end", 2),
                 ("batch_begin", 1), ("batch_begin", 1), ("loader_end", 1)]
        self.assertEqual(kinds[:len(epoch)], epoch)
        eval_batches = [b[0] for b in self.batches() if b[0][1] == 1]
        self.assertEqual([b[4] for b in eval_batches], [0, 0, 0, 0])
        # RNG states at every delivery, training or not.
        self.assertEqual(len([c for c in self.lib.of("rng_state") if c[1] == native.RNG_TORCH_CPU]), 10)

    def test_eval_loader_with_grad_costs_one_step(self):
        train = DataLoader(IndexDataset(8), batch_size=4)
        evals = DataLoader(IndexDataset(12), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(2):
            for x, _ in train:
                train_step(model, optimizer, x)
            for x, _ in evals:  # forgot no_grad: classified eval after its first batch
                model(x)
        # epoch 0: 2 train + 1 spurious eval step; epoch 1: 2 train steps.
        self.assert_steps_well_formed(5)
        training_flags = [(b[0][1], b[0][4]) for b in self.batches()]
        self.assertEqual(training_flags, [(0, 1), (0, 1), (1, 1), (1, 0), (1, 0),
                                          (0, 1), (0, 1), (1, 0), (1, 0), (1, 0)])

    def test_gradient_accumulation_loader(self):
        loader = DataLoader(IndexDataset(16), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for i, (x, _) in enumerate(loader):
            model(x).sum().backward()
            if i % 2 == 1:
                optimizer.step()
                optimizer.zero_grad()
        self.assert_steps_well_formed(4)

    def test_step_open_at_exit_is_committed(self):
        loader = DataLoader(IndexDataset(16), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for i, (x, _) in enumerate(loader):
            train_step(model, optimizer, x)
            if i == 1:
                break
        self.assertEqual(self.step_events()[-1][0], "step_begin")
        self.rec._at_exit()
        self.assert_steps_well_formed(2)
        self.assertFalse(self.rec.active)

    def test_loader_numbers_in_order_of_first_iteration(self):
        first = DataLoader(IndexDataset(4), batch_size=2)
        second = DataLoader(IndexDataset(4), batch_size=2)
        with torch.no_grad():
            for _ in second:
                pass
            for _ in first:
                pass
            for _ in second:
                pass
        loaders = [(b[0][1], b[0][2], b[0][3]) for b in self.batches()]
        self.assertEqual(loaders, [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1), (0, 1, 2), (0, 1, 3)])


class DeliveryCommitTest(RecorderTestCase):
    """A step that ends at a batch delivery is committed while the delivery records the next
    step's RNG states and batch: dlrr_step_end_deferred, made durable by that delivery's
    dlrr_batch_end, before the batch reaches the job (or by dlrr_step_wait_durable when the
    delivery fails before its batch ends).  Other step ends commit at once."""

    def test_step_ends_at_deliveries_are_durable_before_the_job_runs_on(self):
        train = DataLoader(IndexDataset(12), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, _ in train:
            train_step(model, optimizer, x)
        self.assert_steps_well_formed(3)
        ends = self.lib.of("step_end")
        self.assertEqual([c[1] for c in ends if c[3:] == ("deferred",)], [0, 1])
        self.assertEqual([c[1] for c in ends if len(c) == 3], [2])  # at StopIteration: at once
        calls = self.lib.calls
        for i, call in enumerate(calls):
            if call[0] == "step_end" and call[3:] == ("deferred",):
                rest = [c[0] for c in calls[i + 1:]]
                until = rest.index("batch_end")
                # Nothing of the job's (digests, another step end) before the batch has ended.
                self.assertEqual(set(rest[:until]) - {"step_begin", "rng_state", "batch_begin", "list",
                                                      "tuple", "tensor"}, set(), rest[:until])
        self.assertEqual(self.lib.of("step_wait_durable"), [])
        self.assert_no_status_errors()

    def test_a_delivery_that_fails_after_its_step_end_still_waits(self):
        train = DataLoader(IndexDataset(12), batch_size=4)
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        original = self.rec.rng.write_snapshot
        deliveries = [0]

        def write_snapshot():
            deliveries[0] += 1
            if deliveries[0] == 2:
                raise RuntimeError("injected")
            return original()
        self.rec.rng.write_snapshot = write_snapshot
        for x, _ in train:
            train_step(model, optimizer, x)
        names = [c[0] for c in self.lib.calls]
        end = names.index("step_end")
        self.assertEqual(self.lib.calls[end][1:], (0, self.lib.calls[end][2], "deferred"))
        self.assertEqual(names[end + 1:].count("batch_end"), 0)  # the failed delivery began no batch
        self.assertIn("step_wait_durable", names[end + 1:])
        self.assertFalse(self.rec.active)  # the hook's internal error disabled it, as before


class BatchValuesTest(RecorderTestCase):
    def test_nested_dict_tuple_batch(self):
        def collate(samples):
            xs = torch.stack([s[0] for s in samples])
            return {"inputs": (xs, [xs[:, :1].contiguous(), None]),
                    "meta": {"names": ["a", "b"], "ok": True, "scale": 0.5, "n": 7, "raw": b"\x00\x01"},
                    3: "int key"}

        loader = DataLoader(IndexDataset(2), batch_size=2, collate_fn=collate)
        with torch.no_grad():
            batch = next(iter(loader))
        (begin, values), = self.batches()
        self.assertEqual(begin[5], [0, 1])
        shapes = [(c[0], c[3]) if c[0] == "tensor" else c for c in values]
        self.assertEqual(shapes, [
            ("dict", 3),
            ("key", "inputs"), ("tuple", 2), ("tensor", [2, 3]), ("list", 2), ("tensor", [2, 1]), ("none",),
            ("key", "meta"), ("dict", 5),
            ("key", "names"), ("list", 2), ("str", "a"), ("str", "b"),
            ("key", "ok"), ("bool", 1),
            ("key", "scale"), ("float", 0.5),
            ("key", "n"), ("int", 7),
            ("key", "raw"), ("bytes", b"\x00\x01"),
            ("key", "3"), ("str", "int key")])
        self.assertEqual(tensor_values(values[3]).tolist(), batch["inputs"][0].tolist())

    def test_unsupported_and_special_values(self):
        import collections
        import numpy as np
        Pair = collections.namedtuple("Pair", "a b")
        strided = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2]
        value = [Pair(1, 2), np.array(["text"]), 1 << 70, strided, object.__new__(object),
                 collections.OrderedDict(k=1.5), torch.zeros(2, requires_grad=True),
                 np.arange(6, dtype=np.int16).reshape(2, 3)[:, ::2], np.float32(0.5)]
        self.rec.values.write(value)
        calls = self.lib.calls
        self.assertEqual(calls[0], ("list", 9))
        self.assertEqual(calls[1:4], [("tuple", 2), ("int", 1), ("int", 2)])
        self.assertEqual(calls[4], ("opaque", "numpy.ndarray[<U4]"))  # only numeric and bool dtypes
        self.assertEqual(calls[5], ("opaque", "int (beyond int64)"))
        self.assertEqual(calls[6][0], "tensor")
        self.assertEqual(calls[6][3], [3, 2])
        self.assertEqual(tensor_values(calls[6]).tolist(), strided.tolist())
        self.assertEqual(calls[7], ("opaque", "object"))
        self.assertEqual(calls[8:10], [("dict", 1), ("key", "k")])
        self.assertEqual(calls[10], ("float", 1.5))
        self.assertEqual(calls[11][6], 1)  # requires_grad
        self.assertEqual(calls[11][5], "cpu")
        # numpy values: tensors on device "numpy" / "numpy scalar" with numpy's dtype name, bytes
        # made contiguous (batches.py serves them back as numpy values)
        self.assertEqual(calls[12][0], "tensor")
        self.assertEqual((calls[12][1], calls[12][3], calls[12][5]), ("int16", [2, 2], "numpy"))
        self.assertEqual(calls[12][4], np.array([[0, 2], [3, 5]], np.int16).tobytes())
        self.assertEqual((calls[13][1], calls[13][3], calls[13][5]), ("float32", [], "numpy scalar"))
        self.assertEqual(calls[13][4], np.float32(0.5).tobytes())

    def test_sparse_tensor_is_opaque(self):
        sparse = torch.zeros(3, 3).to_sparse()
        self.rec.values.write(sparse)
        self.assertEqual(self.lib.calls[0][0], "opaque")
        self.assertIn("sparse", self.lib.calls[0][1])


class TransformDataset(IndexDataset):
    """IndexDataset whose samples pass through an nn.Module (as torchvision's Normalize)."""

    def __init__(self, n):
        super().__init__(n)
        self.transform = torch.nn.Sequential(torch.nn.Identity())

    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return self.transform(x), y


class DataPipelineModulesTest(RecorderTestCase):
    def test_modules_called_while_fetching_are_not_digested_and_do_not_take_the_root_name(self):
        loader = DataLoader(TransformDataset(8), batch_size=4,
                            collate_fn=lambda b: torch.nn.Identity()(torch.utils.data.default_collate(b)))
        model = small_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in loader:
            train_step(model, optimizer, x)
        self.assert_steps_well_formed(2)
        paths = sorted({d[2] for d in self.digests(native.DIGEST_MODULE_OUTPUT)})
        # The model is the process's first root ("" prefix); nothing of the transforms or the
        # collate function's module was digested.
        self.assertEqual(paths, ["", "0 (Linear)", "1 (ReLU)", "2 (Linear)"])


class IndicesPointerTest(unittest.TestCase):
    def test_integers_only_and_within_int64(self):
        cases = [([3, 1, 2], [3, 1, 2]), ([], []), (7, [7]), (None, []),
                 (np.array([5, 9], dtype=np.int64), [5, 9]), ([np.int32(4), np.int64(-2)], [4, -2]),
                 (torch.tensor([6, 0]), [6, 0]), ([True, 2], [1, 2]), ([1.5, 2], []), (["a"], []),
                 ([1 << 63], []),  # beyond int64: not recorded (a ctypes array used to wrap it)
                 ([-(1 << 63), (1 << 63) - 1], [-(1 << 63), (1 << 63) - 1]),
                 (torch.tensor([1.0]), []), (object(), [])]
        for index, expected in cases:
            pointer, count = loaders.indices_pointer(index)
            self.assertEqual(count, len(expected), repr(index))
            self.assertEqual(list(pointer) if count else [], expected, repr(index))
            if not count:
                self.assertIsNone(pointer, repr(index))


if __name__ == "__main__":
    unittest.main()
