"""Tensors as the C API wants them: contiguous CPU bytes plus dtype name and shape.

This runs for every module output of every step, so it avoids Python loops over elements
and caches what repeats: dtype names and element sizes per dtype, ctypes shape arrays per
shape, device names per device.  CUDA tensors are copied to the host for now (a device-side
digest would avoid the copy and the synchronisation).
"""

import ctypes

_MAX_CACHED_SHAPES = 4096


class TensorMarshal:
    """Turns a torch.Tensor into the arguments of dlrr_digest / dlrr_val_tensor."""

    def __init__(self, torch):
        self._strided = torch.strided
        self._dtypes = {}
        self._shapes = {}
        self._devices = {}

    def dtype_info(self, dtype):
        """(name bytes without 'torch.', element size) for a torch.dtype."""
        info = self._dtypes.get(dtype)
        if info is None:
            import torch  # already imported: we only run after torch's import
            name = str(dtype).replace("torch.", "").encode()
            size = torch.empty((), dtype=dtype).element_size()
            info = self._dtypes[dtype] = (name, size)
        return info

    def shape_array(self, shape):
        """A cached (c_int64 * ndim) array for a torch.Size (or tuple)."""
        arr = self._shapes.get(shape)
        if arr is None:
            if len(self._shapes) >= _MAX_CACHED_SHAPES:
                self._shapes.clear()
            arr = self._shapes[shape] = (ctypes.c_int64 * len(shape))(*shape)
        return arr

    def device_name(self, device):
        name = self._devices.get(device)
        if name is None:
            name = self._devices[device] = str(device).encode()
        return name

    def host(self, tensor):
        """A detached, contiguous CPU tensor with the same bytes; None when it has none.

        None for layouts without one dense buffer (sparse, mkldnn), quantized tensors,
        meta/fake tensors and anything else whose bytes cannot be read: those are skipped
        (digests) or recorded as opaque (batches), never an error.
        """
        if tensor.layout is not self._strided or tensor.is_quantized:
            return None
        t = tensor.detach()
        try:
            if t.device.type != "cpu":
                t = t.cpu()
            if t.is_complex():
                t = t.resolve_conj().resolve_neg() if hasattr(t, "resolve_conj") else t
            if not t.is_contiguous():
                t = t.contiguous()
            t.data_ptr()
        except (RuntimeError, TypeError, NotImplementedError, AttributeError):
            return None
        return t

    def prepare(self, tensor):
        """(host tensor, dtype bytes, elem size, ndim, shape array, data ptr, nbytes) or None.

        The caller keeps the returned host tensor referenced during the C call: the library
        reads the bytes during the call only.
        """
        t = self.host(tensor)
        if t is None:
            return None
        name, size = self.dtype_info(t.dtype)
        shape = t.shape
        return (t, name, size, len(shape), self.shape_array(shape), t.data_ptr(),
                t.numel() * size)
