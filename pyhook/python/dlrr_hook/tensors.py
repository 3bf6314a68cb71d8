"""Tensors as the C API wants them: contiguous CPU bytes plus dtype name and shape.

This runs for every module output of every step, so it avoids Python loops over elements
and caches what repeats: dtype names and element sizes per dtype, ctypes shape arrays per
shape, device names per device.  CUDA tensors passed here are copied to the host (batches,
capture `full`); their digests are normally computed on the device instead (gpu.py).
"""

import ctypes

_MAX_CACHED_SHAPES = 4096


class TensorMarshal:
    """Turns a torch.Tensor into the arguments of dlrr_digest / dlrr_val_tensor."""

    def __init__(self, torch):
        self._strided = torch.strided
        self.dtypes = {}  # dtype -> dtype_info(); read by _dlrr_native (ValueWriter, ModuleHooks, TensorListDigest)
        self._shapes = {}
        self._devices = {}

    def dtype_info(self, dtype):
        """(name bytes without 'torch.', element size, needs the slow path) for a dtype."""
        info = self.dtypes.get(dtype)
        if info is None:
            import torch  # already imported: we only run after torch's import
            name = str(dtype).replace("torch.", "").encode()
            probe = torch.empty((), dtype=dtype)
            special = probe.is_complex() or probe.is_quantized
            info = self.dtypes[dtype] = (name, probe.element_size(), special)
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

    def prepare(self, tensor):
        """(host tensor, dtype bytes, elem size, ndim, shape array, data ptr, nbytes) or None.

        The host tensor is a contiguous CPU tensor with the same bytes (the tensor itself
        when it already is one); the caller keeps it referenced during the C call, since
        the library reads the bytes during the call only.  None for tensors without one
        dense buffer (sparse, mkldnn), quantized ones, meta/fake tensors and anything else
        whose bytes cannot be read: those are skipped (digests) or recorded as opaque
        (batches), never an error.  This is the hot path: one dtype lookup, three cheap
        attribute checks, no detach() unless a copy is needed.
        """
        info = self.dtypes.get(tensor.dtype)
        if info is None:
            info = self.dtype_info(tensor.dtype)
        try:
            if tensor.layout is not self._strided or info[2]:
                return self._prepare_special(tensor, info)
            t = tensor
            if not t.is_cpu:
                t = t.detach().cpu()
            if not t.is_contiguous():
                t = t.detach().contiguous()
            shape = t.shape
            arr = self._shapes.get(shape)
            if arr is None:
                arr = self.shape_array(shape)
            size = info[1]
            return t, info[0], size, len(shape), arr, t.data_ptr(), t.numel() * size
        except (RuntimeError, TypeError, NotImplementedError, AttributeError, ValueError):
            plain = self._functorch_unwrapped(tensor)
            return None if plain is None else self.prepare(plain)

    @staticmethod
    def _functorch_unwrapped(tensor):
        """The plain tensor under a torch.func transform's wrappers (a module output computed
        inside torch.func.grad is a GradTrackingTensor, whose bytes cannot be read), or None:
        not wrapped, or batched by vmap (one value per sample: left alone)."""
        import torch  # already imported: we only run after torch's import
        functorch = getattr(torch._C, "_functorch", None)
        if functorch is None or not functorch.is_functorch_wrapped_tensor(tensor):
            return None
        while functorch.is_functorch_wrapped_tensor(tensor):
            if functorch.is_batchedtensor(tensor):
                return None
            tensor = functorch.get_unwrapped(tensor)
        return tensor

    def _prepare_special(self, tensor, info):
        if tensor.layout is not self._strided or tensor.is_quantized:
            return None
        t = tensor.detach()
        if not t.is_cpu:
            t = t.cpu()
        t = t.resolve_conj().resolve_neg() if hasattr(t, "resolve_conj") else t
        t = t.contiguous()
        shape = t.shape
        return (t, info[0], info[1], len(shape), self.shape_array(shape), t.data_ptr(),
                t.numel() * info[1])
