"""The replay batch decoder (dlrr_hook/batches.py) parses bytes that come from a trace.

Round trips of valid encodings (written here by a Python twin of replayer/BatchEncoding.cc),
then a fuzz-ish run: random bytes and mutations of valid encodings (bit flips, cut and
spliced bytes, length and shape fields rewritten). Whatever the input, only
BatchFormatError, ValueError or struct.error may escape, and nothing is allocated beyond
what the input holds. DLRR_BATCH_FUZZ_ITERATIONS sets the number of inputs (default 20000).
"""

import os
import random
import struct
import unittest

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
import numpy as np
import torch

from dlrr_hook.batches import BatchDecoder, BatchFormatError

ALLOWED = (BatchFormatError, ValueError, struct.error)


def enc_str(s):
    b = s.encode("utf-8", "surrogatepass") if isinstance(s, str) else s
    return struct.pack("<I", len(b)) + b


def encode(v):
    """Python twin of replayer/BatchEncoding.cc's encodeValue."""
    if isinstance(v, (np.ndarray, np.generic)):  # before float: numpy.float64 is one (values.py)
        a = np.asarray(v)
        data = a.tobytes()
        return (b"X" + enc_str(a.dtype.name) + struct.pack("<I", a.ndim) + b"".join(struct.pack("<q", d) for d in a.shape)
                + b"\x00" + enc_str("numpy" if isinstance(v, np.ndarray) else "numpy scalar")
                + struct.pack("<Q", len(data)) + data)
    if v is None:
        return b"N"
    if isinstance(v, bool):
        return b"B" + bytes([1 if v else 0])
    if isinstance(v, int):
        return b"I" + struct.pack("<q", v)
    if isinstance(v, float):
        return b"F" + struct.pack("<d", v)
    if isinstance(v, str):
        return b"S" + enc_str(v)
    if isinstance(v, bytes):
        return b"Y" + enc_str(v)
    if isinstance(v, (list, tuple)):
        return (b"L" if isinstance(v, list) else b"T") + struct.pack("<I", len(v)) + b"".join(encode(x) for x in v)
    if isinstance(v, dict):
        return b"D" + struct.pack("<I", len(v)) + b"".join(enc_str(k) + encode(x) for k, x in v.items())
    if isinstance(v, torch.Tensor):
        data = v.contiguous().view(torch.uint8).numpy().tobytes() if v.numel() else b""
        return (b"X" + enc_str(str(v.dtype).replace("torch.", "")) + struct.pack("<I", v.dim()) +
                b"".join(struct.pack("<q", d) for d in v.shape) + bytes([1 if v.requires_grad else 0]) +
                enc_str("cpu") + struct.pack("<Q", len(data)) + data)
    raise TypeError(type(v))


def samples():
    return [
        None, True, -7, 2.5, "text é", b"\x00\x01", [1, (2.0, None)], {"x": torch.arange(6, dtype=torch.float32).reshape(2, 3)},
        (torch.zeros(0, 4), torch.tensor([1, 2, 3], dtype=torch.int64), {"m": torch.ones(2, dtype=torch.bool)}),
        {"inputs": [torch.randn(2, 3, 4), torch.randn(5, dtype=torch.float64).requires_grad_()],
         "label": torch.tensor([0, 2]), "id": 17, "meta": {"path": "a/b.png", "ok": False}},
        torch.tensor([1.5, -2.0], dtype=torch.bfloat16), torch.tensor([1 + 2j], dtype=torch.complex64),
        # numpy values (a collate_fn returning them): arrays and scalars keep their numpy type and dtype
        (np.arange(12, dtype=np.float32).reshape(3, 4), np.array([True, False]), np.zeros((0, 2), np.int16)),
        [np.float32(0.5), np.float64(-1.25), np.int64(7), np.bool_(True), np.array(3, dtype=np.uint8),
         np.array([1 + 2j], np.complex128)],
    ]


def same(a, b):
    if isinstance(a, (np.ndarray, np.generic)):
        return (type(a) == type(b) and a.dtype == b.dtype and a.shape == b.shape and
                a.tobytes() == b.tobytes())
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and
                a.requires_grad == b.requires_grad and torch.equal(a.detach(), b.detach()))
    if isinstance(a, (list, tuple)):
        return type(a) == type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) == type(b) and a == b


def tensors(v):
    if isinstance(v, (torch.Tensor, np.ndarray, np.generic)):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from tensors(x)


def mutate(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if op == 0 and b:                       # flip a bit
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:                     # cut
            del b[rng.randrange(len(b)):]
        elif op == 2 and b:                     # delete a span
            i = rng.randrange(len(b))
            del b[i:i + rng.randint(1, 16)]
        elif op == 3:                           # insert random bytes
            i = rng.randrange(len(b) + 1)
            b[i:i] = os.urandom(rng.randint(1, 16))
        elif op == 4 and len(b) >= 4:           # an interesting 32-bit value somewhere
            i = rng.randrange(len(b) - 3)
            b[i:i + 4] = struct.pack("<I", rng.choice([0, 1, 2, 3, 7, 0x7FFFFFFF, 0xFFFFFFFF, 64, 65, 1 << 20]))
        elif op == 5 and len(b) >= 8:           # an interesting 64-bit value (shape, nbytes)
            i = rng.randrange(len(b) - 7)
            b[i:i + 8] = struct.pack("<q", rng.choice([0, -1, 1, 2, 1 << 40, -(1 << 62), (1 << 63) - 1, 4, 8]))
        elif op == 6 and b:                     # a tag where a value starts
            i = rng.randrange(len(b))
            b[i] = ord(rng.choice("NBIFSYOLTDXZ"))
    return bytes(b)


class BatchDecoderTest(unittest.TestCase):
    def setUp(self):
        self.dec = BatchDecoder(torch)

    def test_round_trips(self):
        for v in samples():
            got = self.dec.decode(encode(v))
            self.assertTrue(same(v, got), (v, got))

    def test_known_bad_inputs_raise_format_errors(self):
        def xt(dtype, shape, requires_grad, data, device="cpu"):
            return (b"X" + enc_str(dtype) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<q", d) for d in shape)
                    + bytes([requires_grad]) + enc_str(device) + struct.pack("<Q", len(data)) + data)

        self.assertTrue(same(self.dec.decode(xt("int32", [4], 0, bytes(16))), torch.zeros(4, dtype=torch.int32)))
        self.assertTrue(same(self.dec.decode(xt("int32", [4], 0, bytes(16), "numpy")), np.zeros(4, np.int32)))
        cases = {
            "bool at the end": b"B",
            "bytes cut short": b"Y" + struct.pack("<I", 10) + b"abc",
            "shape does not match the data": xt("int32", [3], 0, bytes(16)),
            "negative dimension": xt("int32", [-4], 0, bytes(16)),
            "negative dimensions that multiply out": xt("int32", [-2, -2], 0, bytes(16)),
            "huge shape, no data": xt("float32", [1 << 30, 1 << 30], 0, b""),
            "requires_grad on an int tensor": xt("int64", [1], 1, bytes(8)),
            "not a dtype": xt("Tensor", [1], 0, bytes(4)),
            "a name torch resolves lazily": xt("_dynamo", [], 0, b""),
            "shape cut short": b"X" + enc_str("float32") + struct.pack("<I", 3) + b"\x01\x00",
            "nested too deeply": b"L\x01\x00\x00\x00" * 70 + b"N",
            "trailing bytes": b"NN",
            "unknown tag": b"Z",
            "empty": b"",
            "invalid utf-8 key": b"D\x01\x00\x00\x00" + enc_str(b"\xff\xfe") + b"N",
            "opaque object": b"O" + enc_str("socket"),
            "numpy: not a dtype name": xt("Tensor", [1], 0, bytes(4), "numpy"),
            "numpy: object dtype": xt("object", [1], 0, bytes(8), "numpy"),
            "numpy: a dtype spelled as numpy parses it": xt("<f4", [1], 0, bytes(4), "numpy"),
            "numpy: structured dtype": xt("f4,f4", [1], 0, bytes(8), "numpy"),
            "numpy: shape does not match the data": xt("float32", [3], 0, bytes(16), "numpy"),
            "numpy: negative dimensions": xt("int32", [-2, -2], 0, bytes(16), "numpy"),
            "numpy: a scalar with a shape": xt("int32", [1], 0, bytes(4), "numpy scalar"),
        }
        for name, data in cases.items():
            with self.subTest(name):
                with self.assertRaises(ALLOWED):
                    self.dec.decode(data)

    def test_random_and_mutated_inputs(self):
        n = int(os.environ.get("DLRR_BATCH_FUZZ_ITERATIONS", "20000"))
        rng = random.Random(1234)
        seeds = [encode(v) for v in samples()]
        decoded = 0
        for i in range(n):
            data = os.urandom(rng.randint(0, 64)) if i % 10 == 0 else mutate(rng, rng.choice(seeds))
            try:
                value = self.dec.decode(data)
            except ALLOWED:
                continue
            except Exception as e:  # noqa: BLE001 - anything else is a finding
                self.fail("input %r raised %s: %s" % (data, type(e).__name__, e))
            decoded += 1
            held = sum(t.nbytes if isinstance(t, (np.ndarray, np.generic)) else t.numel() * t.element_size()
                       for t in tensors(value))
            self.assertLessEqual(held, len(data), "decoding %d bytes allocated %d bytes of tensors" % (len(data), held))
        self.assertGreater(decoded, 0)


if __name__ == "__main__":
    unittest.main()
