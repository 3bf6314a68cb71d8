"""The job's own torch.Generator objects, found by name for snapshots (docs/replay.md, "Jump replay").

Jump replay's fast-forward stands in for the modules of the skipped steps, so what their forward
drew from a generator of the job's own (a dropout mask drawn with `generator=self.g`, noise from a
module-level generator) was never drawn: at the jump step that generator stood behind the
recording.  A snapshot therefore holds the state of every such generator it can name, and the jump
restores each by the same name.  Found, in this order (a generator reachable twice is named once,
by its first name):

  module I PATH.ATTR  an attribute of a module of the I-th root module that trains (its own or
                      any submodule's, e.g. an nn.Module holding `self.g = torch.Generator()`)
  global MOD.NAME     a module-level variable of a module whose code is on the stack at the step
                      start (the training script, a library's loop), or of a module defining a
                      class of the model

Not found: a generator held only in a function's local variable (reading a running frame's locals
keeps every local alive until the frame next reads them, on Python 3.12 and earlier: a recorder
must not hold the job's tensors), or deeper inside other objects.  Generators a DataLoader or its
sampler draws from need no restoring: replay runs the loader's sampler batch by batch (replay.py,
make_iterator), in fast-forwarded steps too.  torch's default generators are restored with the
step's RNG states.
"""

import os
import sys

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def _skipped_dirs(torch):
    dirs = [os.path.dirname(_HOOK_DIR) + os.sep]  # dlrr_hook and sitecustomize
    torch_file = getattr(torch, "__file__", None)
    if torch_file:
        dirs.append(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return tuple(dirs)


def find(roots, torch, frame=None):
    """[(name, generator)] for the generators named as the module docstring says, in a fixed
    order: the same program point in a replay finds the same names."""
    gen_type = torch.Generator
    found, seen = [], set()

    def add(name, value):
        try:
            if not isinstance(value, gen_type):  # a lazy proxy's __class__ may raise
                return
        except Exception:
            return
        if id(value) not in seen:
            seen.add(id(value))
            found.append((name, value))

    for i, root in enumerate(roots):
        for path, sub in root.named_modules():
            for attr, value in list(vars(sub).items()):
                add("module %d %s" % (i, "%s.%s" % (path, attr) if path else attr), value)
    modules = []
    skipped = _skipped_dirs(torch)
    f = frame if frame is not None else sys._getframe(1)
    stack = []
    while f is not None:
        stack.append(f)
        f = f.f_back
    for f in reversed(stack):  # the outermost first
        if not os.path.abspath(f.f_code.co_filename).startswith(skipped):
            modules.append(f.f_globals)
    for root in roots:
        for sub in root.modules():
            mod = sys.modules.get(type(sub).__module__)
            if mod is not None:
                modules.append(vars(mod))
    done = set()
    for g in modules:
        if id(g) in done:
            continue
        done.add(id(g))
        name = g.get("__name__", "?")
        for key, value in list(g.items()):
            add("global %s.%s" % (name, key), value)
    return found


def states(roots, torch):
    """{name: {"device": str, "state": bytes}} of find()'s generators; {} where looking fails (the
    snapshot is still worth taking; the jump's `jump.restored` line then counts 0 generators)."""
    try:
        return {name: {"device": str(g.device), "state": g.get_state().numpy().tobytes()}
                for name, g in find(roots, torch, sys._getframe(1))}
    except Exception:
        return {}


def restore(roots, torch, saved):
    """Sets every live generator named in `saved` to its state; returns what could not be."""
    problems = []
    live = dict(find(roots, torch, sys._getframe(1)))
    for name, entry in saved.items():
        g = live.get(name)
        if g is None:
            problems.append("generator %s: not found here" % name)
        elif str(g.device) != entry.get("device"):
            problems.append("generator %s: on %s here, %s in the snapshot" % (name, g.device, entry.get("device")))
        else:
            try:
                g.set_state(torch.frombuffer(bytearray(entry["state"]), dtype=torch.uint8))
            except Exception as exc:
                problems.append("generator %s: %s" % (name, str(exc).splitlines()[0] if str(exc) else exc))
    return problems
