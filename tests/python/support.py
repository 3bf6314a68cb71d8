"""Shared helpers: a recorder on the fake library, tiny datasets and models."""

import math
import unittest

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset, IterableDataset

import dlrr_hook
from dlrr_hook import native


class IndexDataset(Dataset):
    """Sample i is (3 floats equal to i, i): the batch says which indices it holds."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((3,), float(i)), i


class CountingIterable(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield torch.full((3,), float(i)), i


def small_model():
    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))


def train_step(model, optimizer, x):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    return loss.item()


class RecorderTestCase(unittest.TestCase):
    capture_level = native.CAPTURE_DEFAULT

    def setUp(self):
        torch.manual_seed(0)
        self.lib = fake_native.FakeLib(capture_level=self.capture_level)
        self.rec = dlrr_hook.install(lib=self.lib)
        self.assertIsNotNone(self.rec)
        self.assertIsNotNone(self.rec.torch, "torch is imported: the hook must patch at once")

    def tearDown(self):
        dlrr_hook.uninstall()
        errors = self.lib.of("FAKE_ERROR")
        self.assertEqual(errors, [], "calls the fake could not decode")

    # -- views of the recorded calls
    def step_events(self):
        return [c for c in self.lib.calls if c[0] in ("step_begin", "step_end")]

    def batches(self):
        """[(batch_begin call, [value calls])]."""
        out, current = [], None
        for call in self.lib.calls:
            if call[0] == "batch_begin":
                current = (call, [])
            elif call[0] == "batch_end":
                out.append(current)
                current = None
            elif current is not None:
                current[1].append(call)
        return out

    def digests(self, kind=None):
        return [c for c in self.lib.of("digest") if kind is None or c[1] == kind]

    def assert_no_status_errors(self):
        bad = [c for c in self.lib.of("recorder_status") if c[1] == 0]
        self.assertEqual(bad, [])

    def assert_steps_well_formed(self, expected_count):
        events = self.step_events()
        begun = [c[1] for c in events if c[0] == "step_begin"]
        ended = [c[1] for c in events if c[0] == "step_end"]
        self.assertEqual(begun, list(range(expected_count)))
        self.assertEqual(ended, list(range(expected_count)))
        for i in range(0, len(events), 2):  # strictly alternating begin/end of the same step
            self.assertEqual(events[i][0], "step_begin")
            self.assertEqual(events[i + 1][0], "step_end")
            self.assertEqual(events[i][1], events[i + 1][1])


def tensor_values(call):
    """numpy view of a recorded ('tensor', dtype, size, shape, bytes, device, rg) call."""
    _, dtype, _, shape, data, _, _ = call
    return np.frombuffer(data, dtype={"float32": np.float32, "int64": np.int64,
                                      "float64": np.float64}[dtype]).reshape(shape)


def is_nan(x):
    return isinstance(x, float) and math.isnan(x)
