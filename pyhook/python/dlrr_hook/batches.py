"""Decodes a recorded batch served by the replayer (replayer/BatchEncoding.h) into Python.

The encoding is data only (tags, lengths, bytes) and is parsed with `struct`: loading a
trace never runs code.  Tensors come back as fresh tensors that own their memory; numpy
arrays and scalars (recorded as tensors on device "numpy" / "numpy scalar", values.py) as
fresh numpy values of the recorded dtype.
"""

import re
import struct

_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_MAX_DEPTH = 64
_NUMPY_DEVICES = ("numpy", "numpy scalar")
_NUMPY_DTYPE_NAME = re.compile(r"[a-z]+[0-9]*\Z")


class BatchFormatError(ValueError):
    pass


class UnrecordedValue(BatchFormatError):
    """The batch holds a value dlrr did not record (an opaque value: its type name only)."""

    def __init__(self, type_name):
        super().__init__("the recorded batch holds a value dlrr did not record (%s)" % type_name)
        self.type_name = type_name


class BatchDecoder:
    def __init__(self, torch):
        self._torch = torch
        self._dtypes = {}
        self._numpy_dtypes = {}

    def _numpy_dtype(self, name):
        dtype = self._numpy_dtypes.get(name)
        if dtype is None:
            import numpy
            # Only plain numeric/bool dtype names (as values.py records them): nothing structured,
            # no object dtype, nothing numpy would have to interpret beyond a name.
            try:
                dtype = numpy.dtype(name) if _NUMPY_DTYPE_NAME.match(name) else None
            except TypeError:
                dtype = None
            if dtype is None or dtype.kind not in "biufc" or dtype.name != name:
                raise BatchFormatError("unknown numpy dtype %r in the trace" % name)
            self._numpy_dtypes[name] = dtype
        return dtype

    def _dtype(self, name):
        entry = self._dtypes.get(name)
        if entry is None:
            # A plain dictionary lookup: getattr() could reach a module-level __getattr__
            # (lazy imports in newer torch) with a name taken from the trace.
            dtype = vars(self._torch).get(name)
            if not isinstance(dtype, self._torch.dtype):
                raise BatchFormatError("unknown tensor dtype %r in the trace" % name)
            entry = (dtype, self._torch.empty((), dtype=dtype).element_size())
            self._dtypes[name] = entry
        return entry

    def decode(self, data):
        view = memoryview(data)
        value, pos = self._value(view, 0, 0)
        if pos != len(view):
            raise BatchFormatError("%d trailing bytes after the batch" % (len(view) - pos))
        return value

    def _str(self, view, pos):
        (n,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            raise BatchFormatError("truncated string")
        return bytes(view[pos:pos + n]).decode("utf-8", "surrogatepass"), pos + n

    def _value(self, view, pos, depth):
        if depth > _MAX_DEPTH:
            raise BatchFormatError("batch nested too deeply")
        if pos >= len(view):
            raise BatchFormatError("truncated batch")
        tag = view[pos]
        pos += 1
        if tag == ord("N"):
            return None, pos
        if tag == ord("B"):
            if pos >= len(view):
                raise BatchFormatError("truncated batch")
            return bool(view[pos]), pos + 1
        if tag == ord("I"):
            return _I64.unpack_from(view, pos)[0], pos + 8
        if tag == ord("F"):
            return _F64.unpack_from(view, pos)[0], pos + 8
        if tag == ord("S"):
            return self._str(view, pos)
        if tag == ord("Y"):
            (n,) = _U32.unpack_from(view, pos)
            pos += 4
            if pos + n > len(view):
                raise BatchFormatError("truncated bytes")
            return bytes(view[pos:pos + n]), pos + n
        if tag == ord("O"):
            name, pos = self._str(view, pos)
            raise UnrecordedValue(name)
        if tag in (ord("L"), ord("T")):
            (n,) = _U32.unpack_from(view, pos)
            pos += 4
            items = []
            for _ in range(n):
                item, pos = self._value(view, pos, depth + 1)
                items.append(item)
            return (items if tag == ord("L") else tuple(items)), pos
        if tag == ord("D"):
            (n,) = _U32.unpack_from(view, pos)
            pos += 4
            out = {}
            for _ in range(n):
                key, pos = self._str(view, pos)
                out[key], pos = self._value(view, pos, depth + 1)
            return out, pos
        if tag == ord("X"):
            return self._tensor(view, pos)
        raise BatchFormatError("unknown tag %r in the batch encoding" % chr(tag))

    def _tensor(self, view, pos):
        torch = self._torch
        dtype_name, pos = self._str(view, pos)
        (ndim,) = _U32.unpack_from(view, pos)
        pos += 4
        if pos + 8 * ndim > len(view):
            raise BatchFormatError("truncated tensor shape")
        shape = [_I64.unpack_from(view, pos + 8 * i)[0] for i in range(ndim)]
        pos += 8 * ndim
        if pos >= len(view):
            raise BatchFormatError("truncated tensor")
        requires_grad = bool(view[pos])
        pos += 1
        device, pos = self._str(view, pos)
        (nbytes,) = _U64.unpack_from(view, pos)
        pos += 8
        if pos + nbytes > len(view):
            raise BatchFormatError("truncated tensor data")
        if device in _NUMPY_DEVICES:
            return self._numpy(view, pos, dtype_name, shape, nbytes, device), pos + nbytes
        dtype, elem_size = self._dtype(dtype_name)
        # The shape must describe exactly the bytes present: nothing is allocated that the
        # trace does not hold, and reshape cannot fail.
        elements = 1
        for d in shape:
            if d < 0:
                raise BatchFormatError("negative dimension %d in a tensor shape" % d)
            elements *= d
        if elements * elem_size != nbytes:
            raise BatchFormatError("tensor of shape %s and dtype %s needs %d bytes, the trace holds %d"
                                   % (shape, dtype_name, elements * elem_size, nbytes))
        if requires_grad and not (dtype.is_floating_point or dtype.is_complex):
            raise BatchFormatError("requires_grad on a tensor of dtype %s" % dtype_name)
        buf = bytearray(view[pos:pos + nbytes])
        if nbytes:
            tensor = torch.frombuffer(buf, dtype=dtype).reshape(shape)
        else:
            tensor = torch.empty(shape, dtype=dtype)
        tensor = tensor.clone()  # owns its memory (frombuffer shares the bytearray's)
        if device and device != "cpu":
            try:
                tensor = tensor.to(device)
            except Exception:
                pass  # replaying a GPU trace on CPU: the report says so (runtime warnings)
        if requires_grad:
            tensor.requires_grad_(True)
        return tensor, pos + nbytes

    def _numpy(self, view, pos, dtype_name, shape, nbytes, device):
        import numpy
        dtype = self._numpy_dtype(dtype_name)
        elements = 1
        for d in shape:
            if d < 0:
                raise BatchFormatError("negative dimension %d in an array shape" % d)
            elements *= d
        if elements * dtype.itemsize != nbytes:
            raise BatchFormatError("array of shape %s and dtype %s needs %d bytes, the trace holds %d"
                                   % (shape, dtype_name, elements * dtype.itemsize, nbytes))
        if device == "numpy scalar" and shape:
            raise BatchFormatError("a numpy scalar with shape %s" % shape)
        array = numpy.frombuffer(bytearray(view[pos:pos + nbytes]), dtype=dtype).reshape(shape)  # owns a copy
        return array[()] if device == "numpy scalar" else array
