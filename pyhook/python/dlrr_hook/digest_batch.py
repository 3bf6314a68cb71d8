"""Many digests of one kind in one ctypes crossing (dlrr_digest_many).

A step's gradients and parameters are digested together at one point (after backward, after
the optimizer step).  One dlrr_digest call per tensor cost ~2-3 us of argument conversion
and a Python frame each; here each tensor adds one struct.pack_into of a dlrr_digest_item_t
(~0.7 us) into a reused buffer, and the library is called once.

The item holds char pointers: those of the path and dtype bytes objects are their buffers
(CPython's bytes keep a trailing NUL after ob_sval), found at id(b) + BYTES_DATA_OFFSET;
the offset is checked once against ctypes' own view of a bytes object, and when it does
not hold (another interpreter) `usable` is False and the caller digests one by one.  Every
object whose address is packed is kept referenced until the call returns.
"""

import ctypes
import struct

from . import native

# path, dtype, shape, data, nbytes, call_index, output, ndim, keep: struct dlrr_digest_item.
_ITEM = struct.Struct("@PPPPQIIii")
BYTES_DATA_OFFSET = bytes.__basicsize__ - 1


def _offset_holds():
    probe = b"dlrr-probe"
    try:
        return (_ITEM.size == ctypes.sizeof(native.DigestItemT)
                and ctypes.string_at(id(probe) + BYTES_DATA_OFFSET, len(probe) + 1) == probe + b"\0")
    except Exception:
        return False


class DigestBatch:
    """Collects (path, call_index, prepared tensor) items and digests them in one call."""

    usable = _offset_holds()

    def __init__(self, lib):
        self._many = lib.dlrr_digest_many
        self._buf = bytearray(_ITEM.size * 64)
        self._keep = []  # what the packed addresses point into, until the call returns
        self._n = 0

    def add(self, path, call_index, output, prepared, keep):
        """prepared: TensorMarshal.prepare's tuple (host tensor, dtype, size, ndim, shape, ptr, nbytes)."""
        offset = self._n * _ITEM.size
        if offset + _ITEM.size > len(self._buf):
            self._buf.extend(bytes(len(self._buf)))
        _ITEM.pack_into(self._buf, offset, id(path) + BYTES_DATA_OFFSET, id(prepared[1]) + BYTES_DATA_OFFSET,
                        ctypes.addressof(prepared[4]), prepared[5], prepared[6], call_index, output,
                        prepared[3], keep)
        self._keep.append((path, prepared))
        self._n += 1

    def flush(self, kind):
        """One dlrr_digest_many for the items added since the last flush."""
        n = self._n
        if not n:
            return
        try:
            buf = (ctypes.c_char * len(self._buf)).from_buffer(self._buf)
            self._many(kind, n, ctypes.cast(buf, ctypes.POINTER(native.DigestItemT)))
            del buf
        finally:
            self._n = 0
            self._keep.clear()
