"""_dlrr_native.MemmapRanges (pyhook/ext/MemmapRanges.cc) against FileCapture's Python wrapper.

Both wrap np.memmap.__getitem__; both must call dlrr_file_range with the same arguments (the
path, the file offset, the address, the length: compared raw, not the bytes behind them), in the
same order, for every index kind: ints, numpy integers, slices with steps and negative bounds,
2-D maps, fancy and boolean indexing, views of views, maps at an offset, two maps in turn, a
memmap-typed copy whose `_mmap` is None.  The C path must decide these itself (python_path stays
0), hand what it cannot decide to the Python path, and never let an Exception reach the job.

The extension is the build's (DLRR_TEST_NATIVE_EXT); without it these tests are skipped.
"""

import ctypes
import os
import shutil
import tempfile
import threading
import types
import unittest

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
import numpy as np

from dlrr_hook import native
from dlrr_hook.files import FileCapture
from dlrr_hook.patching import is_wrapped
from test_native_hooks import EXT, load_extension

_FILE_RANGE = ctypes.CFUNCTYPE(None, *native.SIGNATURES["dlrr_file_range"][1])


class RangeLib:
    """dlrr_file_range as a ctypes callback keeping its raw arguments."""

    def __init__(self):
        self.calls = []
        self.dlrr_file_range = _FILE_RANGE(lambda path, offset, data, n: self.calls.append((path, offset, data, n)))


def numpy_getitem():
    original = np.memmap.__dict__["__getitem__"]
    assert not is_wrapped(original), "another test left memmap.__getitem__ patched"
    return original


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class MemmapRangesTest(unittest.TestCase):
    def setUp(self):
        self.ext = load_extension()
        self.tmp = tempfile.mkdtemp(prefix="dlrr-memmap-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.a_path = os.path.join(self.tmp, "tokens.bin")
        self.b_path = os.path.join(self.tmp, "other.bin")
        np.arange(5000, dtype=np.uint16).tofile(self.a_path)
        np.arange(4000, dtype=np.float32).tofile(self.b_path)
        self.rec = types.SimpleNamespace(active=True)
        self.python_lib, self.native_lib = RangeLib(), RangeLib()
        self.python = FileCapture(self.rec, self.python_lib)
        self.native = FileCapture(self.rec, self.native_lib)
        original = numpy_getitem()
        self.python_getitem = self.python.python_getitem(original, np)
        self.native_getitem = self.native.native_getitem(original, np, ext=self.ext)
        self.assertIsNotNone(self.native_getitem, "MemmapRanges must take numpy's layout and a ctypes callback")

    def maps(self):
        return {
            "a": np.memmap(self.a_path, dtype=np.uint16, mode="r"),
            "a2d": np.memmap(self.a_path, dtype=np.uint16, mode="r", offset=40, shape=(50, 64)),
            "b": np.memmap(self.b_path, dtype=np.float32, mode="r", offset=4096 + 12, shape=(900,)),
            "b3d": np.memmap(self.b_path, dtype=np.float32, mode="r", offset=6, shape=(4, 10, 20)),
        }

    def both(self, steps):
        """Runs `steps` ([(map name or callable, index)]) through each wrapper on its own maps;
        returns the dlrr_file_range calls of each, per step, and checks the results agree."""
        out = []
        for getitem, lib in ((self.python_getitem, self.python_lib), (self.native_getitem, self.native_lib)):
            maps = self.maps()
            per_step = []
            for target, index in steps:
                array = target(maps) if callable(target) else maps[target]
                del lib.calls[:]
                result = getitem(array, index)
                expected = numpy_getitem()(array, index)
                self.assertEqual(type(result), type(expected))
                self.assertTrue(np.array_equal(np.asarray(result), np.asarray(expected)), (target, index))
                # Addresses differ between the two runs' maps: compare them relative to each map.
                per_step.append([(p, o, d - np.asarray(self.root(array)).ctypes.data, n) for p, o, d, n in lib.calls])
            out.append(per_step)
        return out

    @staticmethod
    def root(array):
        while isinstance(getattr(array, "base", None), np.memmap):
            array = array.base
        return array

    def assert_same(self, steps, reported):
        python, native_calls = self.both(steps)
        self.assertEqual(native_calls, python)
        self.assertEqual(sum(1 for calls in python if calls), reported, python)
        self.assertEqual(self.native_getitem.python_path, 0, "the C path must decide these itself")

    def test_index_kinds_as_the_python_path(self):
        view = lambda maps: maps["a"][100:900]  # noqa: E731
        view_of_view = lambda maps: maps["a"][100:900][::3][10:200]  # noqa: E731
        copy = lambda maps: maps["a"].astype(np.int32)  # noqa: E731  a memmap-typed copy: no _mmap
        steps = [
            ("a", 3), ("a", -1), ("a", 0), ("a", np.int64(17)), ("a", np.uint8(200)), ("a", -4999),
            ("a", slice(10, 43)), ("a", slice(10, 43, 2)), ("a", slice(None, None, 7)), ("a", slice(900, 100, -3)),
            ("a", slice(-40, None)), ("a", slice(5, 5)), ("a", Ellipsis), ("a", slice(None)), ("a", True),
            ("a", [1, 5]), ("a", np.array(3)), ("a", (slice(2, 9), None)), ("a", np.arange(5000) % 7 == 0),
            ("a2d", 3), ("a2d", -2), ("a2d", np.int32(7)), ("a2d", (3, 4)), ("a2d", (slice(2, 5), slice(1, 20, 3))),
            ("a2d", (slice(None), 3)), ("a2d", (slice(None, None, -1), slice(None, None, 2))), ("a2d", slice(4, 6)),
            ("a2d", ([1, 2], [3, 4])), ("a2d", (slice(None), slice(5, 5))), ("a2d", (slice(3, 3), slice(None, None, 2))),
            ("a", slice(None, None, -1)), ("a", slice(-1, -2, -1)),
            ("b", 0), ("b", 899), ("b", slice(100, 133)), ("b3d", 1), ("b3d", (1, slice(2, 5))),
            ("b3d", (Ellipsis, 7)), ("b3d", (slice(None), slice(None), slice(None, None, -5))),
            (view, 5), (view, slice(5, 40)), (view, slice(None, None, -2)), (view_of_view, 3),
            (view_of_view, slice(1, 30)), (view_of_view, slice(30, 1, -4)),
            (copy, 3), (copy, slice(2, 40)),
            # two maps in turn: the facts of the last one only are kept
            ("a", slice(4, 6)), ("b", slice(0, 2)), ("a", slice(8, 10)), ("b", 1), ("a2d", 1), ("b3d", 2), ("a", 9),
        ]
        self.assert_same(steps, reported=43)

    def test_a_new_map_per_window(self):
        # nanoGPT's get_batch(): a new memmap of the same file every call, its facts recomputed.
        steps = [(lambda maps, i=i: np.memmap(self.a_path, dtype=np.uint16, mode="r"), slice(i, i + 33))
                 for i in (0, 700, 4000)]
        self.assert_same(steps, reported=3)

    def test_the_arguments_themselves(self):
        # The comparison above is relative to each map: here the C path's own, absolute.
        a, b = self.maps()["a"], self.maps()["b"]
        self.native_getitem(a, slice(10, 43))
        self.native_getitem(b, 2)
        self.native_getitem(a, slice(30, 10, -5))
        self.assertEqual(self.native_lib.calls, [
            (self.a_path.encode(), 20, a.ctypes.data + 20, 66),
            (self.b_path.encode(), 4096 + 12 + 8, b.ctypes.data + 8, 4),  # the map begins at a page: 4096
            (self.a_path.encode(), 30, a.ctypes.data + 30, 32)])

    def test_a_memmap_typed_copy_returns_early(self):
        copy = np.memmap(self.a_path, dtype=np.uint16, mode="r").astype(np.int32)
        self.assertIsNone(copy._mmap)
        self.assertEqual(self.native_getitem(copy, slice(1, 4)).tolist(), [1, 2, 3])
        self.assertEqual((self.native_lib.calls, self.native_getitem.python_path), ([], 0))

    def test_paused_or_inactive_reports_nothing(self):
        data = self.maps()["a"]
        self.rec.active = False
        self.native_getitem(data, slice(1, 4))
        self.rec.active = True
        self.native._paused[threading.get_ident()] = 1
        self.native_getitem(data, 5)
        other = []
        thread = threading.Thread(target=lambda: other.append(self.native_getitem(data, slice(7, 9))))
        thread.start()
        thread.join()
        del self.native._paused[threading.get_ident()]
        self.assertEqual([(o, n) for _, o, _, n in self.native_lib.calls], [(14, 4)])  # the other thread's only

    def test_as_a_method_of_memmap(self):
        # Bound from an instance (data.__getitem__(i)) and from the class, as a function would be.
        data = self.maps()["a"]
        self.assertEqual(int(self.native_getitem.__get__(data, np.memmap)(6)), 6)
        self.assertIs(self.native_getitem.__get__(None, np.memmap), self.native_getitem)
        self.assertEqual([(o, n) for _, o, _, n in self.native_lib.calls], [(12, 2)])
        with self.assertRaises(TypeError):
            self.native_getitem(data)
        with self.assertRaises(IndexError):  # numpy's own errors reach the job unchanged
            self.native_getitem(data, 5000)

    def test_what_the_c_path_cannot_decide_goes_to_python(self):
        data = self.maps()["a"]
        facts = self.native._facts_of(data, data._mmap, np)
        seen = []
        used = self.native._used

        def spy(*args):
            seen.append(args[1])
            return used(*args)

        self.native._used = spy
        original = numpy_getitem()
        getitem = self.native.native_getitem(original, np, ext=self.ext)
        self.native._last = (data._mmap, (facts[0], float(facts[1]), facts[2], facts[3]))  # not an int
        self.assertEqual(getitem(data, slice(3, 5)).tolist(), [3, 4])
        self.assertEqual((seen, getitem.python_path), ([slice(3, 5)], 1))
        self.assertEqual(self.native_lib.calls, [])  # ctypes refused the float: swallowed, as in Python

    def test_exceptions_never_reach_the_job_but_interrupts_do(self):
        data = self.maps()["a"]

        def broken(*args):
            raise ValueError("facts")

        self.native._facts_of = broken
        self.assertEqual(self.native_getitem(data, slice(3, 5)).tolist(), [3, 4])
        self.assertEqual(self.native_lib.calls, [])

        def interrupted(*args):
            raise KeyboardInterrupt

        self.native._facts_of = interrupted
        self.python._facts_of = interrupted
        for getitem in (self.python_getitem, self.native_getitem):
            with self.assertRaises(KeyboardInterrupt):
                getitem(self.maps()["a"], slice(3, 5))

    def test_not_used_when_the_layout_is_not_numpys(self):
        class Skewed:
            def __init__(self, wrapper):
                self.wrapper = wrapper

            def read(self, array):
                data, shape, strides, contiguous, itemsize = self.wrapper.read(array)
                return data + 2, shape, strides, contiguous, itemsize

        from dlrr_hook import files
        self.assertTrue(files._layout_holds(self.native_getitem, np))
        self.assertFalse(files._layout_holds(Skewed(self.native_getitem), np))


if __name__ == "__main__":
    unittest.main()
