"""Training-state snapshots for jump replay (docs/replay.md, "Jump replay").

Record: at the start of a step (when the recorder announces it), the state of everything the
hook knows trains - every root module that had a grad-enabled forward (its state_dict and its
parameters' .grad, which matter when gradients accumulate across micro-batches), every
optimizer, LR scheduler and GradScaler, in creation order - is written as one structured value
(ValueWriter: no pickle; tensors become content-addressed blobs, so an unchanged tensor costs
its bytes once) - and the state of each torch.Generator of the job's own that generators.py can
name.  torch's, NumPy's and random's global RNG states and loader positions are not in it: the
trace has them for every step already, and replay restores them there.

Cadence (DLRR_SNAPSHOT_EVERY, set by `dlrecord --snapshot-every`): "off", "Nsteps" (every N
steps), "S" (every S seconds), or "auto" (default): by time, the interval growing with the
measured cost of a snapshot so that snapshots take about 1% of the job's time.  Under a budget
(DLRR_BUDGET, `dlrecord --budget`: each periodic snapshot then has a bulk file the recorder may
drop) a periodic snapshot larger than a quarter of the budget is not taken (said once): the
latest snapshot, the window and what every step records must fit together.

A failure snapshot is taken once, in the step whose module output or loss is the first
non-finite value: the optimizer has not stepped yet, so the state is still the step's start
(except buffers a forward updates in place, e.g. BatchNorm running statistics), and the
failing step can be replayed alone.  It is taken whatever the cadence.  An uncaught
exception in a step that has run no backward() and no optimizer.step() yet takes it too, as
it is reported (Session._exception_snapshot).

Replay: Snapshots.restore(tree) loads the same objects, matched by creation order.
"""

import os
import sys
import time
import weakref

from . import generators

_AUTO_MIN_S = 30.0    # first auto snapshot after this long, and never more often
_AUTO_COST = 100.0    # interval >= 100x the last snapshot's cost: ~1% of the job's time
_BUDGET_SHARE = 4     # a periodic snapshot takes at most 1/4 of the trace's budget


def parse_budget(text):
    """DLRR_BUDGET: bytes the whole trace may take (0: no budget)."""
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0


def tree_bytes(tree, depth=0):
    """Raw bytes of the tensors in a snapshot tree (what its bulk file holds at most)."""
    if depth > 64:
        return 0
    if isinstance(tree, dict):
        return sum(tree_bytes(v, depth + 1) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(tree_bytes(v, depth + 1) for v in tree)
    if hasattr(tree, "element_size") and hasattr(tree, "numel"):
        try:
            return int(tree.numel()) * int(tree.element_size())
        except Exception:
            return 0
    return 0


def parse_cadence(text):
    """("off"|"steps"|"seconds"|"auto", number). Unknown text: auto."""
    text = (text or "auto").strip().lower()
    if text in ("off", "0", "none"):
        return ("off", 0)
    try:
        if text.endswith("steps"):
            n = int(text[:-5])
            return ("steps", n) if n > 0 else ("off", 0)
        if text.endswith("s") and text[:-1].replace(".", "", 1).isdigit():
            text = text[:-1]
        v = float(text)
        return ("seconds", v) if v > 0 else ("off", 0)
    except ValueError:
        return ("auto", 0)


class Registry:
    """What trains, in creation (or first training use) order: the same order in a replay."""

    def __init__(self):
        self.roots = []       # weakrefs of root modules with a grad-enabled forward
        self.optimizers = []
        self.schedulers = []
        self.scalers = []
        self._checked = {}  # id -> weakref: roots looked at once (a call per step stays cheap)

    @staticmethod
    def _add(lst, obj):
        for ref in lst:
            if ref() is obj:
                return
        lst.append(weakref.ref(obj))

    def note_root(self, module):
        ref = self._checked.get(id(module))
        if ref is not None and ref() is module:
            return
        self._checked[id(module)] = weakref.ref(module)
        # Modules without state (a loss function) are no part of the training state.
        for _ in module.state_dict(keep_vars=True):
            self._add(self.roots, module)
            return

    def note_optimizer(self, opt):
        self._add(self.optimizers, opt)

    def note_scheduler(self, sched):
        self._add(self.schedulers, sched)

    def note_scaler(self, scaler):
        self._add(self.scalers, scaler)

    @staticmethod
    def live(lst):
        return [ref() for ref in lst if ref() is not None]


def _optimizer_tree(opt):
    sd = opt.state_dict()
    return {"state": {str(k): v for k, v in sd["state"].items()}, "param_groups": sd["param_groups"]}


def _scheduler_tree(sched):
    sd = sched.state_dict()
    # Functions (LambdaLR's lambdas) are not state: the job's code recreates them.
    return {k: v for k, v in sd.items() if not callable(v)}


def build_tree(registry):
    modules = []
    for m in Registry.live(registry.roots):
        grads = {name: (p.grad.detach() if p.grad is not None else None) for name, p in m.named_parameters()}
        modules.append({"type": type(m).__name__, "state": dict(m.state_dict()), "grads": grads})
    return {
        "format": 1,
        "modules": modules,
        "optimizers": [_optimizer_tree(o) for o in Registry.live(registry.optimizers)],
        "schedulers": [_scheduler_tree(s) for s in Registry.live(registry.schedulers)],
        "scalers": [s.state_dict() for s in Registry.live(registry.scalers)],
        "generators": generators.states(Registry.live(registry.roots), sys.modules["torch"]),
    }


def restore_tree(registry, tree, torch):
    """Loads `tree` into the live objects; returns a list of what could not be restored."""
    problems = []

    def pair(kind, live, saved):
        if len(live) != len(saved):
            problems.append("%d %s here, %d in the snapshot" % (len(live), kind, len(saved)))
        return zip(live, saved)

    with torch.no_grad():
        for m, saved in pair("modules", Registry.live(registry.roots), tree.get("modules", [])):
            try:
                m.load_state_dict(saved["state"], strict=True)
            except Exception as exc:  # names or shapes differ: not the recorded model
                problems.append("module %s: %s" % (type(m).__name__, str(exc).splitlines()[0]))
                continue
            grads = saved.get("grads", {})
            for name, p in m.named_parameters():
                g = grads.get(name)
                p.grad = None if g is None else g.to(dtype=p.dtype, device=p.device).clone()
    for o, saved in pair("optimizers", Registry.live(registry.optimizers), tree.get("optimizers", [])):
        try:
            state = {int(k): v for k, v in saved["state"].items()}
            o.load_state_dict({"state": state, "param_groups": saved["param_groups"]})
        except Exception as exc:
            problems.append("optimizer %s: %s" % (type(o).__name__, exc))
    for s, saved in pair("schedulers", Registry.live(registry.schedulers), tree.get("schedulers", [])):
        try:
            sd = s.state_dict()
            sd.update(saved)
            s.load_state_dict(sd)
        except Exception as exc:
            problems.append("scheduler %s: %s" % (type(s).__name__, exc))
    for s, saved in pair("grad scalers", Registry.live(registry.scalers), tree.get("scalers", [])):
        try:
            s.load_state_dict(saved)
        except Exception as exc:
            problems.append("grad scaler: %s" % exc)
    # A snapshot of an older trace has none: its generators stay where fast-forward left them.
    problems += generators.restore(Registry.live(registry.roots), torch, tree.get("generators") or {})
    return problems


class SnapshotTaker:
    """Record side: decides when, and writes the snapshot through the C API."""

    def __init__(self, lib, values, registry, window=0):
        self._lib = lib
        self._values = values
        self.registry = registry
        self.mode, self.every = parse_cadence(os.environ.get("DLRR_SNAPSHOT_EVERY"))
        self._last_t = time.monotonic()
        self._last_step = None
        self._interval = _AUTO_MIN_S if self.mode == "auto" else self.every
        self.failure_taken = False
        self._said_no_roots = False
        self.taken = 0
        self.window = window  # dlrecord --window K: a snapshot held with the window every K steps
        self.budget = parse_budget(os.environ.get("DLRR_BUDGET"))
        self._said_budget = False
        self.seconds = 0.0  # spent on the job's thread taking snapshots (dltrace env: snapshot.job_seconds)

    def at_step_start(self, step):
        if self.window and step > 0 and step % self.window == 0 and self.registry.roots:
            self.take(step, False, held=True)  # where a data-less replay of the window starts
            return
        if self.mode == "off" or step == 0:
            return
        if self.mode == "steps":
            due = step % self.every == 0
        else:
            due = time.monotonic() - self._last_t >= self._interval
        if due and not self.registry.roots:
            # Said once: a user who asked for snapshots learns why there are none (jump replay
            # then replays every step).
            if not self._said_no_roots:
                self._said_no_roots = True
                self._lib.dlrr_recorder_status(1, ("no snapshot at step %d: no module with parameters or buffers "
                                                   "ran a forward outside torch.compile'd code (a model called only "
                                                   "inside a compiled function runs in its graph, unseen); replay "
                                                   "will run every step" % step).encode())
            return
        if due:
            self.take(step, False)

    def take(self, step, failure, held=False):
        t0 = time.monotonic()
        try:
            tree = build_tree(self.registry)
        except Exception as exc:  # an object whose state_dict() fails: no snapshots, the recording goes on
            self.mode = "off"
            self.failure_taken = True
            # A recorder note (dltrace info shows it): whoever asked for snapshots learns why none follow.
            self._lib.dlrr_recorder_status(1, ("snapshots off at step %d: %s: %s" % (step, type(exc).__name__, exc))
                                           .encode("utf-8", "replace"))
            return
        if self.budget and not failure and not held:
            size = tree_bytes(tree)
            if size * _BUDGET_SHARE > self.budget:
                if not self._said_budget:
                    self._said_budget = True
                    self._lib.dlrr_recorder_status(1, ("no periodic snapshot from step %d: one holds %d bytes, over "
                                                       "a quarter of the trace's budget (%d bytes); raise --budget "
                                                       "for jump replay" % (step, size, self.budget)).encode())
                self._last_t = time.monotonic()
                return
        self._lib.dlrr_snapshot_begin(step, 2 if held else 1 if failure else 0)
        try:
            self._values.write(tree)
        finally:
            self._lib.dlrr_snapshot_end()
        now = time.monotonic()
        if held:  # in memory: neither the cadence's clock nor the job-time figure moves
            self.taken += 1
            return
        if self.mode == "auto":
            self._interval = max(_AUTO_MIN_S, _AUTO_COST * (now - t0))
        self._last_t = now
        self.taken += 1
        # What snapshots cost the job, measured where it is paid (a noisy 2-core machine cannot
        # resolve 1% by timing whole runs against each other).
        self.seconds += now - t0
        self._lib.dlrr_runtime_info(b"snapshot.job_seconds",
                                    ("%.6f in %d snapshots" % (self.seconds, self.taken)).encode())
        if failure:
            self.failure_taken = True
