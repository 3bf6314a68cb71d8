"""`dlreplay --what-if CHANGE`: the recorded failure replayed with one change.

The replay runs as usual (jump, served batches and RNG states, every step verified) up to the
step the change starts at (DLRR_WHAT_IF_FROM: the failing step, or the --from step).  From its
start the change applies and nothing is verified (the native side stops comparing there too):
DLRR_WHAT_IF_STEPS steps (default: to the end of the recording) run on the recorded batches,
and every module output, loss, gradient and parameter is checked for NaN/Inf, as the recorder
checks them.  The report says whether the failure recurred (where first), with the replayed
loss of each step beside the recorded one.  A difference from the recording after the change is
its purpose, never a verdict on the trace.

Changes:
  drop-sample=I  the sample of dataset index I is left out of every batch served (DataLoader jobs)
  skip-step      the first step's optimizer update is skipped
  lr-scale=F     every update runs with its param groups' learning rate times F (the job's own
                 schedule still sets it: it is scaled around each optimizer.step())
  clip-grad=F    gradients are clipped to a total norm of F before each update
  fp32           autocast regions entered from the first step on run in float32
  anomaly        autograd anomaly detection: a NaN in backward raises, naming its function
"""

import math


class WhatIf:
    def __init__(self, text, start, steps, recorded_steps, torch, patcher):
        self.text = text
        self.kind, _, value = text.partition("=")
        self.value = float(value) if self.kind in ("lr-scale", "clip-grad") else \
            int(value) if self.kind == "drop-sample" else None
        self.start = start
        self.last = start + steps - 1 if steps else recorded_steps - 1
        self.torch = torch
        self._patcher = patcher
        self.live = False
        self.recurred = None  # (step, what) of the first non-finite value after the change
        self.losses = {}      # step -> the replayed loss
        self.dropped = 0      # drop-sample: samples left out
        self._saved_lrs = None
        self._anomaly = None

    # -- the change
    def begin(self):
        self.live = True
        torch = self.torch
        if self.kind == "anomaly":
            self._anomaly = torch.autograd.detect_anomaly()
            self._anomaly.__enter__()
        elif self.kind == "fp32":
            autocast = torch.amp.autocast_mode.autocast

            def make_init(original):
                def __init__(self, *args, **kwargs):
                    kwargs["enabled"] = False
                    return original(self, *args, **kwargs)
                return __init__
            self._patcher.wrap(autocast, "__init__", make_init)

    def filter_batch(self, data, indices):
        """drop-sample: the batch without the rows of that dataset index."""
        if self.kind != "drop-sample" or not indices or self.value not in indices:
            return data
        keep = [i for i, idx in enumerate(indices) if idx != self.value]
        self.dropped += len(indices) - len(keep)
        rows = self.torch.tensor(keep, dtype=self.torch.long)
        n = len(indices)

        def cut(v):
            if isinstance(v, self.torch.Tensor):
                return v[rows] if v.dim() and v.shape[0] == n else v
            if isinstance(v, (list, tuple)) and type(v) in (list, tuple):
                return type(v)(cut(x) for x in v)
            if type(v) is dict:
                return {k: cut(x) for k, x in v.items()}
            return v
        return cut(data)

    def skips_update(self, step):
        return self.kind == "skip-step" and step == self.start

    def before_update(self, optimizer):
        if self.kind == "lr-scale":
            self._saved_lrs = [g.get("lr") for g in optimizer.param_groups]
            for g in optimizer.param_groups:
                if isinstance(g.get("lr"), (int, float)):
                    g["lr"] = g["lr"] * self.value
        elif self.kind == "clip-grad":
            params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            if params:
                self.torch.nn.utils.clip_grad_norm_(params, self.value)

    def after_update(self, optimizer):
        if self._saved_lrs is not None:
            for g, lr in zip(optimizer.param_groups, self._saved_lrs):
                g["lr"] = lr
            self._saved_lrs = None

    # -- what happened
    def note(self, step, what, tensor):
        """A module output, loss, gradient or parameter of a step with the change."""
        torch = self.torch
        if self.recurred is None and (tensor.is_floating_point() or tensor.is_complex()):
            if not bool(torch.isfinite(tensor.detach()).all()):
                self.recurred = (step, "%s not finite" % what)

    def note_loss(self, step, tensor):
        if step is not None and step not in self.losses and tensor.numel() == 1:
            self.losses[step] = float(tensor.detach().reshape(()))

    def note_exception(self, step, text):
        if self.recurred is None:
            self.recurred = (step, "the job raised %s" % text)

    def done(self, step):
        return self.recurred is not None or step >= self.last

    def end(self):
        if self._anomaly is not None:
            self._anomaly.__exit__(None, None, None)
            self._anomaly = None

    def facts(self, last_step, recorded_loss):
        """(key, text) for the report: the change, the verdict, the loss curve."""
        change = "%s from step %d" % (self.text, self.start)
        if self.kind == "drop-sample":
            change += " (%d sample(s) of dataset index %d left out)" % (self.dropped, self.value)
        out = [("whatif.change", change)]
        if self.recurred is not None:
            step, what = self.recurred
            verdict = "recurred at step %d: %s" % (step, what)
        else:
            end = self.start if last_step is None else last_step
            verdict = "did not recur: steps %d-%d replayed with the change, every module output, loss, " \
                      "gradient and parameter finite" % (self.start, end)
            if self.kind == "drop-sample" and not self.dropped:
                verdict += " (but no batch served held dataset index %d)" % self.value
        out.append(("whatif.verdict", verdict))
        lines = []
        for step in sorted(self.losses):
            lines.append("step %d: %s -> %s" % (step, _num(recorded_loss(step)), _num(self.losses[step])))
        if lines:
            out.append(("whatif.losses", "\n".join(lines)))
        return out


def _num(x):
    return "nan" if math.isnan(x) else "%.6g" % x
