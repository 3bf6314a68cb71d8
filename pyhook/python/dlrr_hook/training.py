"""backward() and optimizer.step(): the loss, gradients, parameters and step activity.

Patch points:
  torch.Tensor.backward, torch.autograd.backward
      Tensor.backward calls torch.autograd.backward, and reentrant checkpointing calls it
      again from inside the running backward (on the autograd engine's device thread for
      CUDA), so a process-wide depth counter makes only the outermost call count.
      Arguments go through untouched (gradient, retain_graph, create_graph, inputs, ...),
      and so do exceptions.
  optimizer classes' step
      Optimizer.__init__ is wrapped to wrap type(self)'s step the first time a class is
      instantiated (where it is defined in the MRO), the way PyTorch itself hooks steps for
      the profiler; works on 1.x and 2.x.  Nested calls (a subclass calling super().step(),
      LBFGS closures) count once.
  GradScaler.step (torch.amp's, else torch.cuda.amp's)
      A scaler that found non-finite gradients skips optimizer.step(); its step() reports
      the skip (skipped_step), so that a loop counted by the optimizer still ends a step per
      iteration, as the job counts them (AMP skips the first iterations while its scale
      settles, and any iteration that overflows).
  GradScaler.scale
      Its output is the loss times the scale (2**16 to start, halved at each skipped update,
      doubled every growth_interval): backward() gets that, and its value is no loss the job
      knows. The wrapper keeps the loss it scaled (detached: not its graph), so that the step's
      loss is the job's (the scaled one is still what is digested and verified).
  torch.func.grad, torch.func.grad_and_value (torch 2.x)
      Functional training: the transform is wrapped so that the function it returns reports
      its outermost calls (a grad of a grad counts once); steps.py counts steps by them when
      no optimizer and no backward() do.  Under torch.compile the call goes straight through.

Under torch.compile (a whole training step compiled, backward() and optimizer.step() inside):
dynamo traces these wrappers like the job's own code, and the hook's bookkeeping (threading
state, numpy RNG reads) cannot be traced.  Once torch.compile has been called, the wrappers
take a branch when traced that calls the bookkeeping through functions dynamo leaves to run
eagerly (torch.compiler.disable: a graph break around it) and the original inside the graph,
as the job's own code would, so the compiled update is the one the job computes without dlrr.
"""

import functools
import threading
import weakref

from .patching import is_wrapped


def grad_scaler_class(torch):
    """The GradScaler class every scaler is an instance of: torch 2.3+'s torch.amp.GradScaler
    ("cpu" or "cuda"), the base of the deprecated torch.cuda.amp.GradScaler; before, the latter."""
    for amp in (getattr(torch, "amp", None), getattr(getattr(torch, "cuda", None), "amp", None)):
        cls = getattr(amp, "GradScaler", None)
        if isinstance(cls, type):
            return cls
    return None


def _loss_tensors(tensors, tensor_type):
    if isinstance(tensors, tensor_type):
        return (tensors,)
    try:
        return tuple(t for t in tensors if isinstance(t, tensor_type))
    except TypeError:
        return ()


class TrainingPatches:
    """Installs the backward/step wrappers; reports to the recorder's callbacks.

    Callbacks (all called inside the recorder's guard):
      before_backward(tensors)   just before the outermost backward runs
      after_backward()           after it returned normally
      before_step(optimizer)     just before an outermost optimizer.step()
      after_step(optimizer)      after it returned normally
      skipped_step(optimizer)    a GradScaler's outermost step() returned without calling it
    """

    def phase(self):
        """What runs now: "backward", "optimizer" (this thread inside optimizer.step()) or "forward"."""
        if self._backward_depth > 0:
            return "backward"
        return "optimizer" if self._local.__dict__.get("step", 0) > 0 else "forward"

    def __init__(self, recorder, torch, before_backward, after_backward, before_step, after_step,
                 skipped_step=None):
        self._rec = recorder
        self._torch = torch
        self._before_backward = before_backward
        self._after_backward = after_backward
        self._before_step = before_step
        self._after_step = after_step
        self._skipped_step = skipped_step
        self._scaled = None  # (weakref of a GradScaler.scale() output, the loss it scaled)
        self._local = threading.local()  # optimizer.step nesting, per thread
        self._backward_lock = threading.Lock()
        self._backward_depth = 0  # process-wide: see the module docstring
        self._gradient_depth = threading.local()  # torch.func gradient calls nest per thread
        self._patcher = None
        compiler = getattr(torch, "compiler", None)
        self._is_compiling = getattr(compiler, "is_compiling", None)  # torch 2.3+
        self._eager = None  # (backward enter, backward exit, step enter, step exit), see compiling()

    def install(self, patcher):
        self._patcher = patcher
        torch = self._torch
        patcher.wrap(torch.Tensor, "backward", self._wrap_tensor_backward)
        patcher.wrap(torch.autograd, "backward", self._wrap_autograd_backward)
        patcher.wrap(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init)
        scaler = grad_scaler_class(torch)
        if scaler is not None and self._skipped_step is not None:
            patcher.wrap(scaler, "step", self._wrap_scaler_step)
        if scaler is not None:
            patcher.wrap(scaler, "scale", self._wrap_scaler_scale)
        func = getattr(torch, "func", None)  # torch 2.0+
        for name in ("grad", "grad_and_value"):
            if func is not None and callable(getattr(func, name, None)):
                patcher.wrap(func, name, self._wrap_gradient_transform)

    def compiling(self):
        """torch.compile was called: makes the eager bookkeeping that traced wrappers call (the
        import of torch._dynamo is paid by the job's own compile, not by every job)."""
        if self._eager is not None or self._is_compiling is None:
            return
        disable = getattr(getattr(self._torch, "compiler", None), "disable", None)
        if disable is None:
            return
        self._eager = tuple(disable(f) for f in (self._backward_enter, self._backward_exit,
                                                 self._step_enter, self._step_exit))

    # -- the bookkeeping around backward() and optimizer.step(), eager or (compiling) disabled
    def _backward_enter(self, tensors):
        """Counts a backward in (process-wide: see the module docstring); the outermost reports."""
        with self._backward_lock:
            self._backward_depth += 1
            outermost = self._backward_depth == 1
        if outermost and self._rec.active:
            self._rec.guarded(self._before_backward, tensors)

    def _backward_exit(self, completed=True):
        with self._backward_lock:
            self._backward_depth -= 1
            outermost = self._backward_depth == 0
        if completed and outermost and self._rec.active:
            self._rec.guarded(self._after_backward)

    def _step_enter(self, optimizer):
        """Counts an optimizer.step in (per thread: nested calls count once); True: outermost."""
        depth = self._local.__dict__.get("step", 0)
        self._local.step = depth + 1
        if depth == 0 and self._rec.active:
            self._rec.guarded(self._before_step, optimizer)
        return depth == 0

    def _step_exit(self, optimizer, completed=True):
        self._local.step -= 1
        if completed and self._local.step == 0:
            self._local.updates = self._local.__dict__.get("updates", 0) + 1  # GradScaler.step's witness
            if self._rec.active:
                self._rec.guarded(self._after_step, optimizer)

    def _wrap_scaler_step(self, original):
        patches = self
        rec = self._rec

        def step(self, optimizer, *args, **kwargs):
            local = patches._local.__dict__
            if (not rec.active or local.get("step", 0) > 0
                    or (patches._eager is not None and patches._is_compiling())):
                return original(self, optimizer, *args, **kwargs)
            updates = local.get("updates", 0)
            result = original(self, optimizer, *args, **kwargs)
            if local.get("updates", 0) == updates and rec.active:  # no optimizer.step() ran
                rec.guarded(patches._skipped_step, optimizer)
            return result
        return step

    def _wrap_scaler_scale(self, original):
        patches = self
        tensor_type = self._torch.Tensor

        def scale(self, outputs, *args, **kwargs):
            result = original(self, outputs, *args, **kwargs)
            if (patches._rec.active and result is not outputs and isinstance(outputs, tensor_type)
                    and isinstance(result, tensor_type)
                    and not (patches._eager is not None and patches._is_compiling())):
                patches._scaled = (weakref.ref(result), outputs.detach())
            return result
        return scale

    def unscaled_loss(self, tensor):
        """The loss a GradScaler scaled into `tensor` (the output of its last scale()), else None."""
        scaled = self._scaled
        if scaled is not None and scaled[0]() is tensor:
            return scaled[1]
        return None

    # -- torch.func gradient transforms
    def in_gradient_call(self):
        """This thread runs inside an outermost torch.func gradient call (its function's forward)."""
        return bool(getattr(self._gradient_depth, "depth", 0))

    def _wrap_gradient_transform(self, original):
        patches = self
        compiler = getattr(self._torch, "compiler", None)
        is_compiling = getattr(compiler, "is_compiling", None)

        def transform(*args, **kwargs):  # patcher.wrap copies original's name and docstring
            if args:
                func, args = args[0], args[1:]
            elif "func" in kwargs:
                func = kwargs.pop("func")
            else:
                return original(*args, **kwargs)  # torch's own error, untouched
            if not callable(func):
                return original(func, *args, **kwargs)
            has_aux = kwargs.get("has_aux", args[1] if len(args) > 1 else False)
            losses = []  # the outermost call's loss, read where the function returns it

            @functools.wraps(func)
            def loss_reading(*a, **kw):
                out = func(*a, **kw)
                if losses == [None]:  # armed by the outermost call below
                    patches._rec.guarded(patches._read_loss, out[0] if has_aux else out, losses)
                return out
            gradient_fn = original(loss_reading, *args, **kwargs)

            @functools.wraps(gradient_fn)
            def call(*a, **kw):
                rec = patches._rec
                local = patches._gradient_depth
                if not rec.active or getattr(local, "depth", 0) or (is_compiling is not None and is_compiling()):
                    return gradient_fn(*a, **kw)
                rec.guarded(rec.steps.on_gradient_call)
                local.depth = 1
                losses[:] = [None]
                try:
                    result = gradient_fn(*a, **kw)
                finally:
                    local.depth = 0
                    loss = losses[0] if losses else None
                    losses.clear()
                if rec.active:
                    if loss is not None:
                        rec.guarded(rec.steps.on_loss, loss)
                    rec.guarded(rec.steps.on_gradient_call_end)
                return result
            return call
        return transform

    def _read_loss(self, value, losses):
        """The value the transformed function returned (the step's loss), as a float: inside the
        transform it is a functorch wrapper (GradTrackingTensor) whose bytes cannot be read, so the
        wrappers are peeled off to the plain tensor underneath. A batched value (vmap: one loss
        per sample) is no scalar loss and is left alone."""
        functorch = getattr(self._torch._C, "_functorch", None)
        if functorch is None or not isinstance(value, self._torch.Tensor):
            return
        while functorch.is_functorch_wrapped_tensor(value):
            if functorch.is_batchedtensor(value):
                return
            value = functorch.get_unwrapped(value)
        if value.numel() == 1:
            losses[0] = float(value.detach().item())

    # -- backward
    def _run_backward(self, original, tensors, args, kwargs):
        rec = self._rec
        if not rec.active:
            return original(*args, **kwargs)
        eager = self._eager
        if eager is not None and self._is_compiling():  # traced: see the module docstring
            eager[0](tensors)
            result = original(*args, **kwargs)
            eager[1]()
            return result
        self._backward_enter(tensors)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self._backward_exit(completed=False)
            raise
        self._backward_exit()
        return result

    def _wrap_tensor_backward(self, original):
        patches = self

        def backward(self, *args, **kwargs):
            return patches._run_backward(original, (self,), (self,) + args, kwargs)
        return backward

    def _wrap_autograd_backward(self, original):
        patches = self
        tensor_type = self._torch.Tensor

        def backward(*args, **kwargs):
            tensors = args[0] if args else kwargs.get("tensors", ())
            return patches._run_backward(original, _loss_tensors(tensors, tensor_type), args, kwargs)
        return backward

    # -- optimizer.step
    def _wrap_optimizer_init(self, original):
        patches = self

        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if patches._rec.active:
                patches._rec.guarded(patches.wrap_step_of, type(self))
                patches._rec.guarded(patches._rec.steps.note_optimizer_created)
                patches._rec.guarded(patches._rec.registry.note_optimizer, self)
        return __init__

    def wrap_step_of(self, cls):
        """Wraps the step method that instances of cls run, once, where it is defined."""
        for owner in cls.__mro__:
            if "step" in vars(owner):
                if not is_wrapped(vars(owner)["step"]):
                    self._patcher.wrap(owner, "step", self._wrap_step)
                return

    def _wrap_step(self, original):
        patches = self
        rec = self._rec

        def step(self, *args, **kwargs):
            if not rec.active:
                return original(self, *args, **kwargs)
            eager = patches._eager
            if eager is not None and patches._is_compiling():  # traced: see the module docstring
                eager[2](self)
                result = original(self, *args, **kwargs)
                eager[3](self)
                return result
            outermost = patches._step_enter(self)
            try:
                # Jump replay's fast-forward: the update is skipped (the snapshot restores it);
                # --what-if skip-step: the same, for the step the change starts at. A closure
                # (LBFGS, skorch's step_fn) still runs once, as the job's code after the step
                # expects (its loss returned, skorch's step accumulator filled).
                if outermost and (rec.strategy.fast_forwarding or rec.strategy.skip_update):
                    closure = kwargs.get("closure", args[0] if args else None)
                    result = None
                    if callable(closure):
                        with rec.torch.enable_grad():
                            result = closure()
                else:
                    result = original(self, *args, **kwargs)
            except BaseException:
                patches._step_exit(self, completed=False)
                raise
            patches._step_exit(self)
            return result
        return step
