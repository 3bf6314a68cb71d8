"""Warnings name the job's line, not a dlrr wrapper's (the recorder never changes the job's stderr).

A warning raised with stacklevel=N names the frame N-1 calls up from the warn() call: the code
that called the deprecated function.  A dlrr wrapper between them (optimizer.__init__'s, a grad
scaler's __init__) is one frame more, and the warning named the wrapper's `original(self, *args,
**kwargs)` instead of the job's line (torch 2.6's `torch.cuda.amp.GradScaler(...)` FutureWarning;
torch's "duplicate parameters" warning from an optimizer's __init__).  warnings.warn is replaced
by a function that counts the frames up as Python would, with the hook's own frames not counted,
and calls the original with the stacklevel that lands on the same frame as without dlrr.

Covered: warnings.warn looked up when called (`warnings.warn(...)`, typing_extensions.deprecated),
not a `warn` imported by name before the hook installed, nor a warning raised from C code
(PyErr_WarnEx names the innermost Python frame).
"""

import os
import sys
import warnings

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _hook_frame(frame):
    return frame.f_code.co_filename.startswith(_HOOK_DIR)


def _import_frame(frame):
    """Python's own rule (warnings._is_internal_frame): importlib's bootstrap frames are skipped."""
    name = frame.f_code.co_filename
    return "importlib" in name and "_bootstrap" in name


def stacklevel_for(caller, stacklevel):
    """The stacklevel that, passed by a function called from `caller` to the original warn,
    names the frame `stacklevel` would name from `caller` were the hook's frames not there."""
    if stacklevel <= 1 or _import_frame(caller):
        return stacklevel + 1 if stacklevel >= 1 else stacklevel  # no walk to correct
    frame, hops, wanted = caller, 0, stacklevel - 1  # hops: the frames Python's walk counts
    while wanted > 0 and frame is not None:
        frame = frame.f_back
        if frame is None:
            break
        if not _import_frame(frame):
            hops += 1
            if not _hook_frame(frame):
                wanted -= 1
    if frame is None:
        hops += wanted  # past the outermost frame, as the unwrapped call would be
    return hops + 2  # + the caller, + this function's caller frame


def install(patcher):
    def make(original):
        def warn(message, category=None, stacklevel=1, *args, **kwargs):
            try:
                level = int(stacklevel)
                if "skip_file_prefixes" in kwargs:  # Python 3.12+: its walk skips ours too
                    kwargs["skip_file_prefixes"] = tuple(kwargs["skip_file_prefixes"]) + (_HOOK_DIR,)
                    level += 1
                else:
                    level = stacklevel_for(sys._getframe(1), level)
            except Exception:  # a stacklevel the original will complain about itself
                return original(message, category, stacklevel, *args, **kwargs)
            return original(message, category, level, *args, **kwargs)
        return warn
    patcher.wrap(warnings, "warn", make)
