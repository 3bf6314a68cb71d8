"""dlrr_digest_many: the packed items read back, through real ctypes, as the per-tensor calls."""

import unittest

import torch

from fake_native import FakeLib  # first: puts the hook on sys.path
from dlrr_hook import native
from dlrr_hook.digest_batch import DigestBatch
from dlrr_hook.tensors import TensorMarshal


class DigestBatchTest(unittest.TestCase):
    def test_items_read_back_exactly_past_the_initial_buffer(self):
        self.assertTrue(DigestBatch.usable, "CPython's bytes layout expected on this interpreter")
        lib = FakeLib()
        marshal = TensorMarshal(torch)
        batch = DigestBatch(lib)
        torch.manual_seed(3)
        # 100 items: more than the 64 the buffer starts with; shapes of every rank up to 3,
        # fresh path bytes objects (freed after the call) and a non-contiguous tensor.
        tensors = [torch.randn([2] * (i % 4)) for i in range(99)] + [torch.randn(3, 4).t()]
        expected = []
        for i, t in enumerate(tensors):
            path = ("layer%d.weight" % i).encode()
            prepared = marshal.prepare(t)
            batch.add(path, i % 3, i % 2, prepared, i % 2)
            host = prepared[0]
            expected.append(("digest", native.DIGEST_PARAMETER, path.decode(), i % 3, i % 2, "float32",
                             list(host.shape), host.numpy().tobytes(), i % 2))
        batch.flush(native.DIGEST_PARAMETER)
        self.assertEqual([c for c in lib.calls if c[0] == "digest"], expected)
        batch.flush(native.DIGEST_PARAMETER)  # empty: no call
        self.assertEqual(len([c for c in lib.calls if c[0] == "digest"]), len(expected))


if __name__ == "__main__":
    unittest.main()
