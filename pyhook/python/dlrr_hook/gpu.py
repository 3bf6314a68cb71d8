"""The hook's GPU side: digests of CUDA tensors computed on the device, the failure ring of
device tensors, GPU out-of-memory details, CUDA facts for the runtime info.

Kernel launches and copies are captured natively (CUPTI, docs/gpu.md); this module handles
what only Python sees.

Device digest (TensorDigest.Algorithm.deviceSum).  The host digest (XXH3-64) needs the bytes
on the host: a copy and a synchronisation per tensor, which stops the CPU from running ahead
of the GPU.  Instead, for a CUDA tensor, a few tensor ops on its own device reduce it to six
int64 scalars, and one transfer per step brings all the step's scalars to the host:

  words   the tensor's contiguous bytes, zero-padded to a multiple of 4, as little-endian
          signed 32-bit words x_i, i = 0 .. n-1, widened to 64 bits
  w_i     (i * K1) | 1                          (odd, mod 2^64)
  s1      sum_i x_i * w_i                       (mod 2^64)
  s2      sum_i x_i * x_i * w_i                 (mod 2^64)
  hash    splitmix64(s1 ^ rotl(s2, 31) ^ (n * K4) ^ nbytes)
  floats  NaN count, Inf count, min and max over finite values (NaN when there are none)
  ints    min and max (NaN when empty); other dtypes: NaN

Integer sums modulo 2^64 do not depend on the order of additions, so the same bytes give the
same digest on any device (the unit tests run it on CPU tensors).  Any single-word change
changes s1 (its weight is odd); it is a checksum, not a cryptographic hash.  Its cost is about
10 (integers) to 23 (floats) small kernels per tensor, asynchronous; the weights w_i are
cached per tensor size (64 MiB at most).

Failure ring.  CPU tensors are copied into the native ring of the last K steps at once.  A
device tensor is only referenced, for the current step, up to a byte budget
(DLRR_GPU_RING_BYTES, default 256 MiB; a reference keeps the memory alive, so the budget
bounds what the hook can add to the job's peak GPU memory); when the step turns out to hold a
non-finite value, the referenced tensors are copied to the host then, and only then.  Earlier
steps' device tensors are not kept, and a tensor modified in place after its digest is copied
as it is at the failure.
"""

import collections
import ctypes
import math
import os
import struct

from . import native

_MASK32 = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
# Constants as signed int64 (torch has no uint64 arithmetic).
_K1 = 0x9E3779B97F4A7C15 - (1 << 64)
_K4 = 0x27D4EB2F165667C5

_FLOATS = ("float32", "float64", "float16", "bfloat16")
_INTS = ("int64", "int32", "int16", "int8", "uint8", "bool")

DEFAULT_RING_BYTES = 256 << 20
MAX_PENDING = 4096  # deferred digests held before a flush that is not a step end


def _splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _MASK64


class DeviceDigester:
    """Computes device digests with torch ops on the tensor's own device (about 10 for an
    integer tensor, 23 for a floating one; position weights are cached per size)."""

    def __init__(self, torch, weight_cache_bytes=64 << 20):
        self.torch = torch
        self._names = {}
        self._weights = collections.OrderedDict()  # (device, n) -> int64 weights, LRU
        self._weight_bytes = 0
        self._weight_budget = weight_cache_bytes
        self._zeros = {}  # (device, n) -> int64 zeros

    def dtype_name(self, dtype):
        name = self._names.get(dtype)
        if name is None:
            name = self._names[dtype] = str(dtype).replace("torch.", "")
        return name

    def weights(self, n, device):
        """(i * K1) | 1 for i < n, int64 on `device` (odd: every word counts)."""
        key = (device, n)
        w = self._weights.get(key)
        if w is not None:
            self._weights.move_to_end(key)
            return w
        torch = self.torch
        w = torch.arange(n, dtype=torch.int64, device=device).mul_(_K1).bitwise_or_(1)
        size = 8 * n
        if size <= self._weight_budget // 4:
            while self._weight_bytes + size > self._weight_budget and self._weights:
                _, old = self._weights.popitem(last=False)
                self._weight_bytes -= 8 * old.numel()
            self._weights[key] = w
            self._weight_bytes += size
        return w

    def _zero(self, n, device):
        z = self._zeros.get((device, n))
        if z is None:
            z = self._zeros[(device, n)] = self.torch.zeros(n, dtype=self.torch.int64, device=device)
        return z

    def _dense(self, tensor):
        """(contiguous tensor, dtype name, numel, nbytes, device): what either digest reads."""
        t = tensor.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        if t.is_complex():  # its real and imaginary parts: a NaN or Inf in either is counted, as on the host
            t = self.torch.view_as_real(t.resolve_conj())
        numel = t.numel()
        return t, self.dtype_name(t.dtype), numel, numel * t.element_size(), t.device

    def launch(self, tensor):
        """Enqueues the digest kernels; returns (int64[6] tensor on the device, numel, nbytes, dtype name).

        No synchronisation.  Raises for tensors without one dense buffer (the caller skips them).
        """
        torch = self.torch
        t, name, numel, nbytes, device = self._dense(tensor)
        if not numel:
            return self._zero(6, device), 0, 0, name
        if t.dim() and (t.shape[-1] * t.element_size()) % 4 == 0:
            words = t.view(torch.int32).reshape(-1)
        else:  # sizes that do not fill whole 32-bit words: zero-padded bytes
            raw = t.reshape(-1).view(torch.uint8)
            pad = (-nbytes) % 4
            if pad:
                raw = torch.cat([raw, torch.zeros(pad, dtype=torch.uint8, device=device)])
            words = raw.view(torch.int32)
        x = words.to(torch.int64)
        y = x * self.weights(x.numel(), device)
        sums = torch.stack([y.sum(), y.mul_(x).sum()])
        if name in _FLOATS:
            counts = torch.stack([torch.isnan(t).sum(), torch.isinf(t).sum()])
            lo = torch.nan_to_num(t, nan=math.inf, posinf=math.inf, neginf=math.inf).min()
            hi = torch.nan_to_num(t, nan=-math.inf, posinf=-math.inf, neginf=-math.inf).max()
            bounds = torch.stack([lo, hi]).to(torch.float64).view(torch.int64)
            return torch.cat([sums, counts, bounds]), numel, nbytes, name
        if name in _INTS:
            v = t.view(torch.uint8) if name == "bool" else t
            bounds = torch.stack([v.min(), v.max()]).to(torch.float64).view(torch.int64)
            return torch.cat([sums, self._zero(2, device), bounds]), numel, nbytes, name
        return torch.cat([sums, self._zero(4, device)]), numel, nbytes, name

    @staticmethod
    def finish(values, numel, nbytes, name):
        """(hash, nan, inf, min, max) from the six int64 values of launch()."""
        s1, s2, nan, inf, lo, hi = [v & _MASK64 for v in values]
        n = (nbytes + 3) // 4
        h = _splitmix64(s1 ^ _rotl(s2, 31) ^ ((n * _K4) & _MASK64) ^ nbytes)
        to_float = lambda bits: struct.unpack("<d", struct.pack("<Q", bits))[0]  # noqa: E731
        if name in _FLOATS:
            if not numel or nan + inf == numel:
                return h, nan, inf, math.nan, math.nan
            return h, nan, inf, to_float(lo), to_float(hi)
        if name in _INTS and numel:
            return h, 0, 0, to_float(lo), to_float(hi)
        return h, 0, 0, math.nan, math.nan

    def digest(self, tensor):
        """The digest now (one transfer of six scalars to the host)."""
        stats, numel, nbytes, name = self.launch(tensor)
        return self.finish(self.fetch([stats])[0], numel, nbytes, name)

    def fetch(self, stats):
        """The six values of each of launch()'s results, in order: one transfer per device."""
        torch = self.torch
        by_device = {}
        for i, s in enumerate(stats):
            by_device.setdefault(s.device, []).append(i)
        values = [None] * len(stats)
        for indices in by_device.values():
            rows = torch.stack([stats[i] for i in indices]).cpu().tolist()
            for i, row in zip(indices, rows):
                values[i] = row
        return values

    def recycle(self):
        """The results fetched so far are no longer needed (nothing to do here)."""


# Element kinds of the digest kernel (interpose/cuda/DeviceDigestKernel.h's DigestElement).
_FUSED_ELEMENTS = {"float32": 1, "float64": 2, "float16": 3, "bfloat16": 4, "int64": 5, "int32": 6, "int16": 7,
                   "int8": 8, "uint8": 9, "bool": 9}
_SIGN64 = 1 << 63


def _from_ordered_key(key):
    """The float64 bits of an order-preserving key (DigestKernel.cu's orderedKey), as a signed int."""
    key &= _MASK64
    bits = key ^ _SIGN64 if key & _SIGN64 else ~key & _MASK64
    return bits - (1 << 64) if bits & _SIGN64 else bits


class FusedDigester(DeviceDigester):
    """The same digest in one kernel a tensor (libdlrr's dlrr_digest_kernel_*, DigestKernel.cu)
    instead of 10-23 torch ops: about one launch's CPU time per tensor.

    Each digest writes one row of a per-device slab of int64[capacity, 6] preset to
    0,0,0,0,~0,0; launch() returns (slab, row); fetch() brings each slab's used rows to the
    host in one transfer and turns the min/max keys back into float64 bits, so finish() is
    shared.  recycle() presets the used rows again (one copy), after the values were fetched;
    a full slab is preset whole before its first row is reused.  Everything is enqueued on the
    device's current stream, as the torch ops are.
    """

    why = None  # why the last load() found no kernel

    def __init__(self, torch, launch_fn, stream_fn, capacity=MAX_PENDING):
        super().__init__(torch)
        self._launch_fn = launch_fn      # (data_ptr, nbytes, numel, element, out_ptr, stream) -> 0 or error
        self._stream_fn = stream_fn      # device -> raw stream handle (int)
        self._capacity = capacity
        self._slabs = {}                 # device -> [slab, preset, next row]

    @classmethod
    def load(cls, torch, lib=None):
        """A FusedDigester over libdlrr's kernel (`lib`, bound by native.bind), or None (with why in
        FusedDigester.why): no CUDA driver in this process, dlrr built without nvcc,
        DLRR_GPU_DIGEST=ops, or no libdlrr."""
        cls.why = None
        if os.environ.get("DLRR_GPU_DIGEST", "") == "ops":
            cls.why = "DLRR_GPU_DIGEST=ops"
            return None
        if lib is None or not hasattr(lib, "dlrr_digest_kernel_open"):
            cls.why = "libdlrr is not loaded"
            return None
        why = ctypes.c_char_p()
        handle = lib.dlrr_digest_kernel_open(ctypes.byref(why))
        if not handle:
            cls.why = (why.value or b"").decode("utf-8", "replace") or "unavailable"
            return None
        launch = lib.dlrr_digest_kernel_launch

        def launch_fn(data, nbytes, numel, element, out, stream):
            return launch(handle, data, nbytes, numel, element, out, stream)

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            stream_fn = raw  # device index -> cudaStream_t as an int, without a Stream object
        else:
            def stream_fn(index):
                return torch.cuda.current_stream(index).cuda_stream
        digester = cls(torch, launch_fn, stream_fn)
        digester._close = (lib.dlrr_digest_kernel_close, handle)
        return digester

    def _slab(self, device):
        s = self._slabs.get(device)
        if s is None:
            torch = self.torch
            preset = torch.zeros(self._capacity, 6, dtype=torch.int64, device=device)
            preset[:, 4] = -1  # ~0: the minimum's key starts above every value's
            s = self._slabs[device] = [preset.clone(), preset, 0]
        return s

    def launch(self, tensor):
        torch = self.torch
        t, name, numel, nbytes, device = self._dense(tensor)
        s = self._slab(device)
        row = s[2]
        if row == self._capacity:  # every row was fetched (a flush comes at MAX_PENDING): preset anew
            s[0].copy_(s[1])
            row = 0
        s[2] = row + 1
        if numel:
            out = s[0].data_ptr() + row * 48
            element = _FUSED_ELEMENTS.get(name, 0)
            index = device.index
            if device.type == "cuda" and index != torch.cuda.current_device():
                with torch.cuda.device(index):  # the kernel runs in the tensor's own context
                    rc = self._launch_fn(t.data_ptr(), nbytes, numel, element, out, self._stream_fn(index))
            else:
                rc = self._launch_fn(t.data_ptr(), nbytes, numel, element, out, self._stream_fn(index))
            if rc:
                raise RuntimeError("the device digest kernel failed to launch (CUDA error %d)" % rc)
        return (s[0], row), numel, nbytes, name

    def fetch(self, stats):
        host = {}
        for slab, row in stats:
            key = slab.data_ptr()
            if key not in host or host[key][1] <= row:
                host[key] = (slab, row + 1)
        rows = {key: slab[:n].cpu().tolist() for key, (slab, n) in host.items()}  # one transfer a slab
        values = []
        for slab, row in stats:
            v = list(rows[slab.data_ptr()][row])
            v[4], v[5] = _from_ordered_key(v[4]), _from_ordered_key(v[5])
            values.append(v)
        return values

    def recycle(self):
        for s in self._slabs.values():
            if s[2]:
                s[0][:s[2]].copy_(s[1][:s[2]])
                s[2] = 0


def make_digester(torch, lib):
    """The fused kernel where this process can run it, else the torch ops (same digest)."""
    fused = FusedDigester.load(torch, lib)
    return fused if fused is not None else DeviceDigester(torch)


def is_cuda(tensor):
    return tensor.is_cuda


class GpuDigests:
    """Digests of CUDA tensors for the recorder (deferred) or the replayer (immediate).

    Record mode defers: each digest's kernels are enqueued at once and the step's scalars
    come to the host in one transfer at the step's end (flush), in the order the digests were
    taken, so the native side sees them in the same order as CPU digests and declares the
    first non-finite one the failure.  Replay checks each digest at once, to stop right at
    the first divergence.
    """

    applies = staticmethod(is_cuda)  # tests route CPU tensors through here

    def __init__(self, lib, torch, marshal, deferred, keep_ring, ring_bytes=None):
        self.lib = lib
        self.torch = torch
        self.marshal = marshal
        self.deferred = deferred
        self.keep_ring = keep_ring
        if ring_bytes is None:
            try:
                ring_bytes = int(os.environ.get("DLRR_GPU_RING_BYTES", DEFAULT_RING_BYTES))
            except ValueError:
                ring_bytes = DEFAULT_RING_BYTES
        self.ring_bytes = ring_bytes
        self._digester = None  # chosen at the first digest: CUDA is initialised by then
        self._fn = lib.dlrr_digest_values
        self._pause = lib.dlrr_gpu_pause
        self._out = native.DigestT()
        self._out_ref = ctypes.byref(self._out)
        self._pending = []   # (kind, path, call, output, tensor, stats, numel, nbytes, name)
        self._held = []      # (kind, path, call, output, tensor): the step's failure ring
        self._held_bytes = 0
        self._loss = None    # the step's last scalar CUDA loss (a device tensor)
        self.digests = 0
        self.lost = 0        # deferred digests lost to a device error
        self.last_error = None

    # -- recording
    def digest(self, kind, path, call_index, output, tensor, keep):
        """Returns the native result in replay (0, 1, 2, -1), None when deferred or skipped."""
        # Our kernels are not the job's: kept out of the captured launch sequence.
        self._pause(1)
        try:
            d = self.digester
            stats, numel, nbytes, name = d.launch(tensor)
            if not self.deferred:
                values = d.finish(d.fetch([stats])[0], numel, nbytes, name)
        except (RuntimeError, TypeError, NotImplementedError, ValueError):
            return None  # no dense buffer (sparse, quantized, meta): skipped, as on the CPU path
        finally:
            self._pause(0)
        self.digests += 1
        if not self.deferred:
            return self._send(kind, path, call_index, output, tensor, values)
        self._pending.append((kind, path, call_index, output, tensor.shape, tensor.dtype, stats, numel, nbytes,
                              name))
        if len(self._pending) >= MAX_PENDING:  # a long stretch without a step end (evaluation)
            self.flush(step_end=False)
        if keep and self.keep_ring:
            size = nbytes
            if self._held_bytes + size <= self.ring_bytes:
                self._held.append((kind, path, call_index, output, tensor.detach()))
                self._held_bytes += size
        return None

    @property
    def digester(self):
        """The fused kernel where this process can run it, else the torch ops; chosen once, at the
        first device digest (torch imports long before the job initialises CUDA)."""
        if self._digester is None:
            self._digester = make_digester(self.torch, self.lib)
        return self._digester

    def note_loss(self, tensor):
        if tensor.numel() == 1:
            self._loss = tensor.detach()

    def _send(self, kind, path, call_index, output, tensor_or_meta, values):
        if isinstance(tensor_or_meta, tuple):
            shape, dtype = tensor_or_meta
        else:
            shape, dtype = tensor_or_meta.shape, tensor_or_meta.dtype
        out = self._out
        out.hash, out.nan_count, out.inf_count, out.min, out.max = values
        dtype_bytes = self.marshal.dtype_info(dtype)[0]
        return self._fn(kind, path, call_index, output, dtype_bytes, len(shape), self.marshal.shape_array(shape),
                        native.DIGEST_DEVICE_SUM, self._out_ref)

    def flush(self, step_end=True):
        """Sends the deferred digests; at a step end, also returns the step's CUDA loss (float or
        None) and releases the step's failure-ring references."""
        if not self._pending and self._loss is None and not self._held:
            return None  # a CPU job's every step: no pause/resume crossings for nothing
        self._pause(1)
        try:
            return self._flush(step_end)
        finally:
            self._pause(0)

    def _flush(self, step_end):
        pending, self._pending = self._pending, []
        loss = None
        if step_end:
            loss, self._loss = self._loss, None
        held = self._held
        if step_end:
            self._held, self._held_bytes = [], 0
        if not pending and loss is None:
            return None
        torch = self.torch
        loss_value = None
        try:
            values = self.digester.fetch([p[6] for p in pending])  # one transfer per device
            self.digester.recycle()
            if loss is not None:
                loss_value = float(loss.reshape(()).to(torch.float64).cpu().item())
        except RuntimeError as exc:  # the device failed (a sticky CUDA error): the step's digests are lost
            self.lost += len(pending)
            self.last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return None
        results = []
        for p, row in zip(pending, values):
            results.append(self.digester.finish(row, p[7], p[8], p[9]))
        if held and any(r[1] or r[2] for r in results):
            self._copy_ring(held)  # before the failure is declared: the native ring flushes then
            self._held, self._held_bytes = [], 0
        for p, r in zip(pending, results):
            self._send(p[0], p[1], p[2], p[3], (p[4], p[5]), r)
        return loss_value

    def _copy_ring(self, held):
        keep = self.lib.dlrr_keep_tensor
        for kind, path, call_index, output, tensor in held:
            try:
                host = tensor.contiguous().cpu()
                info = self.marshal.dtype_info(host.dtype)
                keep(kind, path, call_index, output, info[0], host.dim(), self.marshal.shape_array(host.shape),
                     host.data_ptr(), host.numel() * info[1])
            except (RuntimeError, TypeError, ValueError):
                continue

    def discard(self):
        """Forget the step's pending work (capture turned off)."""
        self._pending, self._held, self._held_bytes, self._loss = [], [], 0, None


# ---------------------------------------------------------------------- out of memory
def is_out_of_memory(torch, exc):
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc)


def memory_figures(torch):
    """[(device, {figure: bytes})] of the CUDA caching allocator, for every device."""
    cuda = torch.cuda
    out = []
    if not cuda.is_initialized():
        return out
    for d in range(cuda.device_count()):
        figures = {}
        for key, fn in (("allocated", cuda.memory_allocated), ("max_allocated", cuda.max_memory_allocated),
                        ("reserved", cuda.memory_reserved), ("max_reserved", cuda.max_memory_reserved)):
            try:
                figures[key] = int(fn(d))
            except Exception:  # a broken device must not hide the failure
                pass
        try:
            figures["total"] = int(cuda.get_device_properties(d).total_memory)
        except Exception:
            pass
        out.append((d, figures))
    return out


def _mib(n):
    return "%.1f MiB" % (n / 1048576.0)


def out_of_memory_detail(torch, exc):
    """'' unless exc is a CUDA out-of-memory error; else the allocator's figures, one line."""
    if torch is None or not is_out_of_memory(torch, exc):
        return "", []
    parts, items = [], []
    for d, f in memory_figures(torch):
        for key, value in f.items():
            items.append(("cuda.oom.device.%d.%s" % (d, key), str(value)))
        shown = ", ".join("%s %s" % (k.replace("_", " "), _mib(v)) for k, v in f.items())
        parts.append("cuda:%d: %s" % (d, shown))
    return "GPU out of memory; " + ("; ".join(parts) if parts else "no allocator figures"), items


# ---------------------------------------------------------------------- CUDA facts
def _driver_api_version():
    """cuDriverGetVersion of the already loaded libcuda (e.g. '13.0'), or None."""
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        v = ctypes.c_int(0)
        try:
            if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value:
                return "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
        except (AttributeError, OSError):
            return None
    return None


def _driver_version():
    """The NVIDIA driver's version string (NVML, e.g. '580.65.06'), or None."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            return None
        buf = ctypes.create_string_buffer(96)
        ok = lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf))) == 0
        lib.nvmlShutdown()
        return buf.value.decode("ascii", "replace") if ok else None
    except (AttributeError, OSError):
        return None


def _runtime_version():
    """cudaRuntimeGetVersion of the loaded libcudart (e.g. '13.0'), or None."""
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
        v = ctypes.c_int(0)
        try:
            if lib.cudaRuntimeGetVersion(ctypes.byref(v)) == 0 and v.value:
                return "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
        except (AttributeError, OSError):
            return None
    return None


def cuda_facts(torch):
    """Extra runtime facts once CUDA is initialised: versions and GPU capture state."""
    items = []
    for key, fn in (("cuda.driver", _driver_version), ("cuda.driver_api", _driver_api_version),
                    ("cuda.runtime", _runtime_version)):
        try:
            value = fn()
        except Exception:
            value = None
        if value:
            items.append((key, value))
    return items


# Keys whose difference between recording and replay means bit-exactness cannot be expected.
GPU_KEYS_SUFFIXES = ("", ".sm_count", ".capability", ".memory")
GPU_GLOBAL_KEYS = ("cuda.compiled", "cuda.runtime", "cuda.driver", "cuda.driver_api", "cudnn.version",
                   "cuda.device_count", "cudnn.benchmark", "cudnn.deterministic", "env.CUBLAS_WORKSPACE_CONFIG",
                   "cuda.matmul.allow_tf32", "cudnn.allow_tf32")
# Settings jobs make after `import torch`: compared at the first step, for every recording.
SETTINGS_KEYS = ("torch.deterministic_algorithms", "torch.float32_matmul_precision")


def compare_gpu(recorded, here):
    """Warnings (strings) for GPU facts and determinism settings that differ;
    recorded(key) -> str or None, here: {key: value}."""
    warnings = []
    for key in SETTINGS_KEYS:
        want = recorded(key)
        if want is not None and key in here and here[key] != want:
            warnings.append("%s differs: recorded %s, here %s; bit-exact replay may not hold" % (key, want, here[key]))
    if recorded("cuda.initialized") != "1":
        return warnings
    count = recorded("cuda.device_count")
    if here.get("cuda.initialized") != "1":
        warnings.append("the recording ran on %s; this replay has not initialised CUDA (no GPU here?)"
                        % (recorded("cuda.device.0") or "a GPU"))
        return warnings
    devices = int(count) if count and count.isdigit() else 0
    gpu_diffs = []
    for d in range(devices):
        for suffix in GPU_KEYS_SUFFIXES:
            key = "cuda.device.%d%s" % (d, suffix)
            want = recorded(key)
            if want is not None and here.get(key) not in (None, want):
                gpu_diffs.append("%s: recorded %s, here %s" % (key, want, here.get(key)))
    if gpu_diffs:
        warnings.append("the GPU differs from the recording (%s): kernels may choose other algorithms and "
                        "launch shapes, bit-exact replay cannot be expected" % "; ".join(gpu_diffs))
    for key in GPU_GLOBAL_KEYS:
        want = recorded(key)
        if want is not None and key in here and here[key] != want:
            warnings.append("%s differs: recorded %s, here %s; bit-exact replay may not hold" % (key, want, here[key]))
    return warnings
