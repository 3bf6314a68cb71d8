"""Explaining a non-finite value at replay time: the first op that made it, the job's line
that called it, why, and the build-up over the recorded steps.

Replay only (the recording pays nothing for it).  The ReplayStrategy arms an Explainer at the start
of the recorded failing step of a `--until nan` replay; from there every op runs under a
TorchDispatchMode (torch 1.13 and 2.x) that checks each floating output and keeps the first
one holding a NaN or an Inf: the op, the job's own frame that called it (dlrr's and torch's
frames skipped), the phase (forward, backward or the optimizer's step), its inputs'
statistics and a cause.  Ops the job calls between modules (`x = x * scale`), in its loss,
in backward and in the optimizer are all seen, since the check sits below autograd and
modules.  A backward op is mapped to the forward line that created its autograd node as
anomaly mode does: the step's forward runs with anomaly detection on (it keeps each node's
forward traceback) and a post-hook on every node of the graph names the node that ran the op.

dlrr's own tensor work (digests, the batch scan) is not the job's and runs paused.
"""

import linecache
import math
import os
import threading

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))

# Ops by what a NaN or Inf from finite inputs means for them (aten base names, no overload).
_LOG = {"log", "log2", "log10", "log1p", "xlogy", "special_xlogy", "special_entr"}
_SQRT = {"sqrt", "rsqrt"}
_DIV = {"div", "true_divide", "floor_divide", "remainder", "fmod", "reciprocal"}
_POW = {"pow", "float_power"}
_ADD = {"add", "sub", "rsub"}
_GRAPH_MAX = 200000  # autograd nodes given a post-hook (a larger graph: the node is not named)


def _base(func):
    """aten::log_ / log.default -> "log" (in-place and out variants share their op's meaning)."""
    name = getattr(getattr(func, "_schema", None), "name", None) or str(func)
    name = name.split("::")[-1].split(".")[0]
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


def _schema_name(func):
    return getattr(getattr(func, "_schema", None), "name", None) or str(func)


class Value:
    """Statistics of one input or output of an op."""

    def __init__(self, name, value, torch, sample=False):
        self.name = name
        self.sample = sample
        self.tensor = value if isinstance(value, torch.Tensor) else None
        self.scalar = None if self.tensor is not None else value
        self.dtype = str(value.dtype).replace("torch.", "") if self.tensor is not None else type(value).__name__
        dense = self.tensor is not None and _dense(value, torch)
        self.shape = list(value.shape) if dense else None
        self.layout = _layout(value) if self.tensor is not None and not dense else None  # no statistics then
        self.nan = self.posinf = self.neginf = self.zeros = self.negatives = 0
        self.maxabs = self.min = 0.0
        self.dtype_max = None
        if self.tensor is not None:
            t = value.detach()
            if not dense or t.is_complex() or t.dtype == torch.bool or t.numel() == 0:
                return
            if t.is_floating_point():
                self.dtype_max = float(torch.finfo(t.dtype).max)
            d = t.to(torch.float64)
            finite = torch.isfinite(d)
            self.nan = int(torch.isnan(d).sum())
            self.posinf = int((d == math.inf).sum())
            self.neginf = int((d == -math.inf).sum())
            fin = d[finite]
            if fin.numel():
                self.maxabs = float(fin.abs().max())
                self.min = float(fin.min())
            self.zeros = int((d == 0).sum())
            self.negatives = int((d < 0).sum())
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            v = float(value)
            self.nan = int(math.isnan(v))
            self.posinf = int(v == math.inf)
            self.neginf = int(v == -math.inf)
            if math.isfinite(v):
                self.maxabs, self.min = abs(v), v
            self.zeros, self.negatives = int(v == 0), int(v < 0)

    @property
    def finite(self):
        return not (self.nan or self.posinf or self.neginf)

    @property
    def numeric(self):
        return self.tensor is not None or isinstance(self.scalar, (int, float)) and not isinstance(self.scalar, bool)

    def counts(self):
        parts = [("%d NaN" % self.nan) if self.nan else "", ("%d +Inf" % self.posinf) if self.posinf else "",
                 ("%d -Inf" % self.neginf) if self.neginf else ""]
        return ", ".join(p for p in parts if p)

    def describe(self):
        if self.tensor is None:
            return "%s = %r (a Python %s)" % (self.name, self.scalar, self.dtype)
        if self.layout is not None:
            return "%s (%s %s tensor): not inspected" % (self.name, self.dtype, self.layout)
        state = "finite" if self.finite else "NOT finite (%s of %d)" % (self.counts(), self.tensor.numel())
        limit = "" if self.dtype_max is None else " (%s max %.3g)" % (self.dtype, self.dtype_max)
        return "%s (%s %s%s): %s, max |x| %.3g%s" % (
            self.name, self.dtype, self.shape, " from the batch" if self.sample else "", state, self.maxabs, limit)


class Finding:
    """The first op whose output held a non-finite value."""

    def __init__(self, op, phase, line, inputs, output, cause, kind, module=None):
        self.op = op
        self.phase = phase
        self.line = line
        self.inputs = inputs
        self.output = output
        self.cause = cause
        self.kind = kind
        self.module = module
        self.node = None          # backward: the autograd node that ran it
        self.forward_line = None  # backward: the job's forward line that created the node

    def op_text(self):
        where = " (module %s)" % self.module if self.module else ""
        node = " of %s" % self.node if self.node else ""
        return "%s in %s%s%s" % (self.op, self.phase, node, where)

    def line_text(self):
        if self.phase == "backward" and self.forward_line:
            return "%s (backward of the forward line %s)" % (self.line, self.forward_line)
        return self.line


def classify(op, inputs, output, torch):
    """(kind, sentence) for the first op whose output is not finite: the kind of fault, with numbers."""
    base = op
    numeric = [v for v in inputs if v.numeric]
    bad = [v for v in numeric if not v.finite]
    out_dtype = output.dtype
    if bad:
        v = bad[0]
        if v.sample:
            return ("non-finite input sample", "%s was served by the DataLoader already holding %s; no op of the "
                    "step made it" % (v.name, v.counts()))
        if base in _ADD and output.nan and any(x.posinf for x in bad) and any(x.neginf for x in bad) or \
                base in ("sub", "rsub") and output.nan and (sum(1 for x in bad if x.posinf) > 1 or
                                                             sum(1 for x in bad if x.neginf) > 1):
            return ("inf - inf", "both operands of %s held infinities that cancel, giving NaN" % base)
        if v.tensor is None:
            return ("non-finite scalar", "the job's code passed the Python number %s = %r to %s on a tensor that "
                    "was finite" % (v.name, v.scalar, base))
        return ("non-finite input", "%s was already non-finite (%s) when the step reached %s: it was made before "
                "this step or outside the ops replayed here (a parameter, a buffer or state kept across steps)"
                % (v.name, v.counts(), base))
    if not numeric:
        return ("non-finite constant", "%s made a non-finite constant (%s) from no tensor input" % (base, output.counts()))
    first, second = numeric[0], numeric[1] if len(numeric) > 1 else None
    if output.nan:
        if base in _LOG and first.negatives:
            return ("log of a negative", "%d element(s) of %s were below 0 (min %.3g)"
                    % (first.negatives, first.name, first.min))
        if base in _SQRT and first.negatives:
            return ("sqrt of a negative", "%s of %d element(s) of %s below 0 (min %.3g)"
                    % (base, first.negatives, first.name, first.min))
        if base in _POW and first.negatives:
            return ("power of a negative", "a fractional power of %d element(s) of %s below 0 (min %.3g)" % (first.negatives, first.name, first.min))
        if base in _DIV and second is not None:
            both = _zero_over_zero(first, second, torch)
            if both:
                return ("0/0", "%d element(s) divided zero by zero (%s / %s)" % (both, first.name, second.name))
        return ("NaN from finite inputs", "%s turned finite inputs into %s: an intermediate overflowed inside the "
                "op (0 * inf or inf - inf within it); largest input |x| %.3g (%s)"
                % (base, output.counts(), max(v.maxabs for v in numeric), _largest(numeric).name))
    if base in _DIV and (base == "reciprocal" or (second is not None and second.zeros)):
        divisor = first if base == "reciprocal" else second
        return ("division by zero", "%d element(s) of the divisor %s were 0"
                % (divisor.zeros, divisor.name))
    if base == "rsqrt" and first.zeros:
        return ("division by zero", "rsqrt of %d zero element(s) of %s" % (first.zeros, first.name))
    if base in _LOG and first.zeros:
        return ("log of zero", "%d element(s) of %s were 0, giving -inf" % (first.zeros, first.name))
    huge = _largest(numeric)
    limit = output.dtype_max
    cast = [v for v in numeric if v.tensor is not None and v.dtype != out_dtype and v.dtype_max and limit
            and v.dtype_max > limit]
    if cast and cast[0].maxabs > limit:
        v = cast[0]
        return ("overflow", "the cast to %s overflowed: %s held |x| up to %.3g, past %s's max %.3g"
                % (out_dtype, v.name, v.maxabs, out_dtype, limit))
    return ("overflow", "the result of %s went past %s's range (max %.3g): %s; the largest input "
            "was %s with max |x| %.3g" % (base, out_dtype, limit or float("nan"), output.counts(), huge.name,
                                         huge.maxabs))


def _largest(values):
    """The input furthest into its dtype's range (|x| / dtype max), the magnitude itself otherwise."""
    return max(values, key=lambda v: (v.maxabs / v.dtype_max) if v.dtype_max else v.maxabs / 3.4e38)


def _zero_over_zero(a, b, torch):
    x = a.tensor if a.tensor is not None else a.scalar
    y = b.tensor if b.tensor is not None else b.scalar
    try:
        both = (torch.as_tensor(x) == 0) & (torch.as_tensor(y) == 0)
        return int(both.sum())
    except Exception:
        return 0


def _flatten_args(func, args, kwargs, torch):
    """(name, value) for each input, named as the op's schema names them (tensor lists by index)."""
    try:
        names = [a.name for a in func._schema.arguments]
    except Exception:
        names = []
    out = []
    for i, a in enumerate(args):
        name = names[i] if i < len(names) else "arg%d" % i
        if isinstance(a, (list, tuple)):
            out.extend(("%s[%d]" % (name, j), x) for j, x in enumerate(a) if isinstance(x, torch.Tensor))
        else:
            out.append((name, a))
    out.extend((k, v) for k, v in (kwargs or {}).items())
    return [(n, v) for n, v in out if isinstance(v, torch.Tensor) or
            isinstance(v, (int, float)) and not isinstance(v, bool)]


def _dense(t, torch):
    """A strided tensor with one shape: what the statistics read. A nested tensor (the
    TransformerEncoder's fast path in eval) or a sparse one has no isfinite() or abs() kernel."""
    return not getattr(t, "is_nested", False) and t.layout is torch.strided


def _layout(t):
    return "nested" if getattr(t, "is_nested", False) else str(t.layout).replace("torch.", "")


def _outputs(out, torch):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


def _is_ours_or_torch(filename, torch_dir):
    return filename.startswith(_HOOK_DIR) or filename.startswith(torch_dir)


def user_line(frame, torch):
    """"file:line in function: source" of the innermost frame outside dlrr and torch."""
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not _is_ours_or_torch(filename, torch_dir):
            source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            return "%s:%d in %s: %s" % (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, source), frame
        frame = frame.f_back
    return None, None


def forward_line(node, torch):
    """The job's own frame in the forward traceback anomaly mode kept for an autograd node."""
    try:
        tb = node.metadata.get("traceback_")
    except Exception:
        return None
    if not tb:
        return None
    if isinstance(tb, str):
        tb = [tb]
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    for entry in reversed(tb):  # innermost last
        head = entry.strip().splitlines()
        if not head or not head[0].startswith("File "):
            continue
        filename = head[0].split('"')[1] if '"' in head[0] else ""
        if filename and not _is_ours_or_torch(os.path.abspath(filename), torch_dir):
            # '  File "x.py", line 22, in forward\n    code\n' -> x.py:22 in forward: code
            parts = head[0].split(", ")
            lineno = parts[1].replace("line ", "") if len(parts) > 1 else "?"
            func = parts[2].replace("in ", "") if len(parts) > 2 else "?"
            source = head[1].strip() if len(head) > 1 else ""
            return "%s:%s in %s: %s" % (filename, lineno, func, source)
    return None


class Explainer:
    """Watches the ops of one replayed step for the first non-finite output (see the module doc)."""

    def __init__(self, torch, phase_of, module_of, sample_ptrs):
        """phase_of(): "forward", "backward" or "optimizer" now; module_of(): the module path
        running now or None; sample_ptrs: data pointers of the step's batch tensors."""
        from torch.utils._python_dispatch import TorchDispatchMode
        self.torch = torch
        self.found = None
        self._phase_of = phase_of
        self._module_of = module_of
        self.samples = sample_ptrs
        self._paused = threading.local()
        self._anomaly = None
        self._hooked = {}  # id -> node: held, so that an id is never reused by another node
        explainer = self

        class FirstNonFinite(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                checking = explainer.found is None and not getattr(explainer._paused, "depth", 0)
                before = explainer._before_write(func, args) if checking else None
                out = func(*args, **(kwargs or {}))
                if checking:
                    explainer._check(func, args, kwargs, out, before)
                return out
        self._mode = FirstNonFinite()
        self._entered = False

    # -- arming
    def enter(self):
        """From the step's start: the dispatch check, and anomaly mode's forward tracebacks."""
        torch = self.torch
        self._anomaly = torch.autograd.set_detect_anomaly(True)
        self._mode.__enter__()
        self._entered = True

    def exit(self):
        if self._entered:
            self._entered = False
            self._mode.__exit__(None, None, None)
        if self._anomaly is not None:
            self._anomaly.__exit__(None, None, None)
            self._anomaly = None

    class _Pause:
        def __init__(self, local):
            self._local = local

        def __enter__(self):
            self._local.depth = getattr(self._local, "depth", 0) + 1

        def __exit__(self, *exc):
            self._local.depth -= 1
            return False

    def paused(self):
        """Context: dlrr's own tensor work, not checked."""
        return Explainer._Pause(self._paused)

    def hook_graph(self, tensors):
        """Before backward(): a post-hook on every node of the graph, so that a non-finite value
        first made in backward is mapped to its node and the forward line that created it."""
        seen = self._hooked
        stack = [getattr(t, "grad_fn", None) for t in tensors]
        while stack and len(seen) < _GRAPH_MAX:
            node = stack.pop()
            if node is None or id(node) in seen:
                continue
            seen[id(node)] = node
            try:
                node.register_hook(self._node_hook(node))
            except Exception:
                pass
            stack.extend(n for n, _ in getattr(node, "next_functions", ()) if n is not None)

    def _node_hook(self, node):
        explainer = self

        def hook(grad_inputs, grad_outputs):
            f = explainer.found
            if f is not None and f.phase == "backward" and f.node is None:
                f.node = type(node).__name__ if not hasattr(node, "name") else node.name()
                f.forward_line = forward_line(node, explainer.torch)
        return hook

    # -- the check
    def _before_write(self, func, args):
        """Copies of the floating tensors an in-place op writes (its inputs' statistics are
        those from before it ran); None when it writes none."""
        try:
            written = [i for i, a in enumerate(func._schema.arguments)
                       if a.alias_info is not None and a.alias_info.is_write]
        except Exception:
            return None
        if not written:
            return None
        torch = self.torch
        with self.paused():
            return {i: args[i].detach().clone() for i in written
                    if i < len(args) and isinstance(args[i], torch.Tensor) and args[i].is_floating_point()}

    def _check(self, func, args, kwargs, out, before=None):
        torch = self.torch
        bad = None
        for t in _outputs(out, torch):
            # A nested or sparse output is not checked: its NaN shows in the dense tensor made from it.
            if (t.is_floating_point() or t.is_complex()) and _dense(t, torch):
                if not bool(torch.isfinite(t).all()):
                    bad = t
                    break
        if bad is None:
            return
        import sys
        with self.paused():
            line, _ = user_line(sys._getframe(2), torch)
            if before:
                args = tuple(before.get(i, a) for i, a in enumerate(args))
            inputs = [Value(n, v, torch, sample=isinstance(v, torch.Tensor) and self._is_sample(v))
                      for n, v in _flatten_args(func, args, kwargs, torch)]
            output = Value("output", bad, torch)
            kind, cause = classify(_base(func), inputs, output, torch)
            phase = self._phase_of()
            module = self._module_of() if phase == "forward" else None
            self.found = Finding(_schema_name(func), phase, line or "(no frame of the job's own: called by torch)",
                                 inputs, output, cause, kind, module)

    def _is_sample(self, t):
        try:
            return t.data_ptr() in self.samples
        except Exception:
            return False

    def look_ahead(self, module, args, module_path):
        """Runs a module's forward once more, outside the replay (dlrr's hooks off, grad off, on
        copies of its inputs, its buffers and the RNG states put back), to find the first op
        inside it whose output is non-finite, before its real call (the replay stops after that call)."""
        torch = self.torch
        if self.found is not None:
            return
        rng = torch.get_rng_state()
        cuda = getattr(torch, "cuda", None)
        cuda_rng = cuda.get_rng_state_all() if cuda is not None and cuda.is_initialized() else None
        with self.paused():
            buffers = [(b, b.detach().clone()) for b in module.buffers()]
            copies = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        # The batch copies stand for the batch: an input sample stays one.
        self.samples = set(self.samples) | {c.data_ptr() for a, c in zip(args, copies)
                                            if isinstance(a, torch.Tensor) and self._is_sample(a)}
        previous = self._module_of
        self._module_of = lambda: module_path
        try:
            with torch.no_grad():
                module(*copies)
        except Exception:
            pass  # the real call raises it again, where the job sees it
        finally:
            self._module_of = previous
            with self.paused(), torch.no_grad():
                for b, saved in buffers:
                    b.copy_(saved)
                torch.set_rng_state(rng)
                if cuda_rng is not None:
                    cuda.set_rng_state_all(cuda_rng)

    def facts(self):
        """(key, text) for the report."""
        f = self.found
        if f is None:
            return []
        out = [("explain.op", f.op_text()), ("explain.line", f.line_text())]
        shown = [v.describe() for v in f.inputs][:8]
        shown.append("-> " + f.output.describe())
        out.append(("explain.inputs", "\n".join(shown)))
        out.append(("explain.cause", "%s: %s" % (f.kind, f.cause)))
        return out


def history(rows_of_step, step, lrs, window=50, step_loss=None):
    """The build-up before the failing step from the recorded digests: the loss curve (a spike,
    N steps earlier), the largest |gradient| per step, and the learning rate(s) now.  rows_of_step(s):
    the recorded digests of step s as (kind, path, call, output, hash, nan, inf, min, max) text.
    step_loss(s): the step's recorded loss (its StepEnd's), which is the job's loss where the
    digested one is not (a GradScaler's scaled loss); it stands for a finite digested loss."""
    losses, grads, acts = [], [], []
    for s in range(max(0, step - window), step + 1):
        loss, gmax, amax = None, None, None
        for kind, path, _call, output, _h, nan, inf, lo, hi in rows_of_step(s):
            m = max(abs(_float(lo)), abs(_float(hi)))
            if kind == "loss" and output == "0" and loss is None:
                loss = _float(lo) if int(nan) == 0 and int(inf) == 0 else math.nan
            elif kind == "gradient" and math.isfinite(m) and (gmax is None or m > gmax[0]):
                gmax = (m, path)
            elif kind == "module output" and math.isfinite(m) and (amax is None or m > amax[0]):
                amax = (m, path)
        if loss is not None and math.isfinite(loss) and step_loss is not None:
            value = step_loss(s)
            loss = value if math.isfinite(value) else loss
        if loss is not None:
            losses.append((s, loss))
        if gmax is not None:
            grads.append((s,) + gmax)
        if amax is not None:
            acts.append((s,) + amax)
    sentences = []
    before = [(s, v) for s, v in losses if s < step and math.isfinite(v)]
    if before:
        first_s, first_v = before[0]
        last_s, last_v = before[-1]
        spike = _spike(before)
        text = "loss over the %d recorded step(s) before: %.4g (step %d) -> %.4g (step %d)" % (
            len(before), first_v, first_s, last_v, last_s)
        if spike is not None:
            s, v, median = spike
            text += "; it spiked at step %d (%d step(s) before the failure): %.4g, %.3gx the median %.4g of the " \
                    "steps before it" % (s, step - s, v, v / median if median else math.inf, median)
        else:
            text += "; no spike (no step above 10x the median of those before it)"
        sentences.append(text)
    for name, series in (("gradient", grads), ("module output", acts)):
        before = [g for g in series if g[0] < step]
        if before:
            (s0, m0, _), (s1, m1, p1) = before[0], before[-1]
            sentences.append("largest |%s| %.3g (step %d) -> %.3g (step %d, %s)" % (name, m0, s0, m1, s1, p1))
    if lrs:
        sentences.append("learning rate at the failing step: %s" % ", ".join(lrs))
    if not sentences:
        return None
    return "; ".join(sentences) + "."


def _spike(points):
    """The first step whose loss is over 10x the median of the steps before it (at least 3)."""
    for i in range(3, len(points)):
        prev = sorted(abs(v) for _, v in points[:i])
        median = prev[len(prev) // 2]
        s, v = points[i]
        if median > 0 and abs(v) > 10 * median:
            return s, v, median
    return None


def _float(text):
    try:
        return float(text)
    except ValueError:
        return math.nan
