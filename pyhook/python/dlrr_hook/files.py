"""Data-less replay, record side: what the job's main process reads from its files.

The libc hooks record stat results, directory listings, small files read whole and the
ranges read of large ones (see interpose/FileServe.h); this module turns that on when torch
is imported, keeps it off while a DataLoader fetches a batch (replay serves the batch
itself, not the files behind it), tells the library which directories are the Python
installation's or dlrr's own, and reports the byte ranges the job uses of an np.memmap, the
one kind of read no libc hook sees (a memory access).  Only slices (views into the mapping) and single elements are reported; a memmap
read by fancy indexing or through another view (torch.from_numpy of the whole map) is not,
and replay then reads zeros there (docs/replay.md "Files").

Native windows: where the `_dlrr_native` extension imports (not with DLRR_NATIVE_HOOKS=0),
memmap.__getitem__ is its MemmapRanges (pyhook/ext/MemmapRanges.cc): numpy's __getitem__, then
_used's work in C, calling dlrr_file_range through its address with the same arguments; what
it cannot decide exactly it hands to _used.  ~3 us a window in Python (issue 33).
"""

import mmap
import os
import site
import sys
import threading

from . import native
from .modules import native_extension


def _installation_dirs():
    dirs = set()
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        if prefix and prefix != "/usr":  # Debian's: /usr/lib is excluded by the library already
            dirs.add(os.path.join(prefix, "lib"))
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # a virtualenv's old site.py
        pass
    user = getattr(site, "USER_SITE", None)
    if user:
        dirs.add(user)
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the hook's own
    return sorted(d for d in dirs if d and os.path.isabs(d))


def _byte_bounds(numpy):
    """numpy.byte_bounds (NumPy 1.x), numpy.lib.array_utils.byte_bounds (2.x)."""
    fn = getattr(numpy, "byte_bounds", None)
    if fn is None:
        from numpy.lib import array_utils
        fn = array_utils.byte_bounds
    return fn


def _layout_holds(wrapper, numpy):
    """Whether MemmapRanges reads numpy's arrays as numpy describes them (its struct layout is
    NumPy's public PyArrayObject_fields, checked here rather than trusted): contiguous and
    strided probes, 1-D and 2-D, two item sizes, a negative stride."""
    base = numpy.arange(24, dtype=numpy.uint16).reshape(4, 6)
    probes = (base, base[1:3, ::2], base[::-1], numpy.arange(5, dtype=numpy.float64)[1:4], base[2])
    for probe in probes:
        interface = probe.__array_interface__
        strides = interface["strides"] if interface["strides"] is not None else probe.strides
        expected = (interface["data"][0], tuple(probe.shape), tuple(strides), bool(probe.flags.c_contiguous),
                    probe.itemsize)
        if wrapper.read(probe) != expected or expected[3] != (interface["strides"] is None):
            return False
    return True


class FileCapture:
    """Wires the record side of the file layer into the Session (RecordStrategy only)."""

    def __init__(self, recorder, lib):
        self._rec = recorder
        self._lib = lib
        self._last = (None, None)  # the last mapping seen and its facts (one: never keep maps alive)
        # Threads inside a DataLoader fetch, by thread id: the library's own pause count
        # (dlrr_files_pause), mirrored so that a memmap read in a fetch (a dataset's
        # labels[index], per sample) skips _used's ~3 us of work the library would drop.
        self._paused = {}

    def install(self, patcher, dataloader_module):
        lib = self._lib
        lib.dlrr_files_enable()
        for d in _installation_dirs():
            lib.dlrr_files_exclude(d.encode("utf-8", "surrogateescape"))
        # The job's script, read by the interpreter before recording began: its size and
        # mtime in the trace let dlreplay say when it changed since (tools/dlreplay/SourceCheck.cc).
        script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
        if script.endswith(".py"):
            try:
                os.stat(os.path.abspath(script))
            except (OSError, ValueError):
                pass
        pause = lib.dlrr_files_pause
        paused = self._paused
        get_ident = threading.get_ident

        def wrap_next_data(original):
            def _next_data(self):
                thread = get_ident()
                pause(1)
                paused[thread] = paused.get(thread, 0) + 1
                try:
                    return original(self)
                finally:
                    pause(0)
                    depth = paused.pop(thread, 1) - 1
                    if depth:
                        paused[thread] = depth
            return _next_data

        for name in ("_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"):
            cls = getattr(dataloader_module, name, None)
            if cls is not None and "_next_data" in vars(cls):
                patcher.wrap(cls, "_next_data", wrap_next_data)
        numpy = sys.modules.get("numpy")
        if numpy is not None and hasattr(numpy, "memmap"):
            self._patch_memmap(patcher, numpy)

    def _patch_memmap(self, patcher, numpy):
        def wrap_getitem(original):
            wrapper = self.native_getitem(original, numpy)
            return wrapper if wrapper is not None else self.python_getitem(original, numpy)

        patcher.wrap(numpy.memmap, "__getitem__", wrap_getitem)

    def python_getitem(self, original, numpy):
        """memmap.__getitem__ reporting through _used."""
        rec = self._rec
        capture = self
        paused = self._paused
        get_ident = threading.get_ident

        def __getitem__(self, index):
            result = original(self, index)
            if rec.active and not (paused and get_ident() in paused):
                try:
                    capture._used(self, index, result, numpy)
                except Exception:  # never the job's problem
                    pass
            return result
        return __getitem__

    def native_getitem(self, original, numpy, ext=False):
        """The same as a _dlrr_native.MemmapRanges, or None: no extension (ext=False: look for
        it, None: none), no C dlrr_file_range, or numpy's arrays not laid out as it reads them."""
        ext = native_extension() if ext is False else ext
        make = getattr(ext, "MemmapRanges", None)
        address = native.address_of(getattr(self._lib, "dlrr_file_range", None))
        if make is None or address is None:
            return None
        try:
            wrapper = make(file_range_address=address, rec=self._rec, capture=self, paused=self._paused,
                           original=original, numpy=numpy)
            return wrapper if _layout_holds(wrapper, numpy) else None
        except Exception:  # an extension of another build
            return None

    def _facts_of(self, mmap_array, mm, numpy):
        """(path bytes, file offset where the mapping begins, its address, its size) of the
        mapping under `mmap_array`, or None for an anonymous one.  Kept for the last mapping
        seen (one: never keep maps alive): every view of one np.memmap shares its mmap object,
        file name and offset (memmap.__array_finalize__ copies them), so a job slicing one
        token file pays the lookups, the path's encoding and the mapping's address once, not
        per window (issue 33)."""
        last = self._last
        if last[0] is mm:
            return last[1]
        filename = getattr(mmap_array, "filename", None)
        facts = None
        if filename:
            offset = getattr(mmap_array, "offset", 0) or 0
            facts = (os.fsencode(filename), offset - offset % mmap.ALLOCATIONGRANULARITY,
                     numpy.frombuffer(mm, numpy.uint8).ctypes.data, len(mm))
        self._last = (mm, facts)
        return facts

    def _used(self, mmap_array, index, result, numpy):
        mm = getattr(mmap_array, "_mmap", None)
        if mm is None:
            return  # a memmap-typed copy (astype, arithmetic): no mapping behind it
        facts = self._facts_of(mmap_array, mm, numpy)
        if facts is None:
            return
        path, file_start, base, size = facts
        if isinstance(result, numpy.ndarray):
            interface = result.__array_interface__
            if interface["strides"] is None:  # C-contiguous (a window): its bytes in a row
                lo = interface["data"][0]
                hi = lo + result.nbytes
            else:
                lo, hi = _byte_bounds(numpy)(result)
        elif isinstance(index, (int, numpy.integer)) and mmap_array.ndim == 1:
            lo = mmap_array.ctypes.data + int(index) % max(len(mmap_array), 1) * mmap_array.strides[0]
            hi = lo + mmap_array.itemsize
        else:
            return
        if lo < base or hi > base + size or hi <= lo:
            return  # a copy (fancy indexing), not bytes of the mapping
        self._lib.dlrr_file_range(path, file_start + (lo - base), lo, hi - lo)
