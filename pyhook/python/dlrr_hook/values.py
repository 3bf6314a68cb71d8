"""Walk a batch into the depth-first dlrr_val_* builder calls (no pickle, ever).

Supported: None, bool, int (int64), float, str, bytes, tensors, numpy arrays and scalars of
numeric or bool dtype, and list / tuple / dict nesting of those (namedtuples are tuples, any
Mapping is a dict, and replay serves the plain type: first_plain names the first such value;
non-str dict keys are recorded as str(key)).  A numpy value is recorded as a
tensor whose device is "numpy" (array) or "numpy scalar" and whose dtype is numpy's dtype name
(NUMPY_DEVICES; batches.py serves it back as the same numpy type).  Anything else becomes an opaque value carrying its type name:
replay cannot serve it, and the trace says so instead of guessing.

Invariant that keeps the native builder consistent: writing one value emits exactly one
value, whatever happens - a container announces len() children and then writes each child,
and a child that cannot be written is written as opaque.

Native walk: where the `_dlrr_native` extension imports (modules.native_extension: not with
DLRR_NATIVE_HOOKS=0), ValueWriter.write is its ValueWriter (pyhook/ext/ValueWriter.cc),
which makes the same calls from C for exact built-in values and dense contiguous CPU tensors,
calling the library's functions through their addresses, and hands every other value to the
Python write below (write_python), which writes that one value (its children through
self.write, the C walk again).  The calls, their arguments and their order are the same.
"""

import collections.abc
import ctypes
import sys

from . import native
from .modules import native_extension

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
MAX_DEPTH = 64
NUMPY_DEVICES = (b"numpy", b"numpy scalar")
NUMPY_KINDS = "biufc"  # bool, signed, unsigned, float, complex: plain bytes, nothing else


def type_name(value):
    return type_name_of(type(value))


def type_name_of(cls):
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", cls.__name__)
    if module in (None, "builtins"):
        return qualname
    return "%s.%s" % (module, qualname)


# The functions the C walk calls through their addresses (dlrr_val_opaque: always Python's).
NATIVE_FUNCTIONS = ("dlrr_val_list", "dlrr_val_tuple", "dlrr_val_dict", "dlrr_val_key", "dlrr_val_none",
                    "dlrr_val_bool", "dlrr_val_int", "dlrr_val_float", "dlrr_val_str", "dlrr_val_bytes",
                    "dlrr_val_tensor")


class ValueWriter:
    """Emits the dlrr_val_* calls for one value (batches, snapshots)."""

    def __init__(self, lib, marshal, tensor_type, native_ext=False):
        """native_ext: the `_dlrr_native` extension module to walk with, False to look for it
        (modules.native_extension()), None for the Python walk only."""
        self._lib = lib
        self._marshal = marshal
        self._tensor_type = tensor_type
        self._val_list = lib.dlrr_val_list
        self._val_tuple = lib.dlrr_val_tuple
        self._val_dict = lib.dlrr_val_dict
        self._val_key = lib.dlrr_val_key
        self._val_none = lib.dlrr_val_none
        self._val_bool = lib.dlrr_val_bool
        self._val_int = lib.dlrr_val_int
        self._val_float = lib.dlrr_val_float
        self._val_str = lib.dlrr_val_str
        self._val_bytes = lib.dlrr_val_bytes
        self._lib_val_opaque = lib.dlrr_val_opaque
        # The type name of the first opaque value written since the caller last cleared it
        # (recorder.on_batch: a batch replay will not be able to serve; it notes it once).
        self.first_opaque = None
        # Likewise the first container of a type dlrr records as its plain base (a namedtuple,
        # a dict subclass, a UserDict): "Type (a namedtuple) as a plain tuple".
        self.first_plain = None
        self._val_tensor = lib.dlrr_val_tensor
        # Exact-type dispatch; subclasses are resolved once and cached here.
        self._dispatch = {
            type(None): self._none,
            bool: self._bool,
            int: self._int,
            float: self._float,
            str: self._str,
            bytes: self._bytes,
            list: self._list,
            tuple: self._tuple,
            dict: self._dict,
            tensor_type: self._tensor,
        }
        self.native_walker = self._native_walker(native_ext)  # _dlrr_native.ValueWriter, or None
        if self.native_walker is not None:
            self.write = self.native_walker.write  # children of Python-written values too

    def _native_walker(self, ext):
        if ext is False:
            ext = native_extension()
        make = getattr(ext, "ValueWriter", None)
        torch = sys.modules.get("torch")
        if make is None or torch is None:
            return None
        try:
            functions = {name: native.address_of(getattr(self._lib, name)) for name in NATIVE_FUNCTIONS}
            if not all(functions.values()):
                return None
            return make(functions=functions, tensor_type=self._tensor_type, strided=torch.strided,
                        dtypes=self._marshal.dtypes, cpu_device=self._marshal.device_name(torch.device("cpu")),
                        max_depth=MAX_DEPTH, fallback=self.write_python)
        except Exception:  # an extension of another build
            return None

    def write(self, value, depth=0):
        writer = self._dispatch.get(type(value))
        if writer is None:
            writer = self._resolve(type(value))
        if depth > MAX_DEPTH:
            writer = self._too_deep
        writer(value, depth)

    write_python = write  # the Python walk, whatever self.write is (the C walk's fallback)

    def _resolve(self, cls):
        if issubclass(cls, self._tensor_type):
            writer = self._tensor
        elif self._is_numpy(cls):  # before float: numpy.float64 is a float, served back as itself
            writer = self._numpy
        elif issubclass(cls, bool):
            writer = self._bool
        elif issubclass(cls, int):
            writer = self._int
        elif issubclass(cls, float):
            writer = self._float
        elif issubclass(cls, str):
            writer = self._str
        elif issubclass(cls, bytes):
            writer = self._bytes
        elif issubclass(cls, tuple):
            writer = self._as_plain(cls, self._tuple, "a namedtuple" if hasattr(cls, "_fields") else "a tuple subclass",
                                    "tuple")
        elif issubclass(cls, list):
            writer = self._as_plain(cls, self._list, "a list subclass", "list")
        elif issubclass(cls, collections.abc.Mapping):
            writer = self._as_plain(cls, self._dict, "a dict subclass" if issubclass(cls, dict) else "a Mapping",
                                    "dict")
        else:
            writer = self._opaque
        self._dispatch[cls] = writer
        return writer

    def _as_plain(self, cls, writer, kind, plain):
        """A container subclass is written as its plain base: replay serves the base, not `cls`."""
        what = "%s (%s) as a plain %s" % (type_name_of(cls), kind, plain)

        def write(value, depth):
            if self.first_plain is None:
                self.first_plain = what
            writer(value, depth)
        return write

    @staticmethod
    def _is_numpy(cls):
        numpy = sys.modules.get("numpy")  # never imported here: a job without numpy has none
        return numpy is not None and issubclass(cls, (numpy.ndarray, numpy.generic))

    def _numpy(self, value, depth):
        import numpy
        scalar = not isinstance(value, numpy.ndarray)
        dtype = value.dtype
        if dtype.kind not in NUMPY_KINDS or not dtype.isnative or dtype.names is not None:
            self._val_opaque(native.text("%s[%s]" % (type_name(value), dtype.str)))
            return
        arr = numpy.asarray(value)  # a scalar becomes a 0-d array (ascontiguousarray would make it 1-d)
        if not arr.flags.c_contiguous:
            arr = numpy.ascontiguousarray(arr)
        shape = self._marshal.shape_array(arr.shape)
        self._val_tensor(dtype.name.encode(), arr.itemsize, arr.ndim, shape, ctypes.c_void_p(arr.ctypes.data),
                         arr.nbytes, NUMPY_DEVICES[1 if scalar else 0], 0)
        del arr  # kept alive until the library has copied the bytes

    def _val_opaque(self, name):
        if self.first_opaque is None:
            self.first_opaque = name
        self._lib_val_opaque(name)

    def _opaque(self, value, depth):
        self._val_opaque(native.text(type_name(value)))

    def _too_deep(self, value, depth):
        self._val_opaque(native.text(type_name(value) + " (nested too deep)"))

    def _none(self, value, depth):
        self._val_none()

    def _bool(self, value, depth):
        self._val_bool(1 if value else 0)

    def _int(self, value, depth):
        if _INT64_MIN <= value <= _INT64_MAX:
            self._val_int(int(value))
        else:
            self._val_opaque(b"int (beyond int64)")

    def _float(self, value, depth):
        self._val_float(float(value))

    def _str(self, value, depth):
        data = native.text(value)
        self._val_str(data, len(data))

    def _bytes(self, value, depth):
        data = bytes(value)
        self._val_bytes(data, len(data))

    def _list(self, value, depth):
        items = list(value)
        self._val_list(len(items))
        for item in items:
            self.write(item, depth + 1)

    def _tuple(self, value, depth):
        items = tuple(value)
        self._val_tuple(len(items))
        for item in items:
            self.write(item, depth + 1)

    def _dict(self, value, depth):
        items = list(value.items())
        self._val_dict(len(items))
        for key, item in items:
            self._val_key(native.text(key))
            self.write(item, depth + 1)

    def _tensor(self, value, depth):
        prepared = self._marshal.prepare(value)
        if prepared is None:  # no dense bytes to give (sparse, quantized, meta, ...)
            description = "%s, %s, %s" % (value.layout, value.dtype, value.device)
            self._val_opaque(native.text("torch.Tensor[%s]" % description.replace("torch.", "")))
            return
        host, dtype, elem_size, ndim, shape, ptr, nbytes = prepared
        self._val_tensor(dtype, elem_size, ndim, shape, ptr, nbytes,
                         self._marshal.device_name(value.device), 1 if value.requires_grad else 0)
        del host  # kept alive until the library has copied the bytes
