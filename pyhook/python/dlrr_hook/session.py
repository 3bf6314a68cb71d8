"""The hook's session core: what record and replay do alike, turning what the job does into
C API calls.

The Session owns every patch and the state the two modes share.  The parts it wires
together serve both modes: LoaderTracker (which batch is which), StepTracker (step
boundaries), ModuleTracker/ModulePaths (module paths and call indices), ValueWriter and
TensorMarshal (values as C API arguments), RngCapture (generator states).  What differs
between record and replay is a strategy object the Session holds (`session.strategy`): a
subclass of Strategy (below), RecordStrategy (recorder.py) or ReplayStrategy (replay.py).
The core never asks which mode it is in; it calls the strategy at fixed points, and the
strategy uses the Session through its public attributes and methods only.

Never break the job: each hook body runs under guarded(); an internal error turns capture
off for good (patches fall straight through to the originals), commits the open step, and
is reported once through dlrr_recorder_status.
"""

import atexit
import ctypes
import importlib
import os
import sys
import threading
import traceback
import weakref

from . import gpu, native, processes, runtime, warning_frames
from .digest_batch import DigestBatch
from .dist import DistHooks
from .failures import FailureHooks
from .imports import ImportWatcher
from .loaders import LoaderTracker
from .modules import ModuleTracker, is_compiled, native_extension
from .patching import Patcher
from .preflight import Preflight, preflight_batches
from .rng import RngCapture
from .snapshots import Registry
from .steps import StepTracker
from .tensors import TensorMarshal
from .training import TrainingPatches, grad_scaler_class
from .triage import TriageFacts
from .values import ValueWriter


def _disable_in_child(recorder_ref):
    """os.register_at_fork(after_in_child=...): workers record nothing (see Session); a
    multiprocessing.Process with an identity of its own (a Hogwild trainer) records on."""
    recorder = recorder_ref()
    if recorder is None:
        return
    ident = os.environ.get(processes.ENV, "")
    if (processes.is_trainer_identity(ident) and ident != recorder.process_identity
            and recorder.lib.dlrr_mode() != native.MODE_OFF):
        recorder.process_identity = ident
        recorder.guarded(recorder.start_in_child)
        return
    recorder.disable_in_child()


def _where(exc):
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return "?"
    frame = frames[-1]
    return "%s:%s" % (os.path.basename(frame.filename), frame.lineno)


def compiled_note(path):
    return ("%s is a torch.compile'd module: its submodules run inside the compiled graph, so their outputs "
            "are not digested or verified (its own output, the loss, gradients and parameters are)"
            % (path or "<root>"))


def compiled_function_note(name):
    return ("%s is a torch.compile'd function: modules called inside it run in the compiled graph, so their "
            "outputs are not digested or verified (what runs outside it is: the loss passed to backward(), "
            "gradients, parameters)" % name)


COMPILED_COLLECTIVES_NOTE = (
    "torch.distributed collectives called inside torch.compile'd code run as functional collectives in "
    "the compiled graph, past dlrr's collective hooks: their results are not recorded or verified, and a "
    "rank replayed alone computes them from its own tensors only")


def _callable_name(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


class Strategy:
    """Where record and replay differ: the Session calls these at fixed points of the core.

    A strategy is made with its Session (`strategy_class(session)`) and keeps it as
    `self.session`; the lifecycle hooks default to nothing, the rest each mode implements.
    """

    # True: the Session's _on_output digests a dense host output itself, for speed (record's
    # digest, inlined), and then calls neither digest() nor output_digested(); False: every
    # output goes through digest(), then output_digested() (replay stops where it diverges).
    inline_outputs = True
    gpu_deferred = True  # device digests: one transfer per step (record); at once (replay, to stop there)
    fast_forwarding = False  # replay (jump): before the jump step, compute is skipped
    skip_update = False  # replay --what-if skip-step: this optimizer.step() is skipped (training.py)

    def __init__(self, session):
        self.session = session
        self.lib = session.lib
        self.steps = session.steps

    # ------------------------------------------------------------------ what each mode implements
    def dist_replay_mode(self):
        """None records collectives; else how replay treats them (dist.DIST_REPLAY_*)."""
        raise NotImplementedError

    def note_unverified(self, key, note):
        """Says that `note` (runtime fact `key`) is not verified: in the trace, or in replay's report."""
        raise NotImplementedError

    def on_batch(self, info, data):
        """The LoaderTracker's sink: batch `info` delivered `data` (written with the RNG states, or,
        served, the recorded states restored)."""
        raise NotImplementedError

    def snapshot_rng(self, step=None):
        """The StepTracker's: RNG states that will belong to optimizer-driven step `step` (taken, or
        the recorded ones restored)."""
        raise NotImplementedError

    def write_step_rng(self, rng):
        """The states snapshot_rng gave, at the step's begin: written (record) or nothing (replay)."""
        raise NotImplementedError

    def native_digest(self):
        """For the native module hooks (modules.py): a dict of what they need to digest a dense CPU
        output themselves (record), or None to send every output to the Session's _on_output."""
        raise NotImplementedError

    def digest(self, kind, path, call_index, output, tensor, keep):
        """dlrr_digest of one tensor, recorded or checked (stopping at a divergence); returns the
        host tensor digested (None: skipped or on a GPU)."""
        raise NotImplementedError

    def commit_step(self, step, loss):
        """The step's end to the library: dlrr_step_end, or (record, inside a batch delivery)
        dlrr_step_end_deferred."""
        raise NotImplementedError

    # ------------------------------------------------------------------ lifecycle hooks (default: nothing)
    def install(self):
        """After the core's install()."""

    def uninstall(self):
        """Before the core's uninstall()."""

    def before_torch(self, torch):
        """torch imported, before the core patches it."""

    def after_torch(self, torch):
        """After the core patched torch."""

    def before_fetch(self, iterator):
        """A loader without workers is about to load a batch in this process (its sampler has drawn)."""

    def before_step(self, step):
        """A step is about to begin (before dlrr_step_begin)."""

    def step_begun(self, step, by_optimizer):
        """After the core began step `step`."""

    def step_ended(self, step, loss):
        """After the core ended step `step`."""

    def output_digested(self, path, call_index, output):
        """After the core digested a module's output (call `call_index` of `path` in the step)."""

    def before_backward(self, tensors):
        """backward() is about to run on `tensors` (before the loss digests)."""

    def loss_digested(self, tensors):
        """After the loss digests, before backward() runs."""

    def backward_skipped(self):
        """backward() returned while fast_forwarding: no gradient digests (the step still ends)."""

    def after_backward(self):
        """After the gradient digests of a backward()."""

    def before_update(self, optimizer):
        """optimizer.step() is about to run (after the core's bookkeeping)."""

    def updated(self, optimizer):
        """optimizer.step() returned, before the parameter digests."""

    def after_update(self, optimizer, step):
        """After the parameter digests; `step` is the step current before the update ended it."""


class Session:
    """The hook in a recorded or replayed process: the core, holding its mode's Strategy.  One per process.

    DataLoader workers record nothing: batches are captured in the main process, after
    collation, which also makes replay independent of the worker count.  Forked children
    are turned off by os.register_at_fork (as the native side does); spawned workers by the
    _worker_loop patch (see loaders.py).  Processes started by torch.multiprocessing.spawn
    (DDP ranks) are recorded like any other process.

    """

    def __init__(self, lib, strategy_class):
        self.lib = lib
        self.active = True
        self.torch = None
        self.capture_level = lib.dlrr_capture_level()
        self.steps = StepTracker(self)
        self.failures = FailureHooks(self, lib)
        self.triage = TriageFacts(self, lib)  # packages, GPU peaks, argparse errors
        self.marshal = None
        self.values = None
        self.rng = None
        self.loaders = None
        self.modules = None
        self.training = None
        self.dist = None
        self.patcher = Patcher()
        self._watcher = None
        self.runtime_sent = False  # runtime facts sent (send_runtime_info)
        self._cuda_info_sent = False
        self._sharing_noted = False  # torch.shared_parameters sent (at the first optimizer.step)
        self.registry = Registry()  # what trains: snapshots (record) and their restore (replay)
        self.snapshots = None  # SnapshotTaker (record)
        self.gpu = None  # GpuDigests: CUDA tensors digested on their device (gpu.py)
        self.error = None  # the internal error that disabled capture, if any
        self._digest_fn = lib.dlrr_digest
        self.last_digest = native.DigestT()  # what digest_prepared's call computed
        self._digest_ref = ctypes.byref(self.last_digest)
        self.keep_outputs = 1 if self.capture_level >= native.CAPTURE_DEFAULT else 0
        self._tensor_type = None
        self._prepare = None
        self._batch = DigestBatch(lib) if DigestBatch.usable else None  # gradients, parameters
        self._tensor_lists = None  # _dlrr_native.TensorListDigest: the same in C (_native_tensor_lists)
        # Per-step state (reset at step begin/end).
        self.module_calls = {}  # path -> calls so far in the step (the native hooks count here too)
        self._grad_calls = {}
        self._param_calls = {}
        self._backwards = 0
        self._roots = {}
        self._unverified_said = set()  # (key, note) pairs already said (_say_unverified)
        # _on_output digests a host tensor itself (record's digest, inlined for speed); replay
        # sends every output through its digest, which stops at a divergence where it happens.
        self._inline_outputs = strategy_class.inline_outputs
        self._compile_called = False  # torch.compile was called (note_compiled_collectives)
        self._collectives_noted = False
        self._parameters = None
        self._last_parameters = None  # (the roots' lists, their step_parameters()): reused while the same
        self._optimizer_numbers = weakref.WeakKeyDictionary()
        k = preflight_batches()
        self.preflight = Preflight(lib, k, self._preflight_fact) if k else None  # dlpreflight
        self.strategy = strategy_class(self)  # record or replay: last, it may read all of the above

    # ------------------------------------------------------------------ lifecycle
    def install(self):
        """Process-wide hooks now; torch patches once torch is imported."""
        self.failures.install()
        self.guarded(self.triage.install)
        self.guarded(self.failures.enable_faulthandler)
        if self.preflight is not None:
            self.guarded(self.preflight.install)
        atexit.register(self._at_exit)
        self.process_identity = os.environ.get(processes.ENV, "")
        self.guarded(processes.install, self.patcher)
        self.guarded(warning_frames.install, self.patcher)  # warnings name the job's lines
        os.register_at_fork(after_in_child=lambda ref=weakref.ref(self): _disable_in_child(ref))
        self._watcher = ImportWatcher("torch", lambda module: self.guarded(self._on_torch, module))
        self._watcher.start()
        self.strategy.install()

    def uninstall(self):
        """Undo everything (tests; a real job keeps the recorder to the end)."""
        self.strategy.uninstall()
        self.active = False
        if self._watcher is not None:
            self._watcher.stop()
        if self.modules is not None:
            self.modules.uninstall()
        self.patcher.restore()
        self.failures.uninstall()
        self.triage.uninstall()
        atexit.unregister(self._at_exit)

    def start_in_child(self):
        """A forked trainer records its own stream: its crash file is its own, not the parent's.
        The generator states it inherited open the stream (replay restores them as the fork
        attaches: its parent, not replayed, seeds them from the OS's entropy)."""
        self.failures.disable_faulthandler()
        self.failures.enable_faulthandler()
        if self.rng is not None:
            self.rng.write(self.rng.snapshot(), at_fork=True)
        # Its stream's own runtime facts (the parent's went to the parent's stream).
        self.runtime_sent = self._cuda_info_sent = self._sharing_noted = False

    def disable_in_child(self):
        self.active = False
        if self.modules is not None:
            try:
                self.modules.uninstall()
            except Exception:
                pass
        try:
            self.failures.disable_faulthandler()
        except Exception:
            pass

    def guarded(self, fn, *args):
        """fn(*args); an exception disables capture (reported once) instead of reaching the job."""
        try:
            return fn(*args)
        except Exception as exc:
            self.internal_error(exc)
            return None

    def internal_error(self, exc):
        if not self.active:
            return
        self.active = False
        self.error = exc
        message = "python hook disabled after an internal error: %s: %s (at %s)" % (
            type(exc).__name__, exc, _where(exc))
        for cleanup in (self._uninstall_module_hooks, self.steps.on_exit):
            try:
                cleanup()
            except Exception:
                pass
        self._report(0, message)

    def _uninstall_module_hooks(self):
        if self.modules is not None:
            self.modules.uninstall()

    def _report(self, ok, message):
        try:
            self.lib.dlrr_recorder_status(ok, native.text(message))
        except Exception:
            try:
                sys.stderr.write("dlrr: %s\n" % message)
            except Exception:
                pass

    def _on_torch(self, torch):
        """torch finished importing: patch the DataLoader, modules, backward and optimizers."""
        self.strategy.before_torch(torch)
        self.torch = torch
        # Libraries torch loads may install fatal-signal handlers over ours (Debian 13's torch
        # loads UCX, which re-raises with tgkill): ours back on top, theirs called from ours.
        self.failures.retake_first()
        if self.capture_level < native.CAPTURE_MINIMAL:
            # --capture process: no step is recorded, so torch is left unpatched; the fact tells
            # triage that "no step began" means "none recorded"
            self.lib.dlrr_runtime_info(b"capture.steps", b"not recorded (--capture process)")
            return
        self._tensor_type = torch.Tensor
        dataloader = importlib.import_module("torch.utils.data.dataloader")
        worker = importlib.import_module("torch.utils.data._utils.worker")
        module_module = importlib.import_module("torch.nn.modules.module")
        importlib.import_module("torch.optim")
        self.marshal = TensorMarshal(torch)
        self._prepare = self.marshal.prepare
        self.values = ValueWriter(self.lib, self.marshal, torch.Tensor)
        self.rng = RngCapture(self.lib, torch)
        self.gpu = gpu.GpuDigests(self.lib, torch, self.marshal, deferred=self.strategy.gpu_deferred,
                                  keep_ring=bool(self.keep_outputs))
        self._tensor_lists = self._native_tensor_lists(torch)
        if self.preflight is not None:  # inside the recorder's DataLoader patch: a cut is a pass end
            self.preflight.install_torch(self.patcher, torch, dataloader)
            self.preflight.install_cpu_fallback(self.patcher, torch)
        self.loaders = LoaderTracker(self, self.strategy.on_batch, self._on_loader_end,
                                     self.steps.note_loader_created)
        self.loaders.install(self.patcher, dataloader, worker)
        self.modules = ModuleTracker(self, torch, self.on_root, self._on_output,
                                     digest_outputs=self.capture_level >= native.CAPTURE_DEFAULT,
                                     native_digest=self.strategy.native_digest())
        self.modules.install(module_module)
        self.training = TrainingPatches(self, torch, self._before_backward, self._after_backward,
                                        self._before_optimizer_step, self._after_optimizer_step,
                                        self._optimizer_step_skipped)
        self.training.install(self.patcher)
        self._patch_compile(torch)
        self.dist = DistHooks(self, torch, self.strategy.dist_replay_mode())
        self.dist.install(self.patcher)
        self._patch_state_owners(torch)
        self.strategy.after_torch(torch)

    def _patch_state_owners(self, torch):
        """LR schedulers and grad scalers, in creation order (snapshots.py)."""
        sched = importlib.import_module("torch.optim.lr_scheduler")
        owners = [(getattr(sched, "LRScheduler", None) or getattr(sched, "_LRScheduler", None),
                   self.registry.note_scheduler),
                  # no LRScheduler on torch 1.x; on 2.x one whose __init__ does not run LRScheduler's
                  (getattr(sched, "ReduceLROnPlateau", None), self.registry.note_scheduler)]
        owners.append((grad_scaler_class(torch), self.registry.note_scaler))
        rec = self
        for cls, note in owners:
            if cls is None:
                continue

            def wrap(original, note=note):
                def __init__(self, *args, **kwargs):
                    original(self, *args, **kwargs)
                    if rec.active:
                        rec.guarded(note, self)
                return __init__
            self.patcher.wrap(cls, "__init__", wrap)

    def _preflight_fact(self, key, value):
        self.lib.dlrr_runtime_info(native.text(key), native.text(value))

    def _at_exit(self):
        self.guarded(self.failures.faulthandler_first, True)  # the interpreter is being torn down
        if not self.active:
            return
        self.guarded(self.failures.report_unhooked_exit_exception)
        if self.dist is not None:
            self.guarded(self.dist.flush_buckets)
            self.guarded(self.dist.flush_async)
        self.triage.report("exit")
        if self.preflight is not None:
            self.guarded(self.preflight.at_exit)
        if "torch.distributed.elastic.agent.server.api" in sys.modules and "RANK" not in os.environ:
            pass  # a torchrun agent: the ranks it started trained, each in its own stream
        elif self.torch is None:
            self._report(1, "no steps captured: torch was never imported")
        elif self.capture_level < native.CAPTURE_MINIMAL:
            self.guarded(self.send_runtime_info)
            self._report(1, "no steps captured: --capture process records none (entropy, files, processes, "
                            "exceptions and runtime facts only)")
        else:
            self.guarded(self.steps.on_exit)
            if self.active and self.steps.steps_begun == 0:
                self.guarded(self.send_runtime_info)
                self._report(1, "no steps captured: no DataLoader batch with gradients enabled "
                                "and no optimizer.step()")
        self.active = False  # nothing after the last commit

    def before_fetch(self, iterator):
        """A loader without workers is about to load a batch in this process (its sampler has
        drawn): the recorder learns whether loading draws random numbers (recorder.py)."""
        self.strategy.before_fetch(iterator)

    def snapshot_rng(self, step=None):
        """The StepTracker's: RNG states that will belong to optimizer-driven step `step`."""
        return self.strategy.snapshot_rng(step)

    # ------------------------------------------------------------------ StepTracker sink
    def begin_step(self, step, loader, batch_index, epoch, by_optimizer, rng):
        self.strategy.before_step(step)
        if not self.runtime_sent:  # a call saved per step: sent at the first
            self.send_runtime_info()
        if not self._cuda_info_sent:
            self._send_cuda_info()
        self.lib.dlrr_step_begin(step, loader, batch_index, epoch, int(by_optimizer))
        self.module_calls.clear()
        self._grad_calls.clear()
        self._param_calls.clear()
        self._backwards = 0
        self._parameters = None
        if rng is not None:
            self.strategy.write_step_rng(rng)
        if self.snapshots is not None:
            self.snapshots.at_step_start(step)
        self.strategy.step_begun(step, by_optimizer)

    def untrained_step(self, step):
        self.lib.dlrr_step_untrained(step)

    def end_step(self, step, loss):
        if self.dist is not None:
            self.dist.flush_buckets()
            self.dist.flush_async()
        if self.gpu is not None:
            gpu_loss = self._flush_gpu()
            if gpu_loss is not None:
                loss = gpu_loss
        self.strategy.commit_step(step, loss)
        self._roots.clear()
        self._parameters = None
        paths = self.modules.paths
        if not paths.tracks_registrations:
            paths.invalidate()  # no registration hooks (torch 1.x): names per step
        self.strategy.step_ended(step, loss)

    def send_runtime_info(self):
        if self.runtime_sent:
            return
        self.runtime_sent = True
        info = self.lib.dlrr_runtime_info
        for key, value in runtime.collect(self.torch):
            info(native.text(key), native.text(value))
        self._send_cuda_info(devices=False)  # collect() just sent them

    def _send_cuda_info(self, devices=True):
        """CUDA's devices and versions, once the job has initialised CUDA (possibly after the
        first step: then again, complete)."""
        cuda = getattr(self.torch, "cuda", None)
        if self._cuda_info_sent or cuda is None or not cuda.is_initialized():
            return
        self._cuda_info_sent = True
        info = self.lib.dlrr_runtime_info
        items = runtime.cuda_info(self.torch) if devices else []
        for key, value in items + gpu.cuda_facts(self.torch):
            info(native.text(key), native.text(value))

    def _flush_gpu(self):
        """The step's deferred device digests to the native side; the step's CUDA loss or None."""
        g = self.gpu
        lost = g.lost
        loss = g.flush()
        if g.lost != lost:
            self._report(0, "GPU digests of a step lost: the device failed (%s)" % g.last_error)
        return loss

    def before_failure(self):
        """An uncaught exception is being recorded: deliver the failing step's device digests,
        then take the failure snapshot when the step's start state is still live."""
        if self.gpu is not None and self.active:
            self.guarded(self._flush_gpu)
        if self.active and threading.current_thread() is threading.main_thread():
            self.guarded(self._exception_snapshot)

    def _exception_snapshot(self):
        """The exception ends the job inside a step that has run no backward() and no
        optimizer.step(): parameters, optimizer state and accumulated gradients are those the
        step began with, so the failing step can be replayed on its own (dlreplay --check).
        After either, the state has moved on and no snapshot is taken (one of another moment
        would make the replay of the step diverge)."""
        if self.steps.current_untrained:
            self.failure_snapshot()

    # ------------------------------------------------------------------ DataLoader
    def _on_loader_end(self, loader, iteration):
        self.lib.dlrr_loader_end(loader.number, iteration.number, iteration.count)
        self.steps.on_loader_end(loader.number)

    # ------------------------------------------------------------------ digests
    def failure_snapshot(self):
        """The first non-finite forward value: the step's start state is still live (snapshots.py)."""
        s = self.snapshots
        step = self.steps.current
        if s is not None and not s.failure_taken and step is not None and self.registry.roots:
            s.failure_taken = True
            s.take(step, True)

    def digest_prepared(self, kind, path, call_index, output, p, keep):
        """dlrr_digest of a tensor TensorMarshal.prepare()d: its return code (replay: 1 at a
        divergence); the digest is in last_digest."""
        return self._digest_fn(kind, path, call_index, output, p[1], p[3], p[4], p[5], p[6], keep, self._digest_ref)

    def _digest_in_batch(self, kind, path, call_index, tensor):
        """strategy.digest(kind, path, call_index, 0, tensor, 0), CPU tensors gathered into one
        dlrr_digest_many call that _flush_batch(kind) makes (the same events, in order)."""
        batch = self._batch
        g = self.gpu
        if batch is None or (g is not None and g.applies(tensor)):
            if batch is not None:
                batch.flush(kind)  # the events stay in call order
            self.strategy.digest(kind, path, call_index, 0, tensor, 0)
            return
        p = self._prepare(tensor)
        if p is not None:
            batch.add(path, call_index, 0, p, 0)

    def _flush_batch(self, kind):
        if self._batch is not None:
            self._batch.flush(kind)

    def _native_tensor_lists(self, torch):
        """The `_dlrr_native` extension's TensorListDigest (pyhook/ext/TensorListDigest.cc):
        the gradient and parameter loops below in C, gathering dense contiguous CPU tensors into
        one dlrr_digest_many through its address and handing every other tensor, in order, to
        _digest_in_batch; or None (no extension, DLRR_NATIVE_HOOKS=0, no batch): the loops."""
        ext = native_extension()
        make = getattr(ext, "TensorListDigest", None)
        if make is None or self._batch is None:
            return None
        address = native.address_of(self.lib.dlrr_digest_many)
        if address is None:
            return None
        try:
            return make(digest_many_address=address, dtypes=self.marshal.dtypes,
                        tensor_types=(torch.Tensor, torch.nn.Parameter), strided=torch.strided,
                        fallback=self._digest_alone)
        except Exception:  # an extension of another build
            return None

    def _digest_alone(self, kind, path, call_index, tensor):
        """TensorListDigest's fallback: one tensor as the loops digest it (the items before it
        are digested already)."""
        try:
            self._digest_in_batch(kind, path, call_index, tensor)
        finally:
            self._flush_batch(kind)

    def _native_lists(self):
        """The TensorListDigest to use now, or None.  It sends only tensors off the CPU to
        _digest_in_batch, which is exact while GpuDigests.applies is its own (tests route CPU
        tensors through the GPU path by replacing it)."""
        lists = self._tensor_lists
        if lists is not None and (self.gpu is None or self.gpu.applies is gpu.is_cuda):
            return lists
        return None

    def on_root(self, module, grad_enabled):
        if grad_enabled:
            self.registry.note_root(module)
        ref = self._roots.get(id(module))
        if ref is None or ref() is not module:
            self._roots[id(module)] = weakref.ref(module)  # never keeps a model alive
            if is_compiled(module):
                self._note_compiled(module)
        self.steps.on_root_forward(grad_enabled)

    def _note_compiled(self, module):
        """Say in the trace what is not verified under torch.compile (dltrace info's recorder
        notes and dltrace env's unverified.compiled show it)."""
        path = self.modules.paths.path_of(module, None, module).decode("utf-8", "surrogatepass")
        self._say_unverified("unverified.compiled", compiled_note(path))

    def _say_unverified(self, key, note):
        """The strategy's note_unverified, once per (key, note): callers meet the same thing again
        (a compiled root at every step, a function compiled twice) and the note must not repeat."""
        if (key, note) in self._unverified_said:
            return
        self._unverified_said.add((key, note))
        self.strategy.note_unverified(key, note)

    def _patch_compile(self, torch):
        """torch.compile of a plain function (not a module): module calls inside it are traced into
        the compiled graph, past the module hooks; say so, once per function."""
        if not callable(getattr(torch, "compile", None)):
            return
        recorder = self
        module_type = torch.nn.Module

        def wrap(original):
            def compile(model=None, *args, **kwargs):
                # The decorator form (@torch.compile(mode=...)) comes back here through torch's
                # own global name with the function.
                result = original(model, *args, **kwargs)
                if recorder.active and recorder.training is not None:
                    recorder.guarded(recorder.training.compiling)
                    recorder._compile_called = True
                    recorder.guarded(recorder.note_compiled_collectives)
                if model is not None and not isinstance(model, module_type) and recorder.active:
                    recorder.guarded(recorder._note_compiled_function, _callable_name(model))
                return result
            return compile
        self.patcher.wrap(torch, "compile", wrap)

    def note_compiled_collectives(self):
        """torch.compile in a torch.distributed job: dynamo turns the collectives it traces into
        functional collectives inside the graph, past the hook's wrappers (docs/distributed.md)."""
        if not self._compile_called or self._collectives_noted:
            return
        dist = getattr(self.torch, "distributed", None)
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
        self._collectives_noted = True
        self._say_unverified("unverified.compiled_collectives", COMPILED_COLLECTIVES_NOTE)

    def _note_compiled_function(self, name):
        self._say_unverified("unverified.compiled_function." + name, compiled_function_note(name))

    def _on_output(self, path, output):
        calls = self.module_calls
        call_index = calls.get(path, 0)
        calls[path] = call_index + 1
        tensor_type = self._tensor_type
        if isinstance(output, tensor_type):
            g = self.gpu
            if self._inline_outputs and (g is None or self.capture_level >= native.CAPTURE_FULL or
                                         not g.applies(output)):
                # RecordStrategy.digest's host path inlined: this runs for every module call of every step
                p = self._prepare(output)
                if p is not None:
                    self._digest_fn(native.DIGEST_MODULE_OUTPUT, path, call_index, 0, p[1], p[3], p[4], p[5],
                                    p[6], self.keep_outputs, self._digest_ref)
                    out = self.last_digest
                    if out.nan_count or out.inf_count:
                        self.failure_snapshot()
                return
            self.strategy.digest(native.DIGEST_MODULE_OUTPUT, path, call_index, 0, output, self.keep_outputs)
        else:
            for index, tensor in enumerate(_flat_tensors(output, tensor_type)):
                self.strategy.digest(native.DIGEST_MODULE_OUTPUT, path, call_index, index, tensor,
                                     self.keep_outputs)
        self.strategy.output_digested(path, call_index, output)

    def step_parameters(self):
        """([(name bytes, parameter)], {id(parameter): name}) of the roots seen in this step."""
        if self._parameters is None:
            lists = []
            for ref in list(self._roots.values()):
                root = ref()
                if root is not None:
                    lists.append(self.modules.paths.parameters(root))
            last = self._last_parameters
            # ModulePaths hands out the same list while a root's parameters are unchanged (and
            # never changes one), so the same lists in the same order give the same answer.
            if last is not None and len(last[0]) == len(lists) and all(a is b for a, b in zip(last[0], lists)):
                self._parameters = last[1]
                return self._parameters
            names = {}
            params = []
            for root_params in lists:
                for name, param in root_params:
                    if id(param) not in names:
                        names[id(param)] = name
                        params.append((name, param))
            self._parameters = (params, names)
            self._last_parameters = (lists, self._parameters)
        return self._parameters

    # ------------------------------------------------------------------ backward / step
    def _before_backward(self, tensors):
        self.strategy.before_backward(tensors)
        self.steps.on_backward()
        call_index = self._backwards
        self._backwards += 1
        hooks = self.modules.native_hooks if self.modules is not None else None
        for index, tensor in enumerate(tensors):
            # The native module hooks digest a dense CPU loss themselves (record only: they
            # answer None in replay, and for anything else), as strategy.digest would, and read its value.
            value = None if hooks is None else hooks.loss(tensor, call_index, index)
            if value is None:
                host = self.strategy.digest(native.DIGEST_LOSS, b"loss", call_index, index, tensor,
                                    self.keep_outputs)
                if index == 0 and host is not None and host.numel() == 1:
                    self.steps.on_loss(self._loss_value(tensor, float(host.item())))  # a non-scalar root: none
            elif index == 0 and value is not False:
                self.steps.on_loss(self._loss_value(tensor, float(tensor.item()) if value is True else value))
        self.strategy.loss_digested(tensors)

    def _loss_value(self, tensor, value):
        """The step's loss: the value backward() got, or, for a GradScaler's scaled loss, the
        loss it scaled (a CPU scalar here: the scale is on the loss's device)."""
        unscaled = self.training.unscaled_loss(tensor)
        return value if unscaled is None or unscaled.numel() != 1 else float(unscaled.item())

    def _after_backward(self):
        if self.strategy.fast_forwarding:
            self.strategy.backward_skipped()
            self.steps.on_backward_end()
            return
        if self.preflight is not None:
            self.preflight.on_update("backward")
        if self.dist is not None:
            # DDP waited for every bucket before backward() returned: before the gradient digests
            self.dist.flush_buckets()
            self.dist.flush_gradients()
        if self.capture_level >= native.CAPTURE_DEFAULT:
            lists = self._native_lists()
            if lists is not None:
                lists.gradients(native.DIGEST_GRADIENT, self.step_parameters()[0], self._grad_calls)
            else:
                self._digest_gradients()
        self.steps.on_backward_end()  # ends a step counted by backward()
        self.strategy.after_backward()

    def _digest_gradients(self):
        calls = self._grad_calls
        digest = self._digest_in_batch
        try:
            for name, param in self.step_parameters()[0]:
                grad = param.grad
                if grad is not None:
                    call_index = calls.get(name, 0)
                    calls[name] = call_index + 1
                    digest(native.DIGEST_GRADIENT, name, call_index, grad)
        finally:
            self._flush_batch(native.DIGEST_GRADIENT)

    def _before_optimizer_step(self, optimizer):
        self.steps.on_optimizer_step_begin()
        self.strategy.before_update(optimizer)

    def _after_optimizer_step(self, optimizer):
        step = self.steps.current  # a step counted by optimizer.step() ends below
        self.strategy.updated(optimizer)
        if not self._sharing_noted:
            self._sharing_noted = True
            self.guarded(self._note_sharing, optimizer)
        if self.capture_level >= native.CAPTURE_DEFAULT and not self.strategy.fast_forwarding:
            self._digest_parameters(optimizer)
        self.steps.on_optimizer_step_end()
        if self.preflight is not None:
            self.preflight.on_update("step")
        self.strategy.after_update(optimizer, step)

    def _optimizer_step_skipped(self, optimizer):
        """A GradScaler found non-finite gradients and skipped optimizer.step(): the iteration
        still ends a step counted by the optimizer (the parameters did not change: no digests)."""
        self.steps.on_optimizer_step_begin()
        self.steps.on_optimizer_step_end()

    def _note_sharing(self, optimizer):
        """How many parameters the process updates in shared memory (model.share_memory(),
        Hogwild): processes training such a model at once race (triage/Concurrency.h)."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        shared = sum(1 for p in params if p.is_shared())
        self.lib.dlrr_runtime_info(b"torch.shared_parameters", native.text("%d of %d" % (shared, len(params))))

    def _digest_parameters(self, optimizer):
        names = self.step_parameters()[1]
        number = self._optimizer_numbers.get(optimizer)
        if number is None:
            number = self._optimizer_numbers[optimizer] = len(self._optimizer_numbers)
        calls = self._param_calls
        lists = self._native_lists()
        if lists is not None:
            lists.parameters(native.DIGEST_PARAMETER, optimizer.param_groups, names, number, calls)
            return
        digest = self._digest_in_batch
        try:
            for g, group in enumerate(optimizer.param_groups):
                for i, param in enumerate(group["params"]):
                    name = names.get(id(param))
                    if name is None:
                        name = ("optimizer%d.group%d.%d" % (number, g, i)).encode()
                    call_index = calls.get(name, 0)
                    calls[name] = call_index + 1
                    digest(native.DIGEST_PARAMETER, name, call_index, param)
        finally:
            self._flush_batch(native.DIGEST_PARAMETER)


def _flat_tensors(value, tensor_type, depth=0):
    """Tensors of a module output in order: tuples/lists flattened, dict values in order."""
    if isinstance(value, tensor_type):
        return [value]
    out = []
    if depth > 16:
        return out
    if isinstance(value, (tuple, list)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        return out
    for item in items:
        if isinstance(item, tensor_type):
            out.append(item)
        else:
            out.extend(_flat_tensors(item, tensor_type, depth + 1))
    return out
