"""What a training step is: the one place that decides step boundaries.

StepTracker is pure logic (no torch, no ctypes): it is fed events by the patches and tells
a sink when a step begins and ends.  Record mode's sink writes dlrr_step_begin/_end; replay
will feed the same events and use the same boundaries.
"""

import math

from . import native


_NONE = object()  # no RNG snapshot pending (a snapshot itself may be None: replay)


class _Step:
    __slots__ = ("number", "loader", "rule", "by_optimizer", "trained", "backward_ran", "gradient_called")

    def __init__(self, number, loader, rule):
        self.number = number
        self.loader = loader
        self.rule = rule  # native.STEP_BY_*
        self.by_optimizer = rule != native.STEP_BY_BATCH  # not DataLoader-driven
        self.trained = False  # a backward() or optimizer.step() ran in it
        self.backward_ran = False  # a backward() ran in it
        self.gradient_called = False  # a torch.func gradient call that counts steps returned in it


class StepTracker:
    """Step boundaries of a training job.

    Steps are numbered from 0 in the order training batches reach the loop, across epochs
    (as one global counter over the training loader's batches would count them); loops
    without a DataLoader count optimizer steps instead, and loops without an optimizer either
    (parameters updated by hand) count backward() calls.

    DataLoader-driven steps:
      - A batch delivery (a DataLoader iterator's __next__ returning a batch) begins a step
        when torch.is_grad_enabled() and neither its iteration (one pass over the loader) nor
        its loader has been classified as evaluation.
      - An iteration becomes an evaluation pass once one of its batches was followed by the
        next delivery (of any loader) with no backward() and no optimizer.step() in between.
        Its loader becomes an eval loader too, unless it ever trained (one of its batches was
        followed by backward() or optimizer.step()): a loader used for training and for
        evaluation (ignite's `evaluator.run(train_loader)`, whose evaluator enters no_grad
        only after the batch is delivered) drives steps again at its next training pass.
        Consequences: an eval loader iterated with grad enabled costs one spurious step, for
        its first batch only; a training loader evaluated with grad enabled costs one per
        evaluation pass; of two loaders zipped for training, the first is classified eval
        and the second drives the steps (one step per loop iteration, as wanted).
      - The step ends at the next batch delivery, at the StopIteration of the loader that
        began it, or at process exit (atexit), whichever comes first.  The end is the commit
        point (dlrr_step_end) and carries the last loss passed to backward() in the step
        (NaN when there was none).

    Optimizer-driven steps, while no DataLoader batch has begun a step:
      - Step k ends when an optimizer.step() returns (outermost calls only; a GradScaler's
        step() that skipped it, its gradients not finite, counts as one) after a backward() of
        the step; step k+1 begins right then: its RNG states are taken at that instant.
        Another optimizer's step() with no backward() since (two optimizers updating after
        one backward(): a sparse and a dense one, per-group optimizers) is training work of
        step k+1, so that the loop's iterations stay its steps.  A job that never runs
        backward() (gradients set by hand) ends a step at every optimizer.step().  A step is
        announced (dlrr_step_begin) at its first sign of training work - a grad-enabled
        forward of a root module, backward() or optimizer.step() - so that the end of the loop
        leaves no empty step behind.
      - Step 0 begins at the first sign of training work.  Once a DataLoader exists, a
        forward alone opens step 0 only tentatively (RNG taken, nothing announced) until
        backward() or optimizer.step() confirms it: a dry-run forward before a DataLoader
        loop must not steal step 0 from the first training batch.
      - The first DataLoader batch that begins a step switches to DataLoader-driven steps for
        good; an optimizer-driven step still open ends there and numbering continues.
      - A step begun while no optimizer has been constructed is counted by backward() instead:
        it ends when the outermost backward() returns (the hand-written update after it runs
        between steps), and the next one begins right then, exactly as above.  An optimizer
        constructed while that step has run no backward() yet (a forward that materialised
        lazy modules, torch.jit.trace's runs, a shape check, then the optimizer) makes it
        counted by optimizer.step() after all: it ends at the first update, so that the job's
        first iteration stays step 0 and is not split at its backward().  It keeps its
        label (StepBegin is written when the step begins).
      - Functional training (torch.func.grad / grad_and_value, parameters updated by hand, no
        backward() and no optimizer) is counted by the outermost calls of those gradient
        transforms, the way batches count DataLoader-driven steps: a step begins at such a call
        (its RNG states taken there) and ends where the next one begins, or at exit, so that the
        hand-written update and what the job logs after it (a forward with the new parameters)
        belong to the iteration that computed the gradients: one step per loop iteration.
        Steps are labelled STEP_BY_GRADIENT_CALL from the first call on.  A grad-enabled
        forward run before the first call has already begun step 0 as counted by backward():
        that one step keeps the label (StepBegin is written when the step begins) and ends at
        the second call.  Once backward() has run, backward() counts the steps and gradient
        calls end none.

    A step in which no backward() and no optimizer.step() ran (an evaluation batch drawn with
    gradients enabled, a trailing forward) is reported to the sink by untrained_step(step)
    just before its end: it had no loss and is not a training step.

    The sink provides snapshot_rng(step), begin_step(step, loader, batch_index, epoch,
    by_optimizer, rng), untrained_step(step) and end_step(step, loss); by_optimizer is the
    counting rule, native.STEP_BY_BATCH (0), STEP_BY_OPTIMIZER, STEP_BY_BACKWARD or
    STEP_BY_GRADIENT_CALL.  snapshot_rng(step) is called at the exact
    program point that defines the RNG states of optimizer-driven step `step` (record takes
    them there, replay restores them there); its result comes back as begin_step's rng.  For
    DataLoader-driven steps rng is None: the caller handles the RNG states of every delivery.
    """

    def __init__(self, sink):
        self._sink = sink
        self._next = 0
        self._open = None
        self._loss = math.nan
        self._loader_driven = False
        self._loader_exists = False
        self._eval_loaders = set()
        self._eval_iterations = set()  # (loader, epoch): passes that were evaluations
        self._trained_loaders = set()  # loaders one of whose batches was followed by training
        self._last_loader = None
        self._last_iteration = None
        self._activity = False
        self._pending_rng = _NONE
        self._optimizer_steps = 0
        self._optimizer_exists = False
        self._gradient_calls_count = False  # a torch.func gradient call has ended a step
        self._backward_seen = False

    # -- queries
    @property
    def current(self):
        """Number of the open step, or None."""
        return None if self._open is None else self._open.number

    @property
    def steps_begun(self):
        return self._next

    @property
    def current_rule(self):
        """The counting rule of the open step (native.STEP_BY_*), or None."""
        return None if self._open is None else self._open.rule

    @property
    def current_untrained(self):
        """A step is open and has run no backward() nor optimizer.step() yet: the training
        state is still the one it began with."""
        return self._open is not None and not self._open.trained

    def is_eval_loader(self, loader):
        return loader in self._eval_loaders

    # -- events
    def note_loader_created(self):
        self._loader_exists = True

    def note_optimizer_created(self):
        """From then on, steps without a DataLoader are counted by optimizer.step(), the open
        one too while it has run no backward()."""
        self._optimizer_exists = True
        step = self._open
        if step is not None and step.rule == native.STEP_BY_BACKWARD and not step.trained:
            step.rule = native.STEP_BY_OPTIMIZER

    def on_batch(self, loader, batch_index, epoch, grad_enabled):
        """A batch of `loader` reached the loop.  Returns True when it begins a step."""
        previous = self._last_loader
        if previous is not None and not self._activity:
            self._eval_iterations.add(self._last_iteration)
            if previous not in self._trained_loaders:
                self._eval_loaders.add(previous)
        elif previous is not None:
            self._trained_loaders.add(previous)
            self._eval_loaders.discard(previous)
        self._last_loader = loader
        self._last_iteration = (loader, epoch)
        self._activity = False
        training = grad_enabled and loader not in self._eval_loaders and (loader, epoch) not in self._eval_iterations
        if self._open is not None and (training or not self._open.by_optimizer):
            self._end()
        if training:
            self._loader_driven = True
            self._pending_rng = _NONE
            self._begin(loader, batch_index, epoch, native.STEP_BY_BATCH, None)
        return training

    def on_loader_end(self, loader):
        """The iterator of `loader` raised StopIteration."""
        if self._open is not None and not self._open.by_optimizer and self._open.loader == loader:
            self._end()

    def on_root_forward(self, grad_enabled):
        """A module was called with no module executing (a root), before its forward."""
        if not grad_enabled or self._loader_driven or self._open is not None:
            return
        if self._next == 0 and self._loader_exists:
            if self._pending_rng is _NONE:
                self._pending_rng = self._sink.snapshot_rng(0)
            return
        self._begin_optimizer_step()

    def on_backward(self):
        """backward() is about to run."""
        self._activity = True
        self._backward_seen = True
        if self._open is None and not self._loader_driven:
            self._begin_optimizer_step()
        if self._open is not None:
            self._open.trained = True
            self._open.backward_ran = True

    def on_backward_end(self):
        """The outermost backward() returned (its gradients digested)."""
        if self._open is not None and self._open.rule in (native.STEP_BY_BACKWARD, native.STEP_BY_GRADIENT_CALL):
            self._end()
            self._pending_rng = self._sink.snapshot_rng(self._next)

    def on_gradient_call(self):
        """An outermost call of a torch.func gradient transform (grad, grad_and_value) begins."""
        self._activity = True
        if self._open is not None and self._open.gradient_called and not self._backward_seen:
            self._end()  # the previous call's step, its update and logging done
        if self._open is None and not self._loader_driven:
            self._begin_optimizer_step(gradient_call=True)
        if self._open is not None:
            self._open.trained = True

    def on_gradient_call_end(self):
        """That call returned: when nothing else counts steps, its step ends where the next
        call begins (or at exit)."""
        if self._open is None or self._open.rule not in (native.STEP_BY_BACKWARD, native.STEP_BY_GRADIENT_CALL):
            return
        if self._backward_seen:
            return  # backward() counts this job's steps
        self._gradient_calls_count = True
        self._open.gradient_called = True

    def on_loss(self, value):
        if self._open is not None:
            self._loss = value

    def on_optimizer_step_begin(self):
        self._activity = True
        self._optimizer_exists = True
        if self._open is None and not self._loader_driven:
            self._begin_optimizer_step()
        if self._open is not None:
            self._open.trained = True

    def on_optimizer_step_end(self):
        """An outermost optimizer.step() returned: the end of a step counted by optimizer.step()
        that ran backward(), or of any such step in a job that never runs backward()."""
        self._activity = True
        step = self._open
        if step is not None and step.rule == native.STEP_BY_OPTIMIZER and (step.backward_ran or not self._backward_seen):
            self._end()
            self._pending_rng = self._sink.snapshot_rng(self._next)

    def on_exit(self):
        if self._open is not None:
            self._end()
        self._pending_rng = _NONE

    # -- internals
    def _begin_optimizer_step(self, gradient_call=False):
        rng = self._pending_rng
        self._pending_rng = _NONE
        if rng is _NONE:
            rng = self._sink.snapshot_rng(self._next)
        index = self._optimizer_steps
        self._optimizer_steps += 1
        if self._optimizer_exists:
            rule = native.STEP_BY_OPTIMIZER
        elif (gradient_call or self._gradient_calls_count) and not self._backward_seen:
            rule = native.STEP_BY_GRADIENT_CALL
        else:
            rule = native.STEP_BY_BACKWARD
        self._begin(native.NO_LOADER, index, -1, rule, rng)

    def _begin(self, loader, batch_index, epoch, rule, rng):
        step = _Step(self._next, loader, rule)
        self._next += 1
        self._open = step
        self._loss = math.nan
        self._sink.begin_step(step.number, loader, batch_index, epoch, rule, rng)

    def _end(self):
        step, loss = self._open, self._loss
        self._open = None
        self._loss = math.nan
        if not step.trained:
            self._sink.untrained_step(step.number)
        self._sink.end_step(step.number, loss)
