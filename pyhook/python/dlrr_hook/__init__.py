"""dlrr's Python hook: what a PyTorch job's objects mean to a recording, told to the preloaded
libdlrr.so through its C API.

sitecustomize.py calls install() at interpreter start.  The hook is active only when the
native library is loaded and recording (dlrr_mode() == 1) or replaying (2); it then stays
dormant until the job imports torch.  Both modes run the session core (session.py) holding
a strategy object: RecordStrategy (recorder.py) or ReplayStrategy (replay.py).

Module map:
  native    ctypes binding (C API prototypes, constants)
  imports   post-import hook for torch
  patching  reversible monkey-patching
  steps     StepTracker: what a training step is
  loaders   DataLoader numbering, batch indices, sample indices
  values    batches as dlrr_val_* calls
  tensors   tensors as (dtype, shape, bytes) arguments
  modules   module paths, executing-module stack, forward hooks
  training  backward() and optimizer.step() wrappers
  rng       RNG state capture and (de)serialisation
  failures  excepthooks, faulthandler
  runtime   runtime facts (versions, threads, BLAS, determinism flags)
  session   Session: the core of both modes, wiring all of the above; Strategy, its interface
  recorder  RecordStrategy: record mode
  batches   decoding of batches served by the replayer
  replay    ReplayStrategy: replay mode (serve and check)
  dist      torch.distributed: collectives, DDP buckets, the stand-in group (docs/distributed.md)
  gpu       CUDA tensors digested on the device, device failure ring, out of memory (docs/gpu.md)
  triage    facts only Python sees: packages and versions (docs/triage.md)
  files     np.memmap ranges, file recording paused during batch fetch (docs/replay.md)
  preflight the job in miniature: passes and loops cut (docs/preflight.md)
"""

from . import native

_recorder = None  # the one Session of this process (its strategy: record or replay)


def install(lib=None):
    """Activates the hook for this process if libdlrr records or replays it.  Returns the Session.

    `lib` is for tests (a fake with the C API's function names); by default the preloaded
    library is looked up, and without it nothing at all happens.
    """
    global _recorder
    if _recorder is not None:
        return _recorder
    if lib is None:
        lib = native.load()
        if lib is None:
            return None
    mode = lib.dlrr_mode()
    from .session import Session
    if mode == native.MODE_RECORD:
        from .recorder import RecordStrategy
        recorder = Session(lib, RecordStrategy)
    elif mode == native.MODE_REPLAY:
        from .replay import ReplayStrategy
        recorder = Session(lib, ReplayStrategy)
    else:
        _name_children(lib)
        return None
    _recorder = recorder
    recorder.install()
    return recorder


def _name_children(lib):
    """A process of a recorded or replayed job that is not recorded or replayed itself (the
    parent of replayed Hogwild trainers) still names the Processes it starts (processes.py);
    a forked one that libdlrr replays gets the hook then."""
    import os
    if os.environ.get("DLRR_MODE") not in ("record", "replay"):
        return
    try:
        from . import processes
        from .patching import Patcher
        processes.install(Patcher())

        def after_in_child():
            try:
                if _recorder is None and lib.dlrr_mode() != native.MODE_OFF:
                    install(lib)
            except Exception:
                pass
        os.register_at_fork(after_in_child=after_in_child)
    except Exception:
        pass


def uninstall():
    """Undoes install() (tests)."""
    global _recorder
    if _recorder is not None:
        _recorder.uninstall()
        _recorder = None


def current():
    """The Session of this process, or None."""
    return _recorder
