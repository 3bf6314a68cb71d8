"""The native batch value walk (_dlrr_native.ValueWriter, pyhook/ext/ValueWriter.cc) against
the Python one (dlrr_hook/values.py).

Each value is written twice on the fake library, by a ValueWriter without the extension and by
one with it, and the dlrr_val_* calls the library sees must be identical byte for byte (strings,
keys, type names, tensor bytes, shapes, dtypes and devices as raw bytes): exact built-in values
and dense CPU tensors walked in C, everything else (numpy values, namedtuples, Mappings, subclasses,
non-str keys, lone surrogates, ints beyond int64, half/complex/non-contiguous tensors, values past
MAX_DEPTH) through the Python writer's one-value write, in the same order; an exception raised
midway ends both walks at the same call.  A count of the Python writes shows the C path is taken.

The extension is the build's (DLRR_TEST_NATIVE_EXT, set by CMake when it was built for this
interpreter); without it these tests are skipped, saying so.
"""

import collections
import ctypes
import gc
import math
import os
import sys
import unittest

import fake_native
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

import dlrr_hook
from dlrr_hook import values
from dlrr_hook.tensors import TensorMarshal
from test_native_hooks import EXT, NAME, WithExtension, load_extension


class RawFake(fake_native.FakeLib):
    """The fake, keeping the char* arguments of the value calls as the bytes they point to."""

    def __init__(self):
        super().__init__()
        # dlrr_val_str as (pointer, length): its bytes past a NUL too, which a c_char_p callback cuts.
        raw = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64)(self._recording("dlrr_val_str", self._raw_str))
        self._callbacks.append(raw)
        self.dlrr_val_str = raw

    def _raw_str(self, p, n):
        self.calls.append(("str", fake_native._bytes_at(p, n), n))

    def _dlrr_val_key(self, key):
        self.calls.append(("key", key))

    def _dlrr_val_opaque(self, type_name):
        self.calls.append(("opaque", type_name))

    def _dlrr_val_tensor(self, dtype, elem_size, ndim, shape, data, nbytes, device, requires_grad):
        self.calls.append(("tensor", dtype, elem_size, ndim, fake_native._array(shape, ndim),
                           fake_native._bytes_at(data, nbytes), nbytes, device, requires_grad))


Point = collections.namedtuple("Point", "x y")


class Mapping(collections.abc.Mapping):
    def __init__(self, items, fail=False):
        self._items = dict(items)
        self._fail = fail

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def items(self):
        if self._fail:
            raise RuntimeError("items() fails")
        return self._items.items()


class Tagged(torch.Tensor):
    pass


class MyInt(int):
    pass


class MyList(list):
    pass


class MyDict(dict):
    pass


def nested(depth, leaf):
    value = leaf
    for i in range(depth):
        value = [value] if i % 3 else ({"k": value} if i % 2 else (value,))
    return value


def batches():
    """(name, value) of the shapes the walks must agree on."""
    torch.manual_seed(3)
    images = torch.randn(4, 1, 5, 5)
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return [
        ("cnn tuple", (images, torch.tensor([1, 2, 3, 4]))),
        ("cnn list", [images, torch.tensor([1, 2, 3, 4])]),
        ("nested", {"a": [1, (2, 3.5, None), {"b": [True, False, 0, 1]}], "c": ({}, [], ())}),
        ("namedtuple", Point(torch.ones(2), [Point(1, 2)])),
        ("str", ["", "ascii", "n\u00e9e \u4e2d\u6587 \U0001f600", "lone \udcff surrogate", "nul\0inside",
                 "\ud800", "x" * 5000]),
        ("bytes", [b"", b"abc", b"nul\0inside", bytes(range(256)) * 10, bytearray(b"ba")]),
        ("bool vs int", [True, False, 1, 0, -1, MyInt(5), True + 1]),
        ("ints", [(1 << 63) - 1, -(1 << 63), 1 << 63, -(1 << 63) - 1, 1 << 200, -(1 << 200)]),
        ("floats", [0.0, -0.0, 1.5, math.nan, -math.nan, math.inf, -math.inf, 5e-324, float.fromhex("0x1.fffp+1023")]),
        ("numpy", [np.arange(6, dtype=np.float32).reshape(2, 3), np.float64(2.5), np.int64(7), np.bool_(True),
                   np.arange(8)[::2], np.array(["a"]), np.zeros(3, dtype=">f4"), np.complex64(1 + 2j)]),
        ("dtypes", [t.t(), t[:, ::2], t.to(torch.float16), t.to(torch.bfloat16), t.to(torch.complex64),
                    t.to(torch.int8), t.to(torch.uint8), t.to(torch.int32), t > 3, t.to(torch.float64)]),
        ("grad", [torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True) * 2,
                  torch.nn.Parameter(torch.ones(2))]),
        ("empty", [torch.empty(0), torch.empty(0, 3), torch.tensor(2.5), torch.tensor(7), torch.empty(2, 0, 4)]),
        ("big", torch.arange(40000, dtype=torch.float32)),
        ("past 1 MiB: without the GIL", [torch.arange(300000, dtype=torch.float32), "after"]),
        ("subclass", [torch.ones(2).as_subclass(Tagged), MyList([1, 2]), MyDict(a=1)]),
        ("dict keys", {1: "int key", b"bk": "bytes key", "s": 1, (1, 2): "tuple key", None: 0,
                       "\udcffk": "surrogate key", "\u00e9": "e acute"}),
        ("mapping", Mapping({"x": torch.ones(2), "y": [1, 2]})),
        ("ordered", collections.OrderedDict([("b", 1), ("a", [torch.zeros(2), "s"])])),
        ("sparse", [torch.eye(3).to_sparse(), torch.empty(2, device="meta")]),
        ("opaque", [object(), len, int, Point]),
        ("deep list", nested(values.MAX_DEPTH + 5, torch.ones(1))),
        ("deep at the edge", nested(values.MAX_DEPTH, 1)),
        ("deep across Python", [collections.OrderedDict(k=nested(values.MAX_DEPTH, "leaf"))]),
        ("deep dict", nested(values.MAX_DEPTH + 2, {"a": 1})),
        ("self reference", _self_referencing()),
        ("scalar", 5),
        ("none", None),
        ("tensor alone", torch.ones(2, 2)),
    ]


def _self_referencing():
    a = [1]
    a.append(a)
    return a


class Counting(values.ValueWriter):
    """A ValueWriter counting the values its Python walk writes (the C walk's fallbacks)."""

    python_writes = 0

    def write_python(self, value, depth=0):
        Counting.python_writes += 1
        return values.ValueWriter.write_python(self, value, depth)


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class NativeValuesTest(unittest.TestCase):
    def setUp(self):
        self.module = load_extension()
        self.lib = RawFake()
        self.marshal = TensorMarshal(torch)
        self.python = values.ValueWriter(self.lib, self.marshal, torch.Tensor, native_ext=None)
        self.native = Counting(self.lib, self.marshal, torch.Tensor, native_ext=self.module)
        self.assertIsNone(self.python.native_walker)
        self.assertIsNotNone(self.native.native_walker)
        Counting.python_writes = 0

    def calls(self, writer, value):
        self.lib.clear()
        error = None
        try:
            writer.write(value)
        except Exception as exc:  # the same exception, at the same call, from both walks
            error = (type(exc), str(exc))
        return list(self.lib.calls), error

    def assert_same(self, name, value):
        # Python first: it caches the dtypes the C walk reads (as the job's first batch does).
        python = self.calls(self.python, value)
        native = self.calls(self.native, value)
        self.assertEqual([c for c in python[0] if c[0] == "FAKE_ERROR"], [], name)
        self.assertEqual(python[1], native[1], name)
        self.assertEqual(len(python[0]), len(native[0]), name)
        for i, (a, b) in enumerate(zip(python[0], native[0])):
            self.assertEqual(repr(a), repr(b), "%s: call %d differs" % (name, i))  # repr: nan equals nan
        return python[0]

    def test_same_calls_for_every_shape(self):
        for name, value in batches():
            with self.subTest(name):
                self.assert_same(name, value)

    def test_unseen_dtypes_go_through_python_first(self):
        """The first batch of a dtype (not yet in the marshal's cache) is Python's, then C's."""
        value = (torch.ones(2, dtype=torch.int16), torch.ones(3, dtype=torch.float64))
        native = self.calls(self.native, value)
        self.assertEqual(Counting.python_writes, 2)
        python = self.calls(self.python, value)
        self.assertEqual(repr(python), repr(native))
        Counting.python_writes = 0
        self.assertEqual(repr(self.calls(self.native, value)), repr(python))
        self.assertEqual(Counting.python_writes, 0)

    def test_c_walk_writes_the_plain_values(self):
        plain = batches()[:3] + [("big", torch.arange(40000, dtype=torch.float32)),
                                 ("huge", torch.arange(300000, dtype=torch.float32))]
        for name, value in plain:
            self.assert_same(name, value)
        self.assertEqual(Counting.python_writes, 0)
        self.assert_same("numpy", [1, np.float32(2), "x"])
        self.assertEqual(Counting.python_writes, 1)

    def test_string_calls_carry_the_bytes(self):
        calls = self.assert_same("str", ["n\u00e9e", "lone \udcff", "a\0b"])
        self.assertEqual([c[1] for c in calls if c[0] == "str"],
                         ["n\u00e9e".encode(), "lone \udcff".encode("utf-8", "surrogatepass"), b"a\0b"])
        calls = self.assert_same("keys", {"\u00e9": 1, 2: 2, "\udcff": 3})
        self.assertEqual([c[1] for c in calls if c[0] == "key"],
                         ["\u00e9".encode(), b"2", "\udcff".encode("utf-8", "surrogatepass")])

    def test_an_exception_midway_ends_both_walks_alike(self):
        value = {"before": [1, torch.ones(2)], "bad": [3, Mapping({"x": 1}, fail=True), 4], "after": 5}
        calls = self.assert_same("raising mapping", value)
        self.assertEqual(calls[-1], ("int", 3))
        with self.assertRaisesRegex(RuntimeError, "items\\(\\) fails"):
            self.native.write(value)

    def test_a_fallback_that_changes_the_container(self):
        """A value whose Python write empties the list it sits in: both walks go on over the
        list as it was (list(value) in Python, its copy in C)."""
        holder = []

        class ClearingMapping(Mapping):
            def items(self):
                del holder[:]
                return {"k": 1}.items()

        def fill():
            holder[:] = [1, ClearingMapping({}), "after", torch.ones(2)]
            return holder
        python = self.calls(self.python, fill())
        native = self.calls(self.native, fill())
        self.assertEqual(repr(python), repr(native))
        self.assertEqual([c[0] for c in native[0]], ["list", "int", "dict", "key", "int", "str", "tensor"])

    def test_no_reference_leaks(self):
        """Writes repeated 500 times leave the reference counts of the values, their parts and the
        walk's own state as they were, a walk that raises midway included."""
        images, labels = torch.randn(8, 1, 4, 4), torch.arange(8)
        # Made at run time: literals like "key" are interned, shared with the rest of the process.
        text, key, blob, big = "".join(["t\u00e9", "xt"]), "".join(["k", "ey"]), bytes([98, 108]), 1 << 70
        inner = [images, 1.5, None, True, text, blob, big, np.float32(1), Point(1, 2)]
        batch = (images, labels, {key: inner, "deep": nested(values.MAX_DEPTH + 2, labels)})
        bad = [images, {"k": text}, Mapping({}, fail=True), labels]
        info = self.marshal.dtype_info(torch.float32)
        watched = [batch, bad, images, labels, inner, text, key, blob, big, info, info[0],
                   self.native.native_walker, self.marshal.dtypes, torch.Tensor]

        def write_both():
            self.native.write(batch)
            with self.assertRaises(RuntimeError):
                self.native.write(bad)
            self.lib.clear()
        write_both()
        write_both()
        # Garbage of earlier tests (objects holding torch.Tensor, collected whenever the cycle
        # collector happens to run) must not move the counts between the two readings.
        gc.collect()
        gc.disable()
        try:
            before = [sys.getrefcount(o) for o in watched]
            for _ in range(500):
                write_both()
            after = [sys.getrefcount(o) for o in watched]
        finally:
            gc.enable()
        self.assertEqual(before, after)

    def test_bad_arguments_raise(self):
        make = self.module.ValueWriter
        walker = self.native.native_walker
        with self.assertRaises(TypeError):
            walker.write()
        with self.assertRaises(TypeError):
            walker.write(1, 2, 3)
        with self.assertRaises(RuntimeError):
            make.__new__(make).write(1)
        with self.assertRaises(ValueError):  # a function missing
            make(functions={}, tensor_type=torch.Tensor, strided=torch.strided, dtypes={}, cpu_device=b"cpu",
                 max_depth=64, fallback=print)

    def test_a_writer_without_c_functions_walks_in_python(self):
        class Plain:
            pass
        lib = Plain()
        for name in values.NATIVE_FUNCTIONS + ("dlrr_val_opaque",):
            setattr(lib, name, lambda *args: None)  # Python callables: no address to call
        writer = values.ValueWriter(lib, self.marshal, torch.Tensor, native_ext=self.module)
        self.assertIsNone(writer.native_walker)


class Samples(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {"x": torch.full((2, 2), float(i)), "y": i, "name": "s%d" % i, "raw": np.float32(i)}


def loader_job():
    torch.manual_seed(0)
    for batch in DataLoader(Samples(), batch_size=3):
        batch["x"].sum()


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class NativeValuesInTheHookTest(WithExtension, unittest.TestCase):
    """The installed hook: its batches through the C walk where the extension imports."""

    def record(self, use_native):
        lib = fake_native.FakeLib()
        with self.installed(use_native, lib) as rec:
            self.assertEqual(rec.values.native_walker is not None, use_native)
            loader_job()
            return lib.calls

    def test_same_batches_as_the_python_walk(self):
        python = self.record(False)
        native = self.record(True)
        self.assertEqual([c for c in python if c[0] == "FAKE_ERROR"], [])
        self.assertEqual(repr(python), repr(native))
        self.assertEqual(len([c for c in python if c[0] == "batch_begin"]), 2)
        self.assertIn(("str", "s4"), python)

    def test_turned_off_by_the_environment(self):
        sys.modules[NAME] = self.module
        os.environ["DLRR_NATIVE_HOOKS"] = "0"
        try:
            rec = dlrr_hook.install(lib=fake_native.FakeLib())
            self.assertIsNone(rec.values.native_walker)
            self.assertEqual(rec.values.write, rec.values.write_python)
        finally:
            del os.environ["DLRR_NATIVE_HOOKS"]


if __name__ == "__main__":
    unittest.main()
