"""ctypes binding to the C API of the preloaded libdlrr.so (interpose/include/dlrr/dlrr.h).

The library is already in the process (LD_PRELOAD by dlrecord), so nothing is loaded here:
we only look its symbols up, either through the path in DLRR_LIBRARY opened with
RTLD_NOLOAD (never a second, unpreloaded copy) or through the global namespace
(dlopen(NULL)).  When the symbols are absent the hook is off and costs nothing.

SIGNATURES is the one place that mirrors dlrr.h; the test double in tests/python builds
ctypes callbacks from the same table, so a call that would not marshal against the real
library does not marshal against the fake either.
"""

import ctypes
import os
from ctypes import (POINTER, c_char_p, c_double, c_int, c_int32, c_int64, c_uint32,
                    c_uint64, c_void_p)

MODE_OFF = 0
MODE_RECORD = 1
MODE_REPLAY = 2

# enum dlrr_digest_kind_t (same numbering as schema TensorDigest.Kind)
DIGEST_MODULE_OUTPUT = 0
DIGEST_GRADIENT = 1
DIGEST_PARAMETER = 2
DIGEST_LOSS = 3
DIGEST_BATCH = 4
DIGEST_OTHER = 5
DIGEST_MODULE_INPUT = 6
# Their names in reports and at a replay's stop (replayer/ReplaySession.cc kindName).
DIGEST_KIND_NAMES = ("module output", "gradient", "parameter", "loss", "batch", "tensor", "module input")

# enum dlrr_rng_kind_t (same numbering as schema RngState.Kind)
RNG_TORCH_CPU = 0
RNG_TORCH_CUDA = 1
RNG_NUMPY = 2
RNG_PYTHON = 3

# RngState.device for generators that are not tied to a device.
NO_DEVICE = -1

# StepBegin.loader when steps are counted by optimizer.step() or backward() (no DataLoader).
NO_LOADER = 0xFFFFFFFF

# dlrr_step_begin's counting rule (enum dlrr_step_rule_t): what began (and will end) the step.
STEP_BY_BATCH = 0
STEP_BY_OPTIMIZER = 1
STEP_BY_BACKWARD = 2
STEP_BY_GRADIENT_CALL = 3  # torch.func.grad / grad_and_value calls (functional training)

# enum dlrr_lookup_op_t (same numbering as schema MissingPath.Op)
LOOKUP_OPEN = 0
LOOKUP_CREATE = 1
LOOKUP_STAT = 2
LOOKUP_ACCESS = 3
LOOKUP_MKDIR = 4
LOOKUP_OPENDIR = 5
LOOKUP_OTHER = 6

CAPTURE_PROCESS = -1  # no steps: the process-wide hooks only
CAPTURE_MINIMAL = 0
CAPTURE_DEFAULT = 1
CAPTURE_FULL = 2


class DigestT(ctypes.Structure):
    """struct dlrr_digest."""

    _fields_ = [("hash", c_uint64), ("nan_count", c_uint64), ("inf_count", c_uint64),
                ("min", c_double), ("max", c_double)]


class DigestItemT(ctypes.Structure):
    """struct dlrr_digest_item (dlrr_digest_many)."""

    _fields_ = [("path", c_char_p), ("dtype", c_char_p), ("shape", POINTER(c_int64)), ("data", c_void_p),
                ("nbytes", c_uint64), ("call_index", c_uint32), ("output", c_uint32), ("ndim", c_int32),
                ("keep", c_int32)]


class RngItemT(ctypes.Structure):
    """struct dlrr_rng_item (dlrr_rng_states)."""

    _fields_ = [("data", c_void_p), ("n", c_uint64), ("kind", c_int32), ("device", c_int32)]


class RecordedDigestT(ctypes.Structure):
    """struct dlrr_recorded_digest (dlrr_replay_recorded_digests)."""

    _fields_ = [("path", c_char_p), ("kind", c_int32), ("call_index", c_uint32), ("output", c_uint32),
                ("reserved", c_uint32), ("digest", DigestT)]


_CHARPP = POINTER(c_char_p)

# name -> (restype, argtypes), in the order of dlrr.h.
SIGNATURES = {
    "dlrr_mode": (c_int, []),
    "dlrr_status": (c_char_p, []),
    "dlrr_trace_dir": (c_char_p, []),
    "dlrr_capture_level": (c_int, []),
    "dlrr_pystack_fd": (c_int, []),
    "dlrr_fatal_signals_first": (c_int, [c_int]),
    "dlrr_runtime_info": (None, [c_char_p, c_char_p]),
    "dlrr_note": (None, [c_char_p]),
    "dlrr_recorder_status": (None, [c_int, c_char_p]),
    "dlrr_step_begin": (None, [c_int64, c_uint32, c_uint64, c_int64, c_int]),
    "dlrr_step_untrained": (None, [c_int64]),
    "dlrr_step_end": (None, [c_int64, c_double]),
    "dlrr_step_end_deferred": (None, [c_int64, c_double]),
    "dlrr_step_wait_durable": (None, []),
    "dlrr_entropy_loader_scope": (None, [c_int]),
    "dlrr_current_step": (c_int64, []),
    "dlrr_rng_state": (None, [c_int, c_int, c_void_p, c_uint64]),
    "dlrr_rng_state_at_fork": (None, [c_int, c_int, c_void_p, c_uint64]),
    "dlrr_rng_states": (None, [c_uint32, POINTER(RngItemT)]),
    "dlrr_rng_states_queued": (None, [c_uint32, POINTER(RngItemT)]),
    "dlrr_batch_begin": (None, [c_uint32, c_uint32, c_uint64, c_int, POINTER(c_int64), c_uint64]),
    "dlrr_val_list": (None, [c_uint32]),
    "dlrr_val_tuple": (None, [c_uint32]),
    "dlrr_val_dict": (None, [c_uint32]),
    "dlrr_val_key": (None, [c_char_p]),
    "dlrr_val_none": (None, []),
    "dlrr_val_bool": (None, [c_int]),
    "dlrr_val_int": (None, [c_int64]),
    "dlrr_val_float": (None, [c_double]),
    "dlrr_val_str": (None, [c_char_p, c_uint64]),
    "dlrr_val_bytes": (None, [c_void_p, c_uint64]),
    "dlrr_val_opaque": (None, [c_char_p]),
    "dlrr_val_tensor": (None, [c_char_p, c_uint32, c_int, POINTER(c_int64), c_void_p, c_uint64,
                               c_char_p, c_int]),
    "dlrr_batch_end": (None, []),
    "dlrr_batch_by_reference": (None, []),
    "dlrr_replay_batch_kind": (c_int, [c_uint32, c_uint64]),
    "dlrr_replay_batch_stand_in": (c_int, [c_uint32, c_uint64, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_remade_begin": (None, [c_uint32, c_uint64]),
    "dlrr_replay_remade_end": (c_int, [c_char_p, c_uint64, POINTER(c_int64)]),
    "dlrr_replay_batch_map": (c_int, [c_char_p, c_uint64]),
    "dlrr_snapshot_begin": (None, [c_int64, c_int]),
    "dlrr_snapshot_end": (None, []),
    "dlrr_loader_end": (None, [c_uint32, c_uint32, c_uint64]),
    "dlrr_digest": (c_int, [c_int, c_char_p, c_uint32, c_uint32, c_char_p, c_int, POINTER(c_int64),
                            c_void_p, c_uint64, c_int, POINTER(DigestT)]),
    # called by the _dlrr_native extension through its address (recorder.native_digest)
    "dlrr_digest_borrowed": (c_int, [c_int, c_char_p, c_uint32, c_uint32, c_char_p, c_int, POINTER(c_int64),
                                     c_void_p, c_uint64, POINTER(DigestT), POINTER(c_int64)]),
    "dlrr_digest_many": (c_int, [c_int, c_uint32, POINTER(DigestItemT)]),
    "dlrr_first_failure_step": (c_int, [POINTER(c_int64)]),
    "dlrr_failure_exception": (None, [c_char_p, c_char_p, c_char_p, c_int, _CHARPP,
                                      POINTER(c_int32), _CHARPP, _CHARPP]),
    # triage facts
    "dlrr_failed_path": (None, [c_char_p, c_int, c_int]),
    "dlrr_library_load_error": (None, [c_char_p, c_char_p]),
    "dlrr_gpu_memory": (None, [c_int, c_uint64, c_uint64, c_uint64]),
    "dlrr_packages": (None, [c_char_p, c_int, _CHARPP, _CHARPP, _CHARPP]),
    # replay (mode 2)
    "dlrr_replay_target": (c_int, ["TargetT*"]),
    "dlrr_replay_batch": (c_int, [c_uint32, c_uint64, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_batch_meta": (c_int, [c_uint32, c_uint64, POINTER(c_int64), POINTER(c_int),
                                       POINTER(POINTER(c_int64)), POINTER(c_uint64)]),
    "dlrr_replay_iterator_length": (c_int64, [c_uint32, c_uint32]),
    "dlrr_replay_rng_at_batch": (c_int, [c_uint32, c_uint64, c_int, c_int, POINTER(c_void_p),
                                         POINTER(c_uint64)]),
    "dlrr_replay_rng_at_step": (c_int, [c_int64, c_int, c_int, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_rng_at_fork": (c_int, [c_int, c_int, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_runtime_info": (c_char_p, [c_char_p]),
    "dlrr_replay_recorded_steps": (c_int64, []),
    "dlrr_replay_last_step_begun": (c_int64, []),
    "dlrr_replay_jump_step": (c_int64, []),
    "dlrr_replay_snapshot": (c_int, [c_int64, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_recorded_loss": (c_double, [c_int64]),
    "dlrr_replay_recorded_tensors": (c_int, [c_int64, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_recorded_digests": (c_int, [c_int64, POINTER(POINTER(RecordedDigestT)), POINTER(c_uint64)]),
    "dlrr_replay_divergence": (c_char_p, []),
    "dlrr_replay_diverged": (None, [c_int64, c_int, c_char_p, c_char_p]),
    "dlrr_replay_recorded_exception": (c_char_p, [POINTER(c_int)]),
    "dlrr_replay_fact": (None, [c_char_p, c_char_p]),
    "dlrr_replay_stop": (None, [c_char_p]),
    "dlrr_replay_stopped": (None, [c_char_p]),  # gdb's breakpoint; the hook never calls it
    # GPU
    "dlrr_digest_values": (c_int, [c_int, c_char_p, c_uint32, c_uint32, c_char_p, c_int, POINTER(c_int64),
                                   c_int, POINTER(DigestT)]),
    "dlrr_keep_tensor": (None, [c_int, c_char_p, c_uint32, c_uint32, c_char_p, c_int, POINTER(c_int64),
                                c_void_p, c_uint64]),
    "dlrr_gpu_capture_status": (c_char_p, []),
    "dlrr_gpu_pause": (None, [c_int]),
    "dlrr_gpu_check_launches_now": (None, [c_char_p]),
    "dlrr_digest_kernel_open": (c_void_p, [POINTER(c_char_p)]),
    "dlrr_digest_kernel_launch": (c_int, [c_void_p, c_void_p, c_uint64, c_uint64, c_int, c_void_p, c_void_p]),
    "dlrr_digest_kernel_close": (None, [c_void_p]),
    # torch.distributed
    "dlrr_collective_begin": (c_uint64, [c_char_p, c_char_p, c_char_p, c_int, c_int, c_int]),
    "dlrr_collective_tensor": (c_int, [c_uint64, c_int, c_char_p, c_int, POINTER(c_int64), c_void_p, c_uint64]),
    "dlrr_collective_end": (None, [c_uint64, c_char_p]),
    "dlrr_collective_begin1": (c_uint64, [c_char_p, c_char_p, c_char_p, c_int, c_int, c_int, c_char_p, c_int,
                                          POINTER(c_int64), c_void_p, c_uint64]),
    "dlrr_collective_end1": (None, [c_uint64, c_char_p, c_int, POINTER(c_int64), c_void_p, c_uint64, c_char_p]),
    "dlrr_collective_wait": (None, [c_int, c_int, c_uint64, c_char_p, c_char_p, c_int64, c_int64, c_char_p, c_int64,
                                    c_uint64, c_char_p]),
    "dlrr_term_notice": (c_int, [c_int, c_int, c_int]),
    "dlrr_window_flush": (None, []),
    "dlrr_replay_collective_result": (c_int, [c_uint64, c_uint32, POINTER(c_void_p), POINTER(c_uint64)]),
    "dlrr_replay_rank": (c_int, []),
    # files (data-less replay)
    "dlrr_files_enable": (None, []),
    "dlrr_files_pause": (None, [c_int]),
    "dlrr_files_exclude": (None, [c_char_p]),
    "dlrr_files_whole_max": (c_uint64, []),
    "dlrr_file_range": (None, [c_char_p, c_uint64, c_void_p, c_uint64]),
}

# enum dlrr_digest_algorithm_t (same numbering as schema TensorDigest.Algorithm)
DIGEST_XXH3 = 0
DIGEST_DEVICE_SUM = 1

# enum dlrr_target_kind_t
TARGET_END = 0
TARGET_STEP = 1
TARGET_NAN = 2
TARGET_CRASH = 3


class TargetT(ctypes.Structure):
    """struct dlrr_target."""

    _fields_ = [("kind", c_int), ("step", c_int64), ("digest_kind", c_int), ("call_index", c_uint32),
                ("where", ctypes.c_char * 512)]


SIGNATURES["dlrr_replay_target"] = (c_int, [POINTER(TargetT)])


def address_of(fn):
    """The address of a C API function (the preloaded library's symbol, or a test double's ctypes
    callback), for the _dlrr_native extension to call it without ctypes; None when `fn` is not
    a C function (a Python stand-in)."""
    try:
        return ctypes.cast(fn, ctypes.c_void_p).value or None
    except (TypeError, ctypes.ArgumentError):
        return None


def bind(lib):
    """Sets restype/argtypes of every C API function on `lib`; AttributeError if one is missing."""
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load(environ=None):
    """Returns the bound library when libdlrr.so is loaded in this process, else None."""
    environ = os.environ if environ is None else environ
    candidates = []
    path = environ.get("DLRR_LIBRARY")
    if path:
        candidates.append(path)
    candidates.append(None)  # the global namespace: LD_PRELOAD puts the library there
    for candidate in candidates:
        try:
            if candidate is None:
                lib = ctypes.CDLL(None)
            else:
                # RTLD_NOLOAD: only a library that is already mapped; never start a recorder
                # that the launcher did not preload.
                lib = ctypes.CDLL(candidate, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            return bind(lib)
        except OSError:
            continue
        except AttributeError as exc:
            if _say_mismatch(lib, exc):
                return None  # the other candidate is the same library: said once
            continue
    return None


def _say_mismatch(lib, exc):
    """libdlrr is loaded but lacks a function this hook calls (a library and a hook from two
    builds): the job runs unrecorded, and dlrecord must say why rather than write an empty trace."""
    try:
        status = lib.dlrr_recorder_status  # absent: no libdlrr in this process, nothing to say
    except AttributeError:
        return False
    status.restype = None
    status.argtypes = [c_int, c_char_p]
    status(0, ("the Python hook does not match libdlrr (%s): from two builds of dlrr? "
               "this process is not recorded" % exc).encode("utf-8", "replace"))
    return True


def text(value):
    """UTF-8 bytes for a char* argument (lone surrogates from file names survive)."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


def decode(value):
    """str from a const char* result (None -> "")."""
    if not value:
        return ""
    return value.decode("utf-8", "replace")
