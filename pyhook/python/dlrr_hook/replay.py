"""Replay mode: the recorded job runs again, fed from the trace, checked step by step.

The ReplayStrategy is the strategy the session core (session.py) holds in replay: the
core's sources swapped and its sink turned into checks, so step boundaries, loader
numbering, module paths and call indices are computed by exactly the same code as at record
time.  It uses the Session through its public members and is called at the Strategy hooks
only.  What replay changes:

  DataLoader.__iter__   returns a ReplayIterator: recorded batches, no workers, no dataset
  each delivery         RNG states (torch, NumPy, random) restored to the recorded ones;
                        a state that differed before the restore is reported as a warning
  digests               dlrr_digest compares with the recording (native side decides)
  step end              dlrr_step_end checks the loss and that every recorded digest of
                        the step was recomputed
  stop                  at the target (--until), at the first divergence, or when the job
                        runs past the recording; then the debugger (--debug) or exit

Targets for `nan`: the recording names what went non-finite first.  A module output: stop
once that module computed its output, if it is non-finite here too (finite: a divergence).
The loss: stop before backward(), if it is non-finite here too.  A gradient: the step's backward runs with autograd anomaly detection, which names the
backward function and the forward line that created it.  A parameter: stop after the
optimizer update that produced it.  The report also scans the step's batch for samples
holding non-finite or extreme values, and explains the failure (explain.py): the first op whose
output was non-finite in the failing step, the job's line that called it, its inputs and the
cause, with the build-up over the recorded steps before it.
"""

import atexit
import contextlib
import ctypes
import math
import os
import signal
import sys
import time
import warnings
import weakref

from . import failures, gpu, native, rng as rngmod, runtime
from .batches import BatchDecoder, BatchFormatError, UnrecordedValue
from .explain import Explainer, history
from .whatif import WhatIf
from .modules import fetching, in_fetch
from .session import Strategy, _flat_tensors
from .snapshots import restore_tree

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
_EXTREME = 1e6  # |x| above this in an input batch is named as extreme


BATCH_VALUE, BATCH_REF_HELD, BATCH_REF = 1, 2, 3  # dlrr_replay_batch_kind
PROCESS_CAPTURE_NOTE = ("recorded with --capture process: no steps, batches, losses or digests are in the trace; the "
                        "job ran on its own data with the recorded entropy and files, and no step was compared")


def _sample_file(dataset, index):
    """The file a dataset sample comes from, when the dataset says (torchvision's ImageFolder,
    DatasetFolder: .samples; a Subset's underlying dataset)."""
    for _ in range(8):
        if dataset is None:
            return None
        if hasattr(dataset, "indices") and hasattr(dataset, "dataset"):  # torch.utils.data.Subset
            try:
                index = dataset.indices[index]
            except Exception:
                return None
            dataset = dataset.dataset
            continue
        samples = getattr(dataset, "samples", None)
        try:
            entry = samples[index] if samples is not None else None
        except Exception:
            return None
        if isinstance(entry, (tuple, list)) and entry and isinstance(entry[0], str):
            return entry[0]
        return None
    return None


class ReplayIterator:
    """Stands in for a DataLoader's iterator during replay."""

    def __init__(self, replayer, loader):
        self._replayer = replayer
        self.loader = loader
        self.sampler_iter = None  # the loader's own index sampler, advanced batch by batch
        self.real = None  # the loader's own iterator, re-making batches recorded by reference

    def __iter__(self):
        return self

    def __len__(self):
        return len(self.loader)

    def __next__(self):
        return self._replayer.next_batch(self)


class ReplayHelpers:
    """`dlrr` in the debugger at a stop: what the replay knows about this point."""

    def __init__(self, replayer, reason, where):
        self._rep = replayer
        self.reason = reason
        self.where = where
        self.step = replayer.steps.current

    @property
    def module(self):
        """Path of the module whose computed output stopped the replay (nan target), else None."""
        return self.where if self._rep.target.kind == native.TARGET_NAN else None

    @property
    def inputs(self):
        """nan target: the positional inputs of the failing module's call (re-run it with
        `module(*dlrr.inputs)` to step into it), else None."""
        return self._rep.target_inputs

    def batch(self):
        """The batch of this step, as served to the job."""
        return self._rep.current_batch

    def recorded_tensors(self):
        """Full tensors the recording kept for this step: {"kind:path#call.output": tensor}."""
        return self._rep.recorded_tensors(self.step)

    def digests(self):
        """Recorded digests of this step: [(kind, path, call, output, hash, nan, inf, min, max)]."""
        return self._rep.recorded_digests(self.step)

    def __repr__(self):
        return ("<dlrr replay stop: %s at step %s%s; try dlrr.batch(), dlrr.recorded_tensors(), "
                "dlrr.digests()>" % (self.reason, self.step, (" before " + self.where) if self.where else ""))


def _user_frame(start):
    """The innermost frame outside this package, torch and the standard library's runpy."""
    import torch
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frame = start
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not (filename.startswith(_HOOK_DIR) or filename.startswith(torch_dir)):
            return frame
        frame = frame.f_back
    return start


class _ClearsProgress:
    """sys.stdout / sys.stderr of a replay showing a progress line: every write first erases
    the line (when shown); everything else is the stream's own."""

    def __init__(self, stream, clear, redraw):
        object.__setattr__(self, "_stream", stream)
        object.__setattr__(self, "_clear", clear)
        object.__setattr__(self, "_redraw", redraw)

    def write(self, text):
        if not text:
            return self._stream.write(text)
        self._clear()
        n = self._stream.write(text)
        if text.endswith("\n"):  # a whole line out (a terminal's streams flush there anyway): draw it again below
            self._stream.flush()
            self._redraw()
        return n

    def writelines(self, lines):
        self._clear()
        return self._stream.writelines(lines)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __setattr__(self, name, value):
        setattr(self._stream, name, value)


@contextlib.contextmanager
def _untraced(torch):
    """The hook's own tensor work, out of the sight of a torch.jit.trace in progress."""
    get = getattr(getattr(torch, "_C", None), "_get_tracing_state", None)
    state = get() if get is not None else None
    if state is None:
        yield
        return
    torch._C._set_tracing_state(None)
    try:
        yield
    finally:
        torch._C._set_tracing_state(state)


class ReplayStrategy(Strategy):
    """The hook in replay mode (dlrr_mode() == 2): serves what was recorded and checks what is
    computed (the Strategy hooks of session.py)."""

    inline_outputs = False  # module outputs through digest(): a divergence stops at the module
    gpu_deferred = False  # device digests checked at once, to stop at the divergence

    def __init__(self, session):
        super().__init__(session)
        lib = self.lib
        self.target = native.TargetT()
        lib.dlrr_replay_target(ctypes.byref(self.target))
        self.target_where = native.decode(self.target.where)
        self.debug = os.environ.get("DLRR_DEBUG", "")
        self.progress = os.environ.get("DLRR_PROGRESS") == "1"
        self.recorded_steps = lib.dlrr_replay_recorded_steps()
        self.last_step_begun = lib.dlrr_replay_last_step_begun()
        self.decoder = None
        self.current_batch = None
        self._batch_meta = None
        self.stopped = False
        self._armed = False
        self._nan_calls = {}
        self.target_inputs = None  # the failing module's inputs at the nan target (dlrr.inputs)
        self._rng_warned = False
        self._served_in_process = False  # a batch served where the job would have loaded it itself
        self._anomaly = None
        self._anomaly_warnings = []
        self._explainer = None  # the failing step's op-level check (nan target)
        self._whatif = None  # dlreplay --what-if: the change and what it brought (whatif.py)
        self._last_progress = 0.0
        self._progress_shown = False
        self._progress_text = ""
        self._start = time.monotonic()
        if self.progress:
            # The progress line shares the terminal with the job's output: erase it before the
            # job writes, or the job's line would continue it.
            atexit.register(self._clear_progress)  # dlreplay's report follows on the same terminal
            if sys.stdout is not None:
                sys.stdout = _ClearsProgress(sys.stdout, self._clear_progress, self._redraw_progress)
            if sys.stderr is not None:
                sys.stderr = _ClearsProgress(sys.stderr, self._clear_progress, self._redraw_progress)
        self._gpu_checked = False
        self._cuda_rng_warned = False
        # Jump replay: steps before the jump step are fast-forwarded (see _install_fast_forward).
        self.jump_step = lib.dlrr_replay_jump_step()
        self.fast_forwarding = self.jump_step > 0
        self.data_absent = os.environ.get("DLRR_DATA", "") == "absent"  # dlreplay --without-data
        self._persistent_loaders = weakref.WeakSet()  # persistent-worker loaders iterated once already

    # ------------------------------------------------------------------ set-up
    def install(self):
        self._track_stderr()
        atexit.register(self._end_line)  # after the job's own exit handlers (registered later)
        previous = sys.excepthook

        def excepthook(exc_type, exc, tb):
            result = previous(exc_type, exc, tb)  # the job's traceback first, as it would print
            if self.session.active and not issubclass(exc_type, SystemExit):
                self.session.guarded(self.on_exception, exc_type, exc, tb)
            return result
        self._prev_excepthook = previous
        self._our_excepthook = excepthook
        sys.excepthook = excepthook

    def _track_stderr(self):
        """Keeps the last character the job wrote to sys.stderr: a stop ends the job where a
        progress bar (tqdm's "\\r ... 50%|###") has no newline yet, and dlreplay's verdict line
        would follow it on the same line."""
        self._stderr_tail = ["\n"]
        stream = sys.stderr
        write = getattr(stream, "write", None)
        if write is None:
            return
        tail = self._stderr_tail

        def tracked(text, _write=write):
            written = _write(text)
            if text:
                tail[0] = text[-1:]
            return written
        try:
            stream.write = tracked
            self._stderr_tracked = (stream, tracked)
        except Exception:  # a stream that takes no attributes: no tracking, as before
            pass

    def _end_line(self):
        """The job ends: dlreplay's verdict follows on stderr, and starts a line of its own (after
        a progress bar's "\r ... 100%|###" without a newline, on a terminal or not)."""
        tail = getattr(self, "_stderr_tail", None)
        if tail is None or tail[0] in ("\n", ""):
            return
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os.write(2, b"\n")
        tail[0] = "\n"

    def uninstall(self):
        atexit.unregister(self._end_line)
        stream, tracked = getattr(self, "_stderr_tracked", (None, None))
        if stream is not None and getattr(stream, "__dict__", {}).get("write") is tracked:
            del stream.write
        if sys.excepthook is getattr(self, "_our_excepthook", None):
            sys.excepthook = self._prev_excepthook

    def before_torch(self, torch):
        self._restore_threads(torch)
        self._compare_runtime(torch)
        if self.session.capture_level < native.CAPTURE_MINIMAL:
            # No steps were recorded: the job runs on its own data, nothing is served or compared
            # (the core leaves torch unpatched).
            self.note_unverified("capture.process", PROCESS_CAPTURE_NOTE)
            return
        self.decoder = BatchDecoder(torch)
        dataloader = __import__("torch.utils.data.dataloader", fromlist=["DataLoader"])
        replayer = self

        def make_iter(original):
            def __iter__(self):
                if not replayer.session.active:
                    return original(self)
                # `is None`, not `or`: the truth of a ReplayIterator is its len(), which an
                # IterableDataset without __len__ raises (and an empty loader's is 0).
                iterator = replayer.session.guarded(replayer.make_iterator, self, original)
                return original(self) if iterator is None else iterator
            return __iter__
        # Ours takes the place of the LoaderTracker's __iter__ wrapper (the Patcher wraps a
        # method once), so make_iterator numbers the iteration itself.
        self.session.patcher.wrap(dataloader.DataLoader, "__iter__", make_iter)

    def after_torch(self, torch):
        module_module = __import__("torch.nn.modules.module", fromlist=["Module"])
        self._pre_handle = module_module.register_module_forward_pre_hook(self._pre_forward)
        if self.fast_forwarding:
            self._install_fast_forward(torch)
        what_if = os.environ.get("DLRR_WHAT_IF", "")
        if what_if:
            self._whatif = WhatIf(what_if, int(os.environ.get("DLRR_WHAT_IF_FROM", "0")),
                                  int(os.environ.get("DLRR_WHAT_IF_STEPS", "0") or 0), self.recorded_steps,
                                  torch, self.session.patcher)
            if self._whatif.start == 0:
                self._whatif.begin()
        elif self.target.kind == native.TARGET_NAN and self.target.step == 0:
            self.session.guarded(self._arm_explainer)  # the first step: checked from the start
        # A forked trainer attaching: the generator states it inherited come from a parent that
        # replay does not replay (its entropy is the OS's), so they are not the recording's.
        # The recording took them as the fork began (RngState.atFork): from here on they are,
        # and a difference at the first batch means the trainer drew differently.
        self._restore_rng(lambda kind, device, p, n: self.lib.dlrr_replay_rng_at_fork(kind, device, p, n),
                          "the fork", compare=False)

    def _install_fast_forward(self, torch):
        """Before the jump step, a root module's call returns zeros shaped like its real output
        (learnt from one real call per module and input shapes), requiring grad where the real one
        did, so the job's loss, backward() and logging run on trivial tensors; optimizer.step()
        is skipped (training.py). Loop counters, schedulers and Python-side state advance through
        the job's own code; the snapshot then restores what trains."""
        replayer = self
        templates = {}

        def wrap(original):
            def __call__(module, *args, **kwargs):
                if not replayer.fast_forwarding or not replayer.session.active or fetching() or \
                        replayer.session.modules.stack() or replayer._last_fast_forwarded() or \
                        replayer._in_functional_transform():
                    return original(module, *args, **kwargs)
                key = (id(module), module.training, torch.is_grad_enabled(), _shapes(args, kwargs, torch.Tensor))
                template = templates.get(key)
                if template is None:
                    out = original(module, *args, **kwargs)
                    templates[key] = replayer.session.guarded(_template, out, torch.Tensor) or False
                    return out
                replayer.session.guarded(replayer.session.on_root, module, torch.is_grad_enabled())
                if template is False or not replayer.fast_forwarding:  # the jump step began: compute
                    return original(module, *args, **kwargs)
                return _instantiate(template, torch)
            return __call__
        self.session.patcher.wrap(torch.nn.Module, "__call__", wrap)

    def _in_functional_transform(self):
        """A torch.func transform runs the module (functional_call inside grad, vmap, ...): its
        output must be computed. A stand-in cannot take part in the transform (requires_grad_()
        is refused inside one), and what such a loop trains is its own dict of tensors, which no
        snapshot holds: only the real gradients bring it to the jump step as recorded."""
        training = self.session.training
        if training is not None and training.in_gradient_call():
            return True
        functorch = getattr(self.session.torch._C, "_functorch", None)
        level = getattr(functorch, "maybe_current_level", None)
        return level is not None and level() is not None

    def _last_fast_forwarded(self):
        """The step just before the jump runs its modules for real (unverified; the snapshot
        then restores what trains): their random draws (dropout) move the generators as they
        did when recorded, so what the loop draws after them in that step (nanoGPT prefetches
        the next batch with torch.randint between forward and backward) is the recording's.
        Earlier steps need no such care: each step's generator states are restored at its start."""
        steps = self.steps
        step = steps.current if steps.current is not None else steps.steps_begun
        return step == self.jump_step - 1

    def _restore_jump(self, step):
        """At the jump step's start: load the recorded snapshot into the live objects."""
        self.fast_forwarding = False
        ptr, n = ctypes.c_void_p(), ctypes.c_uint64()
        if not self.lib.dlrr_replay_snapshot(step, ctypes.byref(ptr), ctypes.byref(n)):
            self.fact("warning", "jump: the trace holds no snapshot of step %d" % step)
            return
        with self._pausing():
            tree = self.decoder.decode(ctypes.string_at(ptr.value, n.value))
            problems = restore_tree(self.session.registry, tree, self.session.torch)
        self.fact("jump.restored", "step %d: %d module(s), %d optimizer(s), %d scheduler(s), %d grad scaler(s), "
                   "%d generator(s) of the job's" % (
                       step, len(tree.get("modules", [])), len(tree.get("optimizers", [])),
                       len(tree.get("schedulers", [])), len(tree.get("scalers", [])),
                       len(tree.get("generators") or {})))
        for p in problems:
            self.fact("warning", "jump: not restored: %s" % p)

    def dist_replay_mode(self):
        """How collectives replay: with real peers (all) or served from the trace (alone)."""
        from .dist import DIST_REPLAY_ALONE, DIST_REPLAY_ALL
        mode = os.environ.get("DLRR_DIST_REPLAY", "")
        return DIST_REPLAY_ALONE if mode == DIST_REPLAY_ALONE else DIST_REPLAY_ALL

    def _restore_threads(self, torch):
        want = native.decode(self.lib.dlrr_replay_runtime_info(b"torch.num_threads"))
        if want.isdigit() and int(want) != torch.get_num_threads():
            self.fact("env.threads", "torch intra-op threads set to the recorded %s (this machine's default: %d)"
                       % (want, torch.get_num_threads()))
            torch.set_num_threads(int(want))
        want = native.decode(self.lib.dlrr_replay_runtime_info(b"torch.num_interop_threads"))
        if want.isdigit() and int(want) != torch.get_num_interop_threads():
            try:
                torch.set_num_interop_threads(int(want))
            except RuntimeError:
                self.fact("warning", "could not restore %s inter-op threads" % want)

    def _compare_runtime(self, torch):
        from . import runtime
        for key, value in runtime.collect(torch):
            if key.startswith("env.") or key in ("torch.num_threads", "torch.num_interop_threads"):
                continue
            recorded = self.lib.dlrr_replay_runtime_info(native.text(key))
            if recorded is None:
                continue
            recorded = native.decode(recorded)
            if key == "blas":  # the same libraries, possibly mapped in another order
                recorded, value = sorted(recorded.split(":")), sorted(value.split(":"))
            # Settings the job makes after import (deterministic algorithms, cudnn flags) and the
            # GPU are compared at the first step instead (_compare_gpu).
            if recorded != value and key in ("python", "torch", "numpy", "blas", "cuda.compiled"):
                self.fact("warning", "%s differs: recorded %s, here %s; bit-exact replay may not hold"
                           % (key, recorded, value))

    def _compare_gpu(self, step):
        """Up front (at the first steps): warn when this GPU, driver or library versions differ
        from the recording's, since kernels then need not compute the same bits."""
        torch = self.session.torch
        cuda = getattr(torch, "cuda", None)
        recorded = lambda key: (lambda v: None if v is None else native.decode(v))(  # noqa: E731
            self.lib.dlrr_replay_runtime_info(native.text(key)))
        initialized = cuda is not None and cuda.is_initialized()
        if recorded("cuda.initialized") == "1" and not initialized and step < 2:
            return  # the job may initialise CUDA a little later, as it did when recorded
        self._gpu_checked = True
        here = dict(runtime.collect(torch))
        if initialized:
            here.update(gpu.cuda_facts(torch))
        for warning in gpu.compare_gpu(recorded, here):
            self.fact("warning", warning)
        status = native.decode(self.lib.dlrr_gpu_capture_status())
        if status:
            self.fact("gpu.capture_status", status)

    def fact(self, key, value):
        self.lib.dlrr_replay_fact(native.text(key), native.text(value))

    def note_unverified(self, key, note):
        """dlreplay prints every note, one per line ("unverified: ..." each): the report keeps every
        value of a repeated key (replayer/ReplayReport.h); Session._say_unverified sends each once."""
        self.fact("verify.unverified", note)

    # ------------------------------------------------------------------ batches
    def make_iterator(self, loader, original=None):
        torch = self.session.torch
        iterator = ReplayIterator(self, loader)
        state = self.session.loaders.loader_state(loader)
        kind = self.lib.dlrr_replay_batch_kind(state.number, state.batches)
        if kind in (BATCH_REF_HELD, BATCH_REF) and not self.data_absent and original is not None:
            # Recorded by reference: the job's own iterator (its sampler, base seed, workers)
            # re-makes each batch, checked against the recorded digest (docs/replay.md).
            iterator.real = original(loader)
            self.session.loaders.begin_iteration(loader, iterator)
            return iterator
        # The real iterator makes its index sampler's iterator, then draws its base seed from
        # the global generator; its samplers draw as batches are taken (RandomSampler,
        # SubsetRandomSampler, WeightedRandomSampler, the job's own): run the loader's own
        # sampler batch by batch so the generators stay where the recording had them.
        # (Mimicking RandomSampler alone left every other sampler's draws out: a faithful
        # replay warned that the job drew random numbers differently, issue 18.13.)
        try:
            iterator.sampler_iter = iter(loader._index_sampler)
        except Exception:
            iterator.sampler_iter = None
        # A loader with persistent workers makes its iterator once and only resets it at later
        # epochs: a new sampler iterator, no new base seed (no draw then).
        persistent = getattr(loader, "persistent_workers", False) and getattr(loader, "num_workers", 0) > 0
        if not (persistent and loader in self._persistent_loaders):
            torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
        if persistent:
            self._persistent_loaders.add(loader)
        self.session.loaders.begin_iteration(loader, iterator)
        return iterator

    def next_batch(self, iterator):
        iteration = self.session.loaders.iteration_of(iterator)
        loader = iteration.loader
        length = self.lib.dlrr_replay_iterator_length(loader.number, iteration.number)
        if 0 <= length <= iteration.count:
            self.session.loaders.stopped(iterator)
            raise StopIteration
        if iterator.real is not None:
            return self._remade_batch(iterator, loader)
        # A loader without workers loads in this process: what its Dataset or collate_fn drew
        # (augmentation) was drawn when recorded, not here, where the batch is served. The
        # recording says whether it drew (RecordStrategy._probe_load_draws): then the comparison at
        # this delivery would blame the job for that, and it is skipped.
        self._served_in_process = getattr(iterator.loader, "num_workers", 0) == 0 and bool(
            self.lib.dlrr_replay_runtime_info(native.text("rng.loader.%d.draws_while_loading" % loader.number)))
        kind = self.lib.dlrr_replay_batch_kind(loader.number, loader.batches)
        if iterator.sampler_iter is not None:
            try:
                next(iterator.sampler_iter)  # its random draws; the batch itself is served
            except Exception:
                iterator.sampler_iter = None  # exhausted or failing: the recording decides
        ptr, n = ctypes.c_void_p(), ctypes.c_uint64()
        # The jump step's own batch comes while fast-forwarding still holds (its step begins at
        # delivery): it must be served for real, never as a fast-forward stand-in.
        if kind == BATCH_REF and (not self.fast_forwarding or self._batch_step(loader)[0] >= self.jump_step):
            self._refuse_dataless(loader, "its bytes are not in the trace (outside the window) and this replay runs "
                                  "without the dataset (--without-data)")
            raise StopIteration
        serve = self.lib.dlrr_replay_batch_stand_in if kind == BATCH_REF else self.lib.dlrr_replay_batch
        if not serve(loader.number, loader.batches, ctypes.byref(ptr), ctypes.byref(n)):
            where = "batch %d of loader %d" % (loader.batches, loader.number)
            if self.target.kind == native.TARGET_CRASH and self._crash_while_loading():
                # The recorded job failed while loading this batch: replay serves recorded
                # batches and does not re-run the loading code, so this is the crash point.
                self.stop("target", "the recorded exception was raised while loading %s (replay serves "
                          "recorded batches, so the loading code is not re-run; `dltrace events --kind "
                          "failure` shows its traceback)" % where, sys._getframe(1))
            else:
                self.stop("end-of-recording", "%s is not in the recording: the recorded job ended here"
                          % where, sys._getframe(1))
            raise StopIteration
        try:
            with self._pausing():
                data = self.decoder.decode(ctypes.string_at(ptr.value, n.value) if n.value else b"")
        except BatchFormatError as exc:
            self._refuse_unservable(loader, exc)
            raise StopIteration
        if self._explainer is not None:  # an input sample is a tensor of the batch served
            self._explainer.samples = {t.data_ptr() for _, t in _tensors_with_paths(data, self.session.torch.Tensor)}
        step, training = ctypes.c_int64(-1), ctypes.c_int(0)
        idx, nidx = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_uint64()
        self.lib.dlrr_replay_batch_meta(loader.number, loader.batches, ctypes.byref(step), ctypes.byref(training),
                                        ctypes.byref(idx), ctypes.byref(nidx))
        iterator._dlrr_index = [idx[i] for i in range(nidx.value)]
        self._batch_meta = (loader.number, loader.batches, iterator._dlrr_index)
        self.current_batch = data
        self.session.loaders.after_next(iterator, data, None)
        if self._whatif is not None and self._whatif.live:  # (after_next began the step: the change is on)
            data = self.current_batch = self._whatif.filter_batch(data, iterator._dlrr_index)
        return data

    def before_fetch(self, iterator):
        """Nothing: replay serves the batch (next_batch), no loading code runs."""

    def _batch_step(self, loader):
        step, training = ctypes.c_int64(-1), ctypes.c_int(0)
        idx, nidx = ctypes.POINTER(ctypes.c_int64)(), ctypes.c_uint64()
        self.lib.dlrr_replay_batch_meta(loader.number, loader.batches, ctypes.byref(step), ctypes.byref(training),
                                        ctypes.byref(idx), ctypes.byref(nidx))
        return step.value, [idx[i] for i in range(nidx.value)]

    def _batch_map(self):
        buf = ctypes.create_string_buffer(4096)
        self.lib.dlrr_replay_batch_map(buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def _refuse_unservable(self, loader, exc):
        """A batch the trace cannot give back as the job had it: the replay cannot go on, and
        that is no divergence (nothing was computed differently)."""
        step, _ = self._batch_step(loader)
        if isinstance(exc, UnrecordedValue):
            why = ("holds a value dlrr did not record (%s), so it cannot be replayed from the trace (dlrr records "
                   "tensors, numpy arrays, numbers, str, bytes, None and lists, tuples and dicts of them)"
                   % exc.type_name)
        else:
            why = "cannot be read back from the trace (%s)" % exc
        self.stop("unservable", "batch %d of loader %d (step %s) %s" % (
            loader.batches, loader.number, step if step >= 0 else "-", why),
            sys._getframe(2), step=step if step >= 0 else None)

    def _refuse_dataless(self, loader, why):
        step, _ = self._batch_step(loader)
        self.stop("unservable", "batch %d of loader %d (step %s) was recorded by reference: %s. This trace: %s"
                  % (loader.batches, loader.number, step if step >= 0 else "-", why, self._batch_map()),
                  sys._getframe(2), step=step if step >= 0 else None)

    def _remade_batch(self, iterator, loader):
        """The next batch re-made by the job's own iterator, checked against the recorded digest."""
        real = iterator.real
        try:
            with in_fetch():
                data = real._next_data()
        except StopIteration:
            self._diverge(self.steps.current, native.DIGEST_BATCH, "loader %d" % loader.number,
                          "the job's loader ended before batch %d of loader %d; the recording had it"
                          % (loader.batches, loader.number))
            raise
        except OSError as exc:  # the dataset is not here (or not readable)
            self._refuse_dataless(loader, "re-making it through the job's pipeline failed (%s: %s); replay it "
                                  "without the dataset with dlreplay --without-data, from the window"
                                  % (type(exc).__name__, exc))
            raise StopIteration
        real._num_yielded += 1
        step, indices = self._batch_step(loader)
        self.lib.dlrr_replay_remade_begin(loader.number, loader.batches)
        self.session.values.write(data)
        what = ctypes.create_string_buffer(512)
        pos = ctypes.c_int64(-1)
        rc = self.lib.dlrr_replay_remade_end(what, len(what), ctypes.byref(pos))
        iterator._dlrr_index = indices
        self._batch_meta = (loader.number, loader.batches, indices)
        self.current_batch = data
        if rc == 0:
            detail = "batch %d of loader %d (step %s), re-made from the dataset, differs from the recording: %s" % (
                loader.batches, loader.number, step if step >= 0 else "-", what.value.decode("utf-8", "replace"))
            if 0 <= pos.value < len(indices):
                detail += "; dataset index %d" % indices[pos.value]
                path = _sample_file(getattr(iterator.loader, "dataset", None), indices[pos.value])
                if path:
                    detail += ", file %s" % path
            step = step if step >= 0 else self.steps.current
            self.lib.dlrr_replay_diverged(-1 if step is None else step, native.DIGEST_BATCH,
                                          native.text("loader %d batch %d" % (loader.number, loader.batches)),
                                          native.text(detail))
            self.stop("divergence", detail, sys._getframe(1), step=step)
            raise StopIteration
        self.session.loaders.after_next(iterator, data, None)
        return data

    def _crash_while_loading(self):
        """The recorded exception was raised while a DataLoader loaded a batch (its traceback
        passes through torch.utils.data): the batch the trace lacks is then the crash point.
        Otherwise a job asking for it got past where the recording failed (the failure did not
        happen again): the end of the recording, never the crash reproduced."""
        loading = ctypes.c_int(0)
        self.lib.dlrr_replay_recorded_exception(ctypes.byref(loading))
        return bool(loading.value)

    def on_batch(self, info, data):
        self.session.modules.reset_stack()
        training = self.steps.on_batch(info.loader, info.index, info.iteration, self.session.torch.is_grad_enabled())
        self._restore_rng(lambda kind, device, p, n: self.lib.dlrr_replay_rng_at_batch(
            info.loader, info.index, kind, device, p, n), "batch %d of loader %d" % (info.index, info.loader))
        step = self.steps.current
        if training and step is not None:
            self._at_step_start(step)

    def _restore_rng(self, fetch, what, compare=True):
        # A step may begin inside torch.jit.trace's runs of the job's module (a root's forward):
        # the tracer would record these tensor ops as the job's and warn at .numpy().
        with _untraced(self.session.torch):
            self._restore_rng_states(fetch, what, compare)

    def _restore_rng_states(self, fetch, what, compare):
        torch = self.session.torch
        differed = []
        # Fast-forwarded steps skip their draws (dropout in a skipped forward): no drift to report.
        quiet = self.fast_forwarding or not compare or self._served_in_process
        self._served_in_process = False  # restored here: from now on the recording's states again
        for kind, device in self._rng_slots():
            ptr, n = ctypes.c_void_p(), ctypes.c_uint64()
            if not fetch(kind, device, ctypes.byref(ptr), ctypes.byref(n)):
                continue
            data = ctypes.string_at(ptr.value, n.value)
            if kind == native.RNG_TORCH_CPU:
                if not quiet and bytes(torch.get_rng_state().numpy().tobytes()) != data:
                    differed.append("torch")
                torch.set_rng_state(torch.frombuffer(bytearray(data), dtype=torch.uint8))
            elif kind == native.RNG_TORCH_CUDA:
                if not torch.cuda.is_available():
                    if not self._cuda_rng_warned:
                        self._cuda_rng_warned = True
                        self.fact("warning", "the recording has CUDA RNG states but CUDA is not available here: "
                                   "GPU randomness (dropout on the GPU) cannot be replayed")
                    continue
                if torch.cuda.is_initialized() and bytes(torch.cuda.get_rng_state(device).numpy().tobytes()) != data:
                    differed.append("cuda:%d" % device)
                torch.cuda.set_rng_state(torch.frombuffer(bytearray(data), dtype=torch.uint8), device)
            elif kind == native.RNG_NUMPY:
                np = sys.modules.get("numpy")
                if np is not None:
                    state = rngmod.numpy_state_from_bytes(data)
                    if not quiet and self.session.rng.numpy_bytes() != data:
                        differed.append("numpy")
                    np.random.set_state(state)
            elif kind == native.RNG_PYTHON:
                rnd = sys.modules.get("random")
                if rnd is not None:
                    if not quiet and self.session.rng.python_bytes() != data:
                        differed.append("random")
                    rnd.setstate(rngmod.python_state_from_bytes(data))
        if differed and not self._rng_warned and not quiet:
            self._rng_warned = True
            self.fact("warning", "RNG state (%s) at %s differed from the recording before it was restored; "
                       "the job drew random numbers differently between steps" % (", ".join(differed), what))

    def _rng_slots(self):
        slots = [(native.RNG_TORCH_CPU, native.NO_DEVICE), (native.RNG_NUMPY, native.NO_DEVICE),
                 (native.RNG_PYTHON, native.NO_DEVICE)]
        cuda = getattr(self.session.torch, "cuda", None)
        if cuda is not None and cuda.is_available():
            slots += [(native.RNG_TORCH_CUDA, d) for d in range(cuda.device_count())]
        elif not self._cuda_rng_warned:
            slots.append((native.RNG_TORCH_CUDA, 0))  # only to say it cannot be restored
        return slots

    # ------------------------------------------------------------------ steps
    def snapshot_rng(self, step=None):
        # The recording took the RNG states of the next optimizer-counted step here, at this
        # very instant (StepTracker): restore them here too, not when the step is announced.
        if step is None:
            step = self.steps.steps_begun
        self._restore_rng(lambda kind, device, p, n: self.lib.dlrr_replay_rng_at_step(step, kind, device, p, n),
                          "step %d" % step)
        return ()  # "taken": the tracker must not ask again when the step is announced

    def write_step_rng(self, rng):
        """Nothing: snapshot_rng restored the recorded states."""

    def commit_step(self, step, loss):
        self.lib.dlrr_step_end(step, loss)

    def before_step(self, step):
        if step > self.last_step_begun and not self.stopped:
            # A loop without a DataLoader (or one past its last batch) goes on where the recorded
            # job was killed or its trace cut: nothing there to check, and nothing verified.
            self.stop("end-of-recording", "step %d is not in the recording: the trace ends %s" % (
                step, "in step %d" % self.last_step_begun if self.last_step_begun >= 0 else "before the first step"),
                sys._getframe(1), step=step)

    def step_begun(self, step, by_optimizer):
        if not self._gpu_checked:
            self._compare_gpu(step)
        self._nan_calls.clear()
        if by_optimizer:
            self._at_step_start(step)

    def _at_step_start(self, step):
        t = self.target
        if self.fast_forwarding and step >= self.jump_step:
            self._restore_jump(step)
        if self.stopped:
            return
        if self._whatif is not None:  # no stop at the target: the change runs from its step
            if step >= self._whatif.start:
                if not self._whatif.live:
                    self._whatif.begin()
                self.skip_update = self._whatif.skips_update(step)
            return
        if t.kind == native.TARGET_STEP and step == t.step:
            self.stop("target", "start of step %d, its batch in hand, before the forward pass" % step,
                      sys._getframe(1))
        elif t.kind == native.TARGET_NAN and step == t.step:
            self._armed = True
            self.session.guarded(self._arm_explainer)
            if t.digest_kind == native.DIGEST_GRADIENT:
                self._arm_anomaly()

    def _arm_explainer(self):
        """The failing step runs under the op-level check (explain.py); replay only."""
        if self._explainer is not None or self.stopped:
            return
        torch = self.session.torch
        samples = {t.data_ptr() for _, t in _tensors_with_paths(self.current_batch, torch.Tensor)}
        self._explainer = Explainer(torch, self.session.training.phase, self._running_module, samples)
        self._explainer.enter()

    def _what_if_step_end(self, step, loss):
        w = self._whatif
        if not w.live:
            if step == w.start - 1:
                # From the end of the step before, as the explainer: an autocast region the job
                # enters before its first module call (which announces a step) is changed too.
                w.begin()
            return
        if step not in w.losses and loss is not None:
            w.losses[step] = float(loss)
        self.skip_update = False
        if w.done(step):
            self.stop("target", "what-if %s: %s" % (w.text, "recurred at step %d" % w.recurred[0] if w.recurred
                                                    else "ran to step %d" % step), sys._getframe(1), step=step)

    def _what_if_tensors(self, kind, named):
        """Checks (name, tensor) pairs of a step with the change for NaN/Inf."""
        w = self._whatif
        step = self.steps.current
        for name, t in named:
            if t is not None:
                if isinstance(name, bytes):
                    name = name.decode("utf-8", "surrogatepass")
                w.note(step, "%s %s" % (kind, name), t)

    def _pausing(self):
        """Context for dlrr's own tensor work while the failing step is checked."""
        return self._explainer.paused() if self._explainer is not None else contextlib.nullcontext()

    def _running_module(self):
        """Path of the innermost module running now (the replay's module stack), or None."""
        stack = self.session.modules.stack()
        if not stack:
            return None
        parent = stack[-2] if len(stack) > 1 else None
        return self.session.modules.paths.path_of(stack[-1], parent, stack[0]).decode("utf-8", "surrogatepass") or "<root>"

    def step_ended(self, step, loss):
        if self.stopped:
            return
        divergence = native.decode(self.lib.dlrr_replay_divergence())
        if divergence:
            self.stop("divergence", divergence, sys._getframe(1))
        elif self._whatif is not None:
            self._what_if_step_end(step, loss)
        elif self.target.kind == native.TARGET_NAN and step == self.target.step - 1:
            # From the end of the step before: the job's code between steps (a loop that scales
            # its batch before the first module call, which announces a step) is checked too.
            self.session.guarded(self._arm_explainer)
        if self.progress:
            self._show_progress(step)

    def _show_progress(self, step):
        now = time.monotonic()
        rate = (step + 1) / max(now - self._start, 1e-9)
        self._progress_text = "dlreplay: step %d of %d (%.1f steps/s)" % (step + 1, self.recorded_steps, rate)
        if now - self._last_progress < 0.5:
            return  # redrawn after the job's next line, or later
        self._last_progress = now
        self._redraw_progress()

    def _redraw_progress(self):
        if self._progress_text and not self.stopped:
            os.write(2, ("\r%s\x1b[K" % self._progress_text).encode())
            self._progress_shown = True

    def _clear_progress(self):
        if self._progress_shown:
            self._progress_shown = False
            os.write(2, b"\r\x1b[K")

    # ------------------------------------------------------------------ checks
    def native_digest(self):
        """Module outputs are compared through _on_output (the native hooks keep the stack and
        the paths only)."""
        return None

    def digest(self, kind, path, call_index, output, tensor, keep):
        if self.fast_forwarding:
            return None  # nothing to compare: the step's compute was skipped
        if self._explainer is not None:
            with self._explainer.paused():  # dlrr's own tensor work is not the job's
                return self._check_digest(kind, path, call_index, output, tensor)
        return self._check_digest(kind, path, call_index, output, tensor)

    def _check_digest(self, kind, path, call_index, output, tensor):
        w = self._whatif
        if w is not None and w.live:  # the change runs: nothing to compare, only NaN/Inf to see
            name = native.DIGEST_KIND_NAMES[kind] if 0 <= kind < len(native.DIGEST_KIND_NAMES) else "tensor"
            p = path.decode("utf-8", "surrogatepass") if isinstance(path, bytes) else str(path)
            w.note(self.steps.current, name if p == "loss" else "%s %s" % (name, p or "<root>"), tensor)
            return tensor.detach()
        g = self.session.gpu
        if g is not None and g.applies(tensor) and self.session.capture_level < native.CAPTURE_FULL:
            rc = g.digest(kind, path, call_index, output, tensor, 0)  # like the recording: on the device
            if rc == 1 and not self.stopped:
                self.stop("divergence", native.decode(self.lib.dlrr_replay_divergence()), sys._getframe(1))
            return tensor.detach()
        prepared = self.session.marshal.prepare(tensor)
        if prepared is None:
            return None
        rc = self.session.digest_prepared(kind, path, call_index, output, prepared, 0)
        if rc == 1 and not self.stopped:
            self.stop("divergence", native.decode(self.lib.dlrr_replay_divergence()), sys._getframe(1))
        return prepared[0]

    def _pre_forward(self, module, args):
        """Counts the calls of the recorded failing module in the target step; at the recorded
        call, keeps its inputs (`dlrr.inputs` at the stop). The stop itself waits for the
        module's output (_on_output): reproduction is decided by values the replay computed."""
        if not self._armed or self.stopped or self.target.digest_kind != native.DIGEST_MODULE_OUTPUT:
            return None
        try:
            stack = self.session.modules.stack() or [module]
            parent = stack[-2] if len(stack) > 1 else None
            path = self.session.modules.paths.path_of(module, parent, stack[0]).decode("utf-8", "surrogatepass")
            shown = path or "<root>"
            n = self._nan_calls.get(shown, 0)
            self._nan_calls[shown] = n + 1
            if shown == self.target_where and n == self.target.call_index:
                self.target_inputs = args
                if self._explainer is not None and self._explainer.found is None:
                    self._look_ahead(module, args, shown)  # before the call; _on_output then stops
        except Exception as exc:
            self.session.internal_error(exc)
        return None

    def output_digested(self, path, call_index, output):
        """Digested and compared already (a differing output stopped there): the nan target."""
        if not self._armed or self.stopped or self.target.digest_kind != native.DIGEST_MODULE_OUTPUT:
            return
        shown = path.decode("utf-8", "surrogatepass") or "<root>"
        if shown != self.target_where or call_index != self.target.call_index:
            return
        self._armed = False
        step = self.steps.current
        counts = _non_finite(output, self.session.torch)
        if counts is None:
            self._diverge(step, native.DIGEST_MODULE_OUTPUT, shown, "module %s (call %d) of step %s: the recording's "
                          "first non-finite value was this output; this replay computed it finite"
                          % (shown, call_index, step))
            return
        self.stop("target", "at module %s (call %d) of step %s: its output, computed by this replay, is non-finite "
                  "(%d NaN, %d Inf), the recording's first non-finite value; `dlrr.inputs` holds its inputs"
                  % (shown, call_index, step, counts[0], counts[1]), sys._getframe(1), scan_batch=True)

    def _diverge(self, step, kind, where, detail):
        """A divergence found from values this replay computed: reported as one, exit 11."""
        self.lib.dlrr_replay_diverged(-1 if step is None else step, kind, native.text(where), native.text(detail))
        self.stop("divergence", detail, sys._getframe(2))

    def _look_ahead(self, module, args, path):
        """The first bad op lies inside the module the replay stops before: run its forward
        once, outside the replay (explain.py), so that the stop can name it."""
        self.session.active = False  # dlrr's module hooks stand aside
        try:
            self._explainer.look_ahead(module, args, path)
        finally:
            self.session.active = True

    def before_backward(self, tensors):
        if self._explainer is not None and self._armed and not self.stopped:
            self.session.guarded(self._explainer.hook_graph, tensors)

    def loss_digested(self, tensors):
        if self._anomaly is not None and not self.stopped:
            # Anomaly mode's checks launch kernels the recording cannot have, on autograd's
            # threads: the step's launches are compared up to here, and not past it.
            self.lib.dlrr_gpu_check_launches_now(b"before backward(), where anomaly mode's checks (replay only) "
                                                 b"begin")
        if self._armed and not self.stopped and self.target.digest_kind == native.DIGEST_LOSS:
            self._armed = False
            if tensors and _non_finite(tensors[0], self.session.torch) is None:
                self._diverge(self.steps.current, native.DIGEST_LOSS, "loss", "loss of step %s: recorded non-finite; "
                              "this replay computed it finite" % self.steps.current)
                return
            if self.session.capture_level <= native.CAPTURE_MINIMAL:
                # Minimal capture digests no module outputs: whether one was non-finite is unknown.
                what = ("the loss was not finite (module outputs were not recorded under --capture "
                        "minimal: whether one was non-finite first is not known)")
            else:
                what = "every module output was finite, the loss was not"
            self.stop("target", "before backward() of step %d: %s" % (self.steps.current, what), sys._getframe(1),
                      scan_batch=True)

    def backward_skipped(self):
        """No gradients to digest: the step's compute was skipped. A step counted by backward()
        still ends (the core ends it). What the job's code runs after backward() reads .grad,
        which the stand-in outputs never reached: a hand-written update, a GradScaler's
        unscale_() (which asserts that it found gradients), clip_grad_norm_. Zeros keep it
        running and change nothing: the optimizer's update is skipped too, and the snapshot
        restores parameters, gradients, the optimizer's and the scaler's state at the jump."""
        for _, param in self.session.step_parameters()[0]:
            if param.grad is None and param.requires_grad:
                param.grad = self.session.torch.zeros_like(param)

    def after_backward(self):
        if self._whatif is not None and self._whatif.live:
            self._what_if_tensors("gradient", ((n, p.grad) for n, p in self.session.step_parameters()[0]))
        if self._anomaly is not None:
            self._anomaly.__exit__(None, None, None)
            self._anomaly = None
        if self._armed and not self.stopped and self.target.digest_kind == native.DIGEST_GRADIENT:
            # Anomaly mode raises at a NaN only: an infinite gradient ends backward() normally.
            self._armed = False
            self.stop("target", "after backward() of step %d: the forward was finite, the gradient %s was not"
                      % (self.steps.current, self.target_where), sys._getframe(1), scan_batch=True)

    def before_update(self, optimizer):
        if self._whatif is not None and self._whatif.live:
            self._whatif.before_update(optimizer)

    def updated(self, optimizer):
        if self._whatif is not None and self._whatif.live:
            self._whatif.after_update(optimizer)
            self._what_if_tensors("parameter", self.session.step_parameters()[0])

    def after_update(self, optimizer, step):
        if self._armed and not self.stopped and self.target.digest_kind == native.DIGEST_PARAMETER:
            self._armed = False
            if not self._parameter_non_finite(optimizer):
                self._diverge(step, native.DIGEST_PARAMETER, self.target_where, "%s after %s.step() of step %s: "
                              "recorded non-finite; this replay computed it finite"
                              % (self.target_where, type(optimizer).__name__, step))
                return
            self.stop("target", "after %s.step() of step %d: gradients were finite, the update made %s "
                      "non-finite" % (type(optimizer).__name__, step, self.target_where),
                      sys._getframe(1), scan_batch=True, step=step)

    def _parameter_non_finite(self, optimizer):
        """Whether the recorded failing parameter (else any of the optimizer's) is non-finite now."""
        name = self.target_where[len("param:"):] if self.target_where.startswith("param:") else self.target_where
        for pname, param in self.session.step_parameters()[0]:
            if pname.decode("utf-8", "surrogatepass") == name:
                return _non_finite(param, self.session.torch) is not None
        return any(_non_finite(p, self.session.torch) is not None
                   for group in optimizer.param_groups for p in group["params"])

    def _arm_anomaly(self):
        torch = self.session.torch
        self._anomaly = torch.autograd.detect_anomaly()
        self._anomaly.__enter__()
        original = warnings.showwarning

        def showwarning(message, category, filename, lineno, file=None, line=None):
            self._anomaly_warnings.append(str(message))
            return original(message, category, filename, lineno, file, line)
        warnings.showwarning = showwarning

    # ------------------------------------------------------------------ failures
    def on_exception(self, exc_type, exc, tb):
        """Called from the excepthook wrapper before the job's own hook prints it."""
        if self.stopped:
            return
        t = self.target
        text = "%s: %s" % (exc_type.__name__, exc)
        if self._whatif is not None and self._whatif.live:
            self._whatif.note_exception(self.steps.current, text)
            self.stop("target", "what-if %s: the job raised %s" % (self._whatif.text, text), None, tb=tb)
        elif t.kind == native.TARGET_NAN and t.digest_kind == native.DIGEST_GRADIENT and "returned nan" in str(exc):
            fn = str(exc).split("'")[1] if "'" in str(exc) else "?"
            self.fact("backward.function", fn)
            forward = [w for w in self._anomaly_warnings if "Traceback of forward call" in w]
            if forward:
                lines = [l.strip() for l in forward[-1].splitlines() if l.strip().startswith("File ")]
                user = [l for l in lines if _HOOK_DIR not in l and "/torch/" not in l]
                if user:
                    self.fact("backward.forward_line", user[-1])
            self.stop("target", "backward of step %d: %s" % (self.steps.current, text), None, tb=tb,
                      scan_batch=True)
        elif t.kind == native.TARGET_CRASH:
            # The same failure: an exception of the recorded type (another one is a divergence,
            # which dlreplay names from the report's exception).
            recorded = native.decode(self.lib.dlrr_replay_recorded_exception(None))
            if not recorded or recorded == failures.exception_type_name(exc_type):
                self.stop("target", "the recorded exception: %s" % text, None, tb=tb)

    # ------------------------------------------------------------------ stopping
    def stop(self, reason, detail, frame, tb=None, scan_batch=False, step=None):
        if self.stopped:
            return
        self.stopped = True
        if self.progress:
            self._progress_shown = True
            self._clear_progress()
        if step is None:
            step = self.steps.current
        self.fact("stop.step", "-" if step is None else str(step))
        self.fact("stop.where", detail)
        if self._explainer is not None:
            self._explainer.exit()  # what follows is dlrr's work
            self.session.guarded(self._explain_facts, step)
        if self._whatif is not None and self._whatif.live:
            self._whatif.end()
            for key, text in self._whatif.facts(step, self.lib.dlrr_replay_recorded_loss):
                self.fact(key, text)
        if scan_batch:
            for line in self._scan_batch():
                self.fact("batch.samples", line)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if getattr(self, "_stderr_tail", ["\n"])[0] not in ("\n", ""):
            os.write(2, b"\n")  # the verdict starts a line of its own (after tqdm's "\r...")
            self._stderr_tail[0] = "\n"
        self.lib.dlrr_replay_stop(native.text(reason))  # writes the report; then gdb breaks
        if self.debug == "pdb":
            self._pdb(reason, detail, frame, tb)
        elif self.debug == "wait":
            self._wait_for_debugger(reason, detail)
        elif self.debug.startswith("debugpy"):
            self._debugpy(reason, detail, frame)
        elif self.debug == "gdb":
            pass  # gdb stopped in dlrr_replay_stopped; the job goes on when gdb continues
        else:
            os._exit(0)

    def _explain_facts(self, step):
        found = self._explainer.found
        for key, text in self._explainer.facts():
            if key == "explain.cause" and found.kind == "non-finite input sample":
                named = self._scan_batch()[:1]  # which sample: position and dataset index
                text += "".join("; " + line for line in named)
            self.fact(key, text)
        if found is None:
            self.fact("explain.cause", "no op of the replayed step %s made a non-finite value under the op-level "
                       "check" % step)
        lrs = []
        for opt in self.session.registry.live(self.session.registry.optimizers):
            lrs.extend("%.4g (%s)" % (g["lr"], type(opt).__name__) for g in opt.param_groups[:1]
                       if isinstance(g.get("lr"), (int, float)))
        text = (history(self.recorded_digests, step, lrs, step_loss=self.lib.dlrr_replay_recorded_loss)
                if step is not None else None)
        if text:
            self.fact("explain.history", text)

    def _pdb(self, reason, detail, frame, tb):
        import pdb
        helpers = ReplayHelpers(self, reason, self.target_where if self.target.kind == native.TARGET_NAN else None)
        sys.stderr.write("dlrr: replay stopped (%s): %s\ndlrr: `dlrr` holds the replay helpers: %r\n"
                         % (reason, detail, helpers))
        found = self._explainer.found if self._explainer is not None else None
        if found is not None:
            sys.stderr.write("dlrr: the first non-finite value: %s at %s\ndlrr:   %s: %s\n"
                             % (found.op_text(), found.line_text(), found.kind, found.cause))
        debugger = pdb.Pdb()
        if tb is not None:
            debugger.reset()
            top = tb
            while top.tb_next is not None:
                top = top.tb_next
            top.tb_frame.f_globals.setdefault("dlrr", helpers)
            debugger.interaction(None, tb)
            self._end_if_quit(debugger)
            return
        frame = _user_frame(frame or sys._getframe(1))
        frame.f_globals["dlrr"] = helpers
        # Prompt in the user's frame now (pdb.set_trace would first stop at the next event,
        # inside torch); then, if the user stepped rather than continued, trace from here.
        debugger.reset()
        debugger.interaction(frame, None)
        self._end_if_quit(debugger)
        if debugger.stoplineno != -1:  # step / next / until / return
            f = frame
            while f is not None:
                f.f_trace = debugger.trace_dispatch
                debugger.botframe = f
                f = f.f_back
            sys.settrace(debugger.trace_dispatch)

    def _debugpy(self, reason, detail, frame):
        """Waits at the stop for a DAP client (VS Code's Remote Attach), then pauses there.

        The adapter runs in this process (in_process_debug_adapter): a separate adapter process
        would start with this replay's environment (the preload, the hook) and be a second job."""
        try:
            os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # a note per start otherwise
            import debugpy
        except ImportError:
            self._debugpy_failed(reason, detail, "this Python has no debugpy (Debian: apt install python3-debugpy)")
        where = self.debug.split(":", 1)[1] if ":" in self.debug else "5678"
        host, _, port = where.rpartition(":")
        host, port = host or "127.0.0.1", int(port)
        try:
            if port == 0:  # the in-process adapter does not say which port it got: pick a free one
                import socket
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                    probe.bind((host, 0))
                    port = probe.getsockname()[1]
            debugpy.listen((host, port), in_process_debug_adapter=True)
        except Exception as e:
            self._debugpy_failed(reason, detail, "cannot listen on %s:%d: %s" % (host, port, e))
        helpers = ReplayHelpers(self, reason, self.target_where if self.target.kind == native.TARGET_NAN else None)
        user = _user_frame(frame or sys._getframe(1))
        user.f_globals["dlrr"] = helpers
        sys.stderr.write(
            "dlrr: replay stopped (%s): %s\n"
            "dlrr: debugpy listening on %s:%d: attach a DAP client (VS Code: \"Python: Remote Attach\", "
            "host %s, port %d); the job waits\n" % (reason, detail, host, port, host, port))
        sys.stderr.flush()
        debugpy.wait_for_client()
        sys.stderr.write("dlrr: debugger attached; paused at the stop (your code is a few frames up: "
                         "`dlrr` there holds the replay helpers)\n")
        sys.stderr.flush()
        debugpy.breakpoint()

    @staticmethod
    def _debugpy_failed(reason, detail, why):
        """The report is written; the job must not train on past the stop without its debugger."""
        sys.stderr.write("dlrr: replay stopped (%s): %s\ndlrr: --debug debugpy: %s; the replay ends here\n"
                         % (reason, detail, why))
        sys.stderr.flush()
        os._exit(0)

    @staticmethod
    def _end_if_quit(debugger):
        """`q` at the stop ends the replay (the report is written): the job must not train on."""
        if not debugger.quitting:
            return
        sys.stderr.write("dlrr: quit: the replay ends here\n")
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)

    def _wait_for_debugger(self, reason, detail):
        pid = os.getpid()
        sys.stderr.write(
            "dlrr: replay stopped (%s): %s\n"
            "dlrr: process %d is waiting for a debugger:\n"
            "dlrr:   gdb -p %d        attach (the job resumes when gdb detaches or quits)\n"
            "dlrr:   kill -USR1 %d    resume without attaching\n"
            % (reason, detail, pid, pid, pid))
        sys.stderr.flush()
        resumed = []
        previous = {sig: signal.signal(sig, lambda *a: resumed.append(1)) for sig in (signal.SIGUSR1, signal.SIGCONT)}
        # A debugger that attaches stops every thread of this process, so only another
        # process can see the attach and the detach: a tiny watcher, which signals us when
        # our TracerPid goes from set back to 0.
        watcher = os.fork()
        if watcher == 0:
            _watch_tracer(pid)
        try:
            while not resumed:
                time.sleep(0.05)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            try:
                os.kill(watcher, signal.SIGKILL)
                os.waitpid(watcher, 0)
            except OSError:
                pass
        sys.stderr.write("dlrr: resumed\n")

    # ------------------------------------------------------------------ report helpers
    def _scan_batch(self):
        """Lines naming the samples of this step's batch with non-finite or extreme values."""
        torch = self.session.torch
        if self.current_batch is None:
            return []
        indices = self._batch_meta[2] if self._batch_meta else []
        out = []
        for path, tensor in _tensors_with_paths(self.current_batch, torch.Tensor):
            if not tensor.is_floating_point() or tensor.dim() == 0:
                continue
            t = tensor.detach().reshape(tensor.shape[0], -1).double()
            finite = torch.isfinite(t)
            bad = (~finite).sum(dim=1)
            mag = torch.where(finite, t.abs(), torch.zeros_like(t)).max(dim=1).values
            for i in range(t.shape[0]):
                nbad, m = int(bad[i]), float(mag[i])
                if nbad or m > _EXTREME:
                    where = "dataset index %d" % indices[i] if i < len(indices) else "dataset index unknown"
                    field = " of field %s" % path if path else ""
                    out.append("sample %d%s (%s): %d non-finite values, largest finite |x| %.3g"
                               % (i, field, where, nbad, m))
        return out[:20]

    def recorded_tensors(self, step):
        ptr, n = ctypes.c_void_p(), ctypes.c_uint64()
        if step is None or not self.lib.dlrr_replay_recorded_tensors(step, ctypes.byref(ptr), ctypes.byref(n)):
            return {}
        return self.decoder.decode(ctypes.string_at(ptr.value, n.value))

    def recorded_digests(self, step):
        """[(kind, path, call, output, hash, nan, inf, min, max)], as text: see _digest_row."""
        if step is None:
            return []
        items, n = ctypes.POINTER(native.RecordedDigestT)(), ctypes.c_uint64()
        if not self.lib.dlrr_replay_recorded_digests(step, ctypes.byref(items), ctypes.byref(n)):
            return []
        return [_digest_row(items[i]) for i in range(n.value)]


def _non_finite(value, torch):
    """(NaN count, Inf count) over the floating tensors in `value` when any is non-finite, else
    None: what this replay computed, not what the recording says. A complex tensor's parts are
    counted, as the recorded digest counts them."""
    nan = inf = 0
    for t in _flat_tensors(value, torch.Tensor):
        if not (t.is_floating_point() or t.is_complex()):
            continue
        t = t.detach()
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj())
        nan += int(torch.isnan(t).sum())
        inf += int(torch.isinf(t).sum())
    return (nan, inf) if nan or inf else None


def _digest_row(d):
    """A recorded digest (native.RecordedDigestT) as the text the replay prints: the kind's
    name, the path ("<root>" for the root module), call and output, the hash in hex, NaN and
    Inf counts, min and max with 9 significant digits."""
    kind = native.DIGEST_KIND_NAMES[d.kind] if 0 <= d.kind < len(native.DIGEST_KIND_NAMES) else "tensor"
    v = d.digest
    return (kind, native.decode(d.path) or "<root>", str(d.call_index), str(d.output), "0x%016x" % v.hash,
            str(v.nan_count), str(v.inf_count), _num(v.min), _num(v.max))


def _num(x):
    return "nan" if math.isnan(x) else "%.9g" % x


def _watch_tracer(pid):
    """In a forked child: signal `pid` once a debugger has attached to it and detached."""
    attached = False
    try:
        while True:
            tracer = _tracer_pid(pid)
            if tracer < 0:
                break  # the process is gone
            if tracer:
                attached = True
            elif attached:
                os.kill(pid, signal.SIGUSR1)
                break
            time.sleep(0.01)
    finally:
        os._exit(0)


def _tracer_pid(pid="self"):
    try:
        with open("/proc/%s/status" % pid) as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        return -1
    return 0


def _tensors_with_paths(value, tensor_type, prefix=""):
    if isinstance(value, tensor_type):
        yield prefix, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors_with_paths(item, tensor_type, "%s.%d" % (prefix, i) if prefix else str(i))
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _tensors_with_paths(item, tensor_type, "%s.%s" % (prefix, k) if prefix else str(k))


def _shapes(args, kwargs, tensor_type):
    """What a root's output shape may depend on: its tensor arguments' shapes and dtypes."""
    def one(v):
        if isinstance(v, tensor_type):
            return (tuple(v.shape), v.dtype, v.device.type)
        if isinstance(v, (list, tuple)):
            return tuple(one(x) for x in v)
        if isinstance(v, dict):
            return tuple((k, one(x)) for k, x in v.items())
        return type(v).__name__
    return (one(args), one(kwargs))


def _template(value, tensor_type, depth=0):
    """A recipe for a stand-in of `value` (None: a type fast-forward cannot stand in for)."""
    if isinstance(value, tensor_type):
        return ("T", tuple(value.shape), value.dtype, value.device, value.requires_grad)
    if depth > 8:
        return None
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        items = [_template(v, tensor_type, depth + 1) for v in value]
        return None if any(i is None for i in items) else ("L" if type(value) is list else "U", items)
    if type(value) is dict:
        items = {k: _template(v, tensor_type, depth + 1) for k, v in value.items()}
        return None if any(i is None for i in items.values()) else ("D", items)
    if value is None or isinstance(value, (bool, int, float, str)):
        return ("V", value)
    return None


def _instantiate(t, torch):
    kind = t[0]
    if kind == "T":
        z = torch.zeros(t[1], dtype=t[2], device=t[3])
        return z.requires_grad_() if t[4] and z.is_floating_point() else z
    if kind == "L":
        return [_instantiate(i, torch) for i in t[1]]
    if kind == "U":
        return tuple(_instantiate(i, torch) for i in t[1])
    if kind == "D":
        return {k: _instantiate(i, torch) for k, i in t[1].items()}
    return t[1]
