"""A test double of libdlrr's C API.

Every function of dlrr_hook.native.SIGNATURES exists here as a ctypes callback with the
same prototype, so the hook's calls go through real ctypes marshalling (a str where bytes
are needed, a wrong pointer type, an int out of range fail here as they would against the
library).  Calls are recorded as (name, decoded args...) tuples in .calls.
"""

import ctypes
import faulthandler
import math
import os
import sys

# A test that hangs (a gloo collective that never returns, a deadlock) prints every thread's
# Python stack and fails the run, instead of waiting for ctest's kill at 600 s, which says
# nothing about where it hung. The whole suite takes under a minute; every test module imports
# this one (once a process). DLRR_TEST_HANG_S: other seconds (0: off).
_HANG_S = float(os.environ.get("DLRR_TEST_HANG_S", "300"))
if _HANG_S > 0:
    faulthandler.dump_traceback_later(_HANG_S, exit=True)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
HOOK_DIR = os.path.join(REPO, "pyhook", "python")
if HOOK_DIR not in sys.path:
    sys.path.insert(0, HOOK_DIR)

from dlrr_hook import native  # noqa: E402


def _bytes_at(address, n):
    return ctypes.string_at(address, n) if address and n else b""


def _array(pointer, n):
    return [pointer[i] for i in range(n)] if pointer and n else []


class FakeLib:
    def __init__(self, mode=native.MODE_RECORD, capture_level=native.CAPTURE_DEFAULT,
                 pystack_path=""):
        self.calls = []
        self.mode = mode
        self.capture_level = capture_level
        self.pystack_path = pystack_path
        self.pystack_fd = None
        self.step = -1
        self.digest_values_result = 0
        self.gpu_capture_status = ""
        self.recorded_digests = {}  # step -> [native.RecordedDigestT] (replay)
        self.crash_exception = b""  # dlrr_replay_recorded_exception (replay)
        self.crash_while_loading = False
        self.last_step_begun = 1 << 62  # dlrr_replay_last_step_begun: no end unless a test sets one
        self._digest_arrays = {}  # what dlrr_replay_recorded_digests handed out, kept alive
        self._callbacks = []
        for name, (restype, argtypes) in native.SIGNATURES.items():
            impl = getattr(self, "_" + name)
            if restype is ctypes.c_char_p:
                setattr(self, name, impl)  # ctypes callbacks cannot return char* safely
                continue
            callback = ctypes.CFUNCTYPE(restype, *argtypes)(self._recording(name, impl))
            self._callbacks.append(callback)
            setattr(self, name, callback)

    def _recording(self, name, impl):
        def call(*args):
            try:
                return impl(*args)
            except Exception as exc:  # visible in the calls list instead of swallowed
                self.calls.append(("FAKE_ERROR", name, repr(exc)))
                return 0
        return call

    # -- queries
    def names(self):
        return [c[0] for c in self.calls]

    def of(self, name):
        return [c for c in self.calls if c[0] == name]

    def clear(self):
        del self.calls[:]

    # -- mode and status
    def _dlrr_mode(self):
        return self.mode

    def _dlrr_status(self):
        return b""

    def _dlrr_trace_dir(self):
        return b""

    def _dlrr_capture_level(self):
        return self.capture_level

    def _dlrr_pystack_fd(self):
        # As the library: the file is created exclusively (0600) and its descriptor kept open
        # and owned by the library (closed by close_pystack()).
        if not self.pystack_path:
            return -1
        if self.pystack_fd is None:
            try:
                self.pystack_fd = os.open(self.pystack_path,
                                          os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError:
                return -1
        return self.pystack_fd

    def close_pystack(self):
        if self.pystack_fd is not None:
            os.close(self.pystack_fd)
            self.pystack_fd = None

    def _dlrr_fatal_signals_first(self, first):
        self.calls.append(("fatal_signals_first", first))
        return 0

    def _dlrr_runtime_info(self, key, value):
        self.calls.append(("runtime_info", key.decode(), value.decode()))

    def _dlrr_note(self, text):
        self.calls.append(("note", text.decode()))

    def _dlrr_recorder_status(self, ok, message):
        self.calls.append(("recorder_status", ok, message.decode()))

    # -- steps
    def _dlrr_step_begin(self, step, loader, batch_index, epoch, by_optimizer):
        self.step = step
        self.calls.append(("step_begin", step, loader, batch_index, epoch, by_optimizer))

    def _dlrr_step_untrained(self, step):
        self.calls.append(("step_untrained", step))

    def _dlrr_step_end(self, step, loss):
        self.calls.append(("step_end", step, loss))

    def _dlrr_step_end_deferred(self, step, loss):
        # A step end like dlrr_step_end's (tests select both with of("step_end")), marked: its
        # durability waits for the next batch_end or step_wait_durable.
        self.calls.append(("step_end", step, loss, "deferred"))

    def _dlrr_entropy_loader_scope(self, enter):
        pass  # the library's marking of entropy draws: nothing to see without its hooks

    def _dlrr_step_wait_durable(self):
        self.calls.append(("step_wait_durable",))

    def _dlrr_current_step(self):
        return self.step

    def _dlrr_rng_state(self, kind, device, data, n):
        self.calls.append(("rng_state", kind, device, _bytes_at(data, n)))

    def _dlrr_rng_states(self, n, items):
        for i in range(n):  # recorded as the dlrr_rng_state calls it stands for
            it = items[i]
            self._dlrr_rng_state(it.kind, it.device, it.data, it.n)

    def _dlrr_rng_states_queued(self, n, items):
        self._dlrr_rng_states(n, items)
        self.calls.append(("rng_states_queued", n))  # the writer not woken

    def _dlrr_rng_state_at_fork(self, kind, device, data, n):
        self.calls.append(("rng_state_at_fork", kind, device, _bytes_at(data, n)))

    # -- batches
    def _dlrr_batch_begin(self, loader, iteration, index, is_training, indices, n):
        self.calls.append(("batch_begin", loader, iteration, index, is_training, _array(indices, n)))

    def _dlrr_val_list(self, n):
        self.calls.append(("list", n))

    def _dlrr_val_tuple(self, n):
        self.calls.append(("tuple", n))

    def _dlrr_val_dict(self, n):
        self.calls.append(("dict", n))

    def _dlrr_val_key(self, key):
        self.calls.append(("key", key.decode()))

    def _dlrr_val_none(self):
        self.calls.append(("none",))

    def _dlrr_val_bool(self, v):
        self.calls.append(("bool", v))

    def _dlrr_val_int(self, v):
        self.calls.append(("int", v))

    def _dlrr_val_float(self, v):
        self.calls.append(("float", v))

    def _dlrr_val_str(self, s, n):
        self.calls.append(("str", s[:n].decode("utf-8", "surrogatepass")))

    def _dlrr_val_bytes(self, p, n):
        self.calls.append(("bytes", _bytes_at(p, n)))

    def _dlrr_val_opaque(self, type_name):
        self.calls.append(("opaque", type_name.decode()))

    def _dlrr_val_tensor(self, dtype, elem_size, ndim, shape, data, nbytes, device, requires_grad):
        self.calls.append(("tensor", dtype.decode(), elem_size, _array(shape, ndim),
                           _bytes_at(data, nbytes), device.decode(), requires_grad))

    def _dlrr_batch_end(self):
        self.calls.append(("batch_end",))

    def _dlrr_batch_by_reference(self):
        self.calls.append(("batch_by_reference",))

    def _dlrr_snapshot_begin(self, step, failure):
        self.calls.append(("snapshot_begin", step, failure))

    def _dlrr_snapshot_end(self):
        self.calls.append(("snapshot_end",))

    def _dlrr_loader_end(self, loader, iteration, batches):
        self.calls.append(("loader_end", loader, iteration, batches))

    # -- digests
    def _dlrr_digest(self, kind, path, call_index, output, dtype, ndim, shape, data, nbytes, keep, out):
        payload = _bytes_at(data, nbytes)
        self.calls.append(("digest", kind, path.decode(), call_index, output, dtype.decode(),
                           _array(shape, ndim), payload, keep))
        if out:
            out[0].hash = hash(payload) & 0xFFFFFFFFFFFFFFFF
            out[0].nan_count = 0
            out[0].inf_count = 0
            out[0].min = math.nan
            out[0].max = math.nan
        return 0

    def _dlrr_digest_borrowed(self, kind, path, call_index, output, dtype, ndim, shape, data, nbytes, out, lease):
        # recorded as the dlrr_digest call with keep = 1 it stands for; never borrowed (copied)
        rc = self._dlrr_digest(kind, path, call_index, output, dtype, ndim, shape, data, nbytes, 1, out)
        if lease:
            lease[0], lease[1], lease[2] = 0, 0, 2 ** 63 - 1
        return rc

    def _dlrr_digest_many(self, kind, n, items):
        for i in range(n):  # recorded as the dlrr_digest calls it stands for
            it = items[i]
            self._dlrr_digest(kind, it.path, it.call_index, it.output, it.dtype, it.ndim, it.shape, it.data,
                              it.nbytes, it.keep, None)
        return 0

    def _dlrr_first_failure_step(self, step):
        return 0

    def _dlrr_failure_exception(self, type_, message, where, n, files, lines, functions, code):
        frames = [(files[i].decode(), lines[i], functions[i].decode(), code[i].decode())
                  for i in range(n)]
        self.calls.append(("failure_exception", type_.decode(), message.decode(), where.decode(),
                           frames))

    # -- triage facts
    def _dlrr_failed_path(self, path, error, op):
        self.calls.append(("failed_path", path.decode("utf-8", "surrogatepass"), error, op))

    def _dlrr_library_load_error(self, name, error):
        self.calls.append(("library_load_error", name.decode(), error.decode()))

    def _dlrr_gpu_memory(self, device, max_allocated, max_reserved, total):
        self.calls.append(("gpu_memory", device, max_allocated, max_reserved, total))

    def _dlrr_packages(self, reason, n, names, versions, paths):
        items = [(names[i].decode("utf-8", "surrogatepass"), versions[i].decode("utf-8", "surrogatepass"),
                  paths[i].decode("utf-8", "surrogatepass")) for i in range(n)]
        self.calls.append(("packages", reason.decode(), items))

    # -- replay (mode 2): this double serves nothing; replay logic is tested on real traces
    def _dlrr_replay_target(self, out):
        return 0

    def _dlrr_replay_batch(self, loader, index, data, n):
        return 0

    def _dlrr_replay_batch_meta(self, loader, index, step, is_training, indices, n):
        return 0

    def _dlrr_replay_batch_kind(self, loader, index):
        return 0  # not recorded by reference: the by-value path

    def _dlrr_replay_batch_stand_in(self, loader, index, data, n):
        return 0

    def _dlrr_replay_remade_begin(self, loader, index):
        self.calls.append(("remade_begin", loader, index))

    def _dlrr_replay_remade_end(self, what, cap, sample_pos):
        return -1

    def _dlrr_replay_batch_map(self, out, cap):
        return 0

    def _dlrr_replay_iterator_length(self, loader, iteration):
        return -1

    def _dlrr_replay_rng_at_batch(self, loader, index, kind, device, data, n):
        return 0

    def _dlrr_replay_rng_at_step(self, step, kind, device, data, n):
        return 0

    def _dlrr_replay_rng_at_fork(self, kind, device, data, n):
        return 0

    def _dlrr_replay_runtime_info(self, key):
        return None

    def _dlrr_replay_recorded_steps(self):
        return -1

    def _dlrr_replay_jump_step(self):
        return -1

    def _dlrr_replay_snapshot(self, step, data, n):
        return 0

    def _dlrr_replay_last_step_begun(self):
        return self.last_step_begun

    def _dlrr_replay_recorded_loss(self, step):
        return math.nan

    def _dlrr_replay_recorded_tensors(self, step, data, n):
        return 0

    def _dlrr_replay_recorded_digests(self, step, items, n):
        if self.mode != native.MODE_REPLAY:
            return 0
        rows = self.recorded_digests.get(step, [])
        array = (native.RecordedDigestT * max(len(rows), 1))(*rows)
        self._digest_arrays[step] = array
        items[0] = ctypes.cast(array, ctypes.POINTER(native.RecordedDigestT))
        n[0] = len(rows)
        return 1

    def _dlrr_replay_divergence(self):
        return b""

    def _dlrr_replay_diverged(self, step, kind, path, detail):
        self.calls.append(("dlrr_replay_diverged", step, kind, path, detail))

    def _dlrr_replay_recorded_exception(self, while_loading):
        if while_loading is not None:
            while_loading._obj.value = int(self.crash_while_loading)
        return self.crash_exception

    def _dlrr_replay_fact(self, key, value):
        self.calls.append(("dlrr_replay_fact", key, value))

    def _dlrr_replay_stop(self, reason):
        self.calls.append(("dlrr_replay_stop", reason))

    def _dlrr_replay_stopped(self, reason):
        self.calls.append(("dlrr_replay_stopped", reason))

    # -- GPU
    def _dlrr_digest_values(self, kind, path, call_index, output, dtype, ndim, shape, algorithm, digest):
        d = digest[0]
        self.calls.append(("digest_values", kind, path.decode(), call_index, output, dtype.decode(),
                           _array(shape, ndim), algorithm,
                           (d.hash, d.nan_count, d.inf_count, d.min, d.max)))
        return self.digest_values_result

    def _dlrr_keep_tensor(self, kind, path, call_index, output, dtype, ndim, shape, data, nbytes):
        self.calls.append(("keep_tensor", kind, path.decode(), call_index, output, dtype.decode(),
                           _array(shape, ndim), _bytes_at(data, nbytes)))

    def _dlrr_gpu_pause(self, paused):
        self.calls.append(("gpu_pause", paused))

    def _dlrr_digest_kernel_open(self, why):
        self.calls.append(("digest_kernel_open",))
        why[0] = self._kernel_why  # kept alive by self: the pointer stays valid
        return None

    _kernel_why = ctypes.c_char_p(b"the fake library has no digest kernel")

    def _dlrr_digest_kernel_launch(self, kernel, data, nbytes, numel, element, out, stream):
        return -1

    def _dlrr_digest_kernel_close(self, kernel):
        pass

    def _dlrr_gpu_check_launches_now(self, why):
        self.calls.append(("gpu_check_launches_now", why.decode()))

    def _dlrr_gpu_capture_status(self):
        return self.gpu_capture_status.encode()

    # -- torch.distributed
    def _dlrr_collective_begin(self, op, group, reduce_op, peer, bucket, async_op):
        seq = self.next_collective = getattr(self, "next_collective", -1) + 1
        self.calls.append(("collective_begin", seq, op.decode(), group.decode(), reduce_op.decode(), peer, bucket,
                           async_op))
        return seq

    def _dlrr_collective_tensor(self, seq, is_result, dtype, ndim, shape, data, nbytes):
        self.calls.append(("collective_tensor", seq, is_result, dtype.decode(), _array(shape, ndim),
                           _bytes_at(data, nbytes)))
        return 0

    def _dlrr_collective_end(self, seq, status):
        self.calls.append(("collective_end", seq, status.decode()))

    def _dlrr_collective_wait(self, reason, waiting, seq, op, group, issued_step, completed_seq, completed_op,
                              completed_step, waited_ms, stacks):
        self.calls.append(("collective_wait", reason, waiting, seq, op.decode(), completed_seq, stacks.decode()))

    def _dlrr_term_notice(self, notify_fd, ack_fd, wait_ms):
        return 0  # the real library installs a SIGTERM handler; never in these tests

    def _dlrr_window_flush(self):
        self.calls.append(("window_flush",))

    # The two-crossing forms record what the four calls they stand for would (the library's
    # dlrr_collective_begin1/end1 are those calls), so tests see one sequence either way.
    def _dlrr_collective_begin1(self, op, group, reduce_op, peer, bucket, async_op, dtype, ndim, shape, data, nbytes):
        seq = self._dlrr_collective_begin(op, group, reduce_op, peer, bucket, async_op)
        if dtype:
            self._dlrr_collective_tensor(seq, 0, dtype, ndim, shape, data, nbytes)
        return seq

    def _dlrr_collective_end1(self, seq, dtype, ndim, shape, data, nbytes, status):
        if dtype:
            self._dlrr_collective_tensor(seq, 1, dtype, ndim, shape, data, nbytes)
        self._dlrr_collective_end(seq, status)

    def _dlrr_replay_collective_result(self, seq, index, data, n):
        return -1

    def _dlrr_replay_rank(self):
        return -1

    # -- files (data-less replay): kept out of `calls` (pauses come with every batch)
    def _dlrr_files_enable(self):
        self.files_enabled = True

    def _dlrr_files_pause(self, pause):
        self.files_paused = getattr(self, "files_paused", 0) + (1 if pause else -1)
        self.files_pauses = getattr(self, "files_pauses", 0) + (1 if pause else 0)

    def _dlrr_files_exclude(self, path):
        self.files_excluded = getattr(self, "files_excluded", []) + [path.decode("utf-8", "surrogateescape")]

    def _dlrr_files_whole_max(self):
        return 64 << 20

    def _dlrr_file_range(self, path, offset, data, n):
        self.calls.append(("file_range", path.decode(), offset, _bytes_at(data, n)))
