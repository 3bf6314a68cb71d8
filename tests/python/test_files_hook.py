"""The hook's side of data-less replay (dlrr_hook/files.py): file recording turned on, paused
while a DataLoader fetches a batch, and the byte ranges a job uses of an np.memmap."""
import os
import shutil
import sys
import tempfile
import unittest

import numpy as np
from torch.utils.data import DataLoader

from support import IndexDataset, RecorderTestCase  # first: puts the hook on sys.path
from test_native_hooks import EXT, NAME, load_extension


class FileCaptureTest(RecorderTestCase):

    def setUp(self):
        super().setUp()
        self.tmp = tempfile.mkdtemp(prefix="dlrr-files-")
        self.path = os.path.join(self.tmp, "tokens.bin")
        np.arange(1000, dtype=np.uint16).tofile(self.path)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        super().tearDown()

    def ranges(self):
        return [c[1:] for c in self.lib.calls if c[0] == "file_range"]

    def test_enabled_with_the_installation_excluded(self):
        self.assertTrue(self.lib.files_enabled)
        import dlrr_hook
        hook_dir = os.path.dirname(os.path.dirname(os.path.abspath(dlrr_hook.__file__)))
        self.assertIn(hook_dir, self.lib.files_excluded)

    def test_fetching_a_batch_pauses_file_recording(self):
        for _ in DataLoader(IndexDataset(6), batch_size=2):
            self.assertEqual(self.lib.files_paused, 0)  # resumed once the batch is out
        self.assertGreaterEqual(self.lib.files_pauses, 3)

    def test_memmap_slices_report_their_bytes_and_offset(self):
        data = np.memmap(self.path, dtype=np.uint16, mode="r")
        window = data[100:108]
        self.assertEqual(self.ranges(), [(self.path, 200, np.arange(100, 108, dtype=np.uint16).tobytes())])
        self.assertEqual(window.tolist(), list(range(100, 108)))  # the job's result unchanged

    def test_an_element_and_an_offset_map(self):
        data = np.memmap(self.path, dtype=np.uint16, mode="r", offset=10, shape=(50,))
        self.assertEqual(int(data[3]), 8)
        self.assertEqual(self.ranges(), [(self.path, 16, np.uint16(8).tobytes())])

    def test_two_maps_in_turn_and_a_strided_view_report_their_own_bytes(self):
        # The facts of the last mapping are kept (issue 33): alternating maps of two files, one
        # at an offset, must each report their own path and offsets, and a strided slice (not
        # one contiguous run) the span of its bytes.
        other = os.path.join(self.tmp, "other.bin")
        np.arange(4000, dtype=np.uint16).tofile(other)
        a = np.memmap(self.path, dtype=np.uint16, mode="r")
        b = np.memmap(other, dtype=np.uint16, mode="r", offset=4096 + 6, shape=(100,))
        a[4:6], b[0:2], a[8:10], b[1:2]
        self.assertEqual(self.ranges(), [
            (self.path, 8, np.arange(4, 6, dtype=np.uint16).tobytes()),
            (other, 4102, np.arange(2051, 2053, dtype=np.uint16).tobytes()),
            (self.path, 16, np.arange(8, 10, dtype=np.uint16).tobytes()),
            (other, 4104, np.uint16(2052).tobytes())])
        del self.lib.calls[:]
        strided = a[10:16:2]
        self.assertEqual(strided.tolist(), [10, 12, 14])
        self.assertEqual(self.ranges(), [(self.path, 20, np.arange(10, 15, dtype=np.uint16).tobytes())])

    def test_a_memmap_made_per_batch_is_not_kept_alive(self):
        import weakref
        refs = []
        for start in (10, 20, 30):  # nanoGPT's get_batch(): a new memmap every call
            data = np.memmap(self.path, dtype=np.uint16, mode="r")
            data[start:start + 2]
            refs.append(weakref.ref(data._mmap))  # the mapping itself
            del data
        self.assertEqual([r[1] for r in self.ranges()], [20, 40, 60])
        self.assertEqual([r() for r in refs[:2]], [None, None])

    def test_memmap_reads_inside_a_fetch_are_not_reported(self):
        # The library drops ranges while the thread is paused (in a fetch): the hook skips
        # the work for them, and reports the same reads again once the fetch is over.
        data = np.memmap(self.path, dtype=np.uint16, mode="r")

        class Labels(IndexDataset):
            def __getitem__(self, index):
                return int(data[index])

        loader = DataLoader(Labels(6), batch_size=2)
        self.assertEqual([b.tolist() for b in loader], [[0, 1], [2, 3], [4, 5]])
        self.assertEqual(self.ranges(), [])
        self.assertEqual(int(data[7]), 7)
        self.assertEqual(self.ranges(), [(self.path, 14, np.uint16(7).tobytes())])

    def test_a_failed_fetch_resumes_reporting(self):
        data = np.memmap(self.path, dtype=np.uint16, mode="r")

        class Broken(IndexDataset):
            def __getitem__(self, index):
                raise KeyError(index)

        with self.assertRaises(KeyError):
            next(iter(DataLoader(Broken(2), batch_size=2)))
        self.assertEqual(self.lib.files_paused, 0)
        self.assertEqual(int(data[3]), 3)
        self.assertEqual(self.ranges(), [(self.path, 6, np.uint16(3).tobytes())])

    def test_fancy_indexing_copies_are_not_reported_as_file_bytes(self):
        data = np.memmap(self.path, dtype=np.uint16, mode="r")
        self.assertEqual(data[[1, 5]].tolist(), [1, 5])
        self.assertEqual(self.ranges(), [])


@unittest.skipUnless(EXT, "the native extension was not built for this interpreter (DLRR_TEST_NATIVE_EXT unset)")
class NativeFileCaptureTest(FileCaptureTest):
    """The same, with memmap.__getitem__ the extension's MemmapRanges."""

    def setUp(self):
        sys.modules[NAME] = load_extension()
        self.addCleanup(sys.modules.pop, NAME, None)
        super().setUp()
        self.assertEqual(type(np.memmap.__getitem__).__name__, "MemmapRanges")

    def tearDown(self):
        self.assertEqual(getattr(np.memmap.__getitem__, "python_path", 0), 0)  # all decided in C
        super().tearDown()

    def test_turned_off_by_the_environment(self):
        import dlrr_hook
        dlrr_hook.uninstall()
        os.environ["DLRR_NATIVE_HOOKS"] = "0"
        try:
            self.rec = dlrr_hook.install(lib=self.lib)
            self.assertEqual(type(np.memmap.__getitem__).__name__, "function")
            data = np.memmap(self.path, dtype=np.uint16, mode="r")
            data[100:102]
            self.assertEqual(self.ranges(), [(self.path, 200, np.arange(100, 102, dtype=np.uint16).tobytes())])
        finally:
            del os.environ["DLRR_NATIVE_HOOKS"]


if __name__ == "__main__":
    unittest.main()
