"""Reversible monkey-patching.

Every patch the hook makes goes through one Patcher so that it can be undone exactly
(tests install and uninstall recorders many times in one process) and so that a patch is
never stacked twice on the same attribute.
"""

import functools

_MARK = "__dlrr_original__"


def original_of(fn):
    """The function a dlrr wrapper wraps (fn itself when it is not one)."""
    return getattr(fn, _MARK, fn)


def is_wrapped(fn):
    return hasattr(fn, _MARK)


class Patcher:
    """Replaces attributes with wrappers and puts the originals back on restore()."""

    def __init__(self):
        self._undo = []

    def wrap(self, owner, name, make_wrapper):
        """Sets owner.name = make_wrapper(original); returns the wrapper (None if already ours).

        functools.wraps copies the original's name, docstring and __dict__ (PyTorch marks
        optimizer steps with a `hooked` attribute that must survive).
        """
        had_own = name in vars(owner)
        original = getattr(owner, name)
        if is_wrapped(original):
            return None
        wrapper = make_wrapper(original)
        functools.update_wrapper(wrapper, original)
        setattr(wrapper, _MARK, original)
        setattr(owner, name, wrapper)
        self._undo.append((owner, name, original, wrapper, had_own))
        return wrapper

    def restore(self):
        """Undoes every patch still in place, newest first."""
        while self._undo:
            owner, name, original, wrapper, had_own = self._undo.pop()
            if vars(owner).get(name) is not wrapper:
                continue  # somebody patched over us: leave theirs alone
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
