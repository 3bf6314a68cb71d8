"""warning_frames: a warning raised through a dlrr wrapper names the line it names without it."""

import os
import sys
import unittest
import warnings

import fake_native  # noqa: F401  (puts pyhook/python on sys.path)
from dlrr_hook import warning_frames
from dlrr_hook.patching import Patcher

# A wrapper whose frame is the hook's own, as the Patcher's wrappers are (its code's file name
# is in dlrr_hook/; nothing is written there).
_WRAPPER_FILE = os.path.join(os.path.dirname(warning_frames.__file__), "fake_wrapper.py")
_namespace = {}
exec(compile("def wrapped(fn):\n    def wrapper(*a, **k):\n        return fn(*a, **k)\n    return wrapper\n",
             _WRAPPER_FILE, "exec"), _namespace)
wrapped = _namespace["wrapped"]


def deprecated(level):
    warnings.warn("old", DeprecationWarning, stacklevel=level)


def caller(fn, level):
    fn(level)  # the line stacklevel=2 names


def outer(fn, level):
    caller(fn, level)  # the line stacklevel=3 names


def where(fn, level):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outer(fn, level)
    return [(w.filename, w.lineno) for w in seen]


class WarningFramesTest(unittest.TestCase):
    def setUp(self):
        self.patcher = Patcher()
        self.addCleanup(self.patcher.restore)

    def test_wrapper_frames_are_not_counted(self):
        plain = {level: where(deprecated, level) for level in (1, 2, 3, 4, 200)}
        through = wrapped(wrapped(deprecated))  # two wrapper frames between
        unfixed = where(through, 2)
        self.assertEqual(unfixed[0][0], _WRAPPER_FILE)  # what the job saw before the fix
        warning_frames.install(self.patcher)
        for level, want in plain.items():
            self.assertEqual(where(through, level), want, level)
            self.assertEqual(where(deprecated, level), want, level)  # no wrapper: unchanged
        self.assertEqual(plain[2][0][0], __file__)
        # Past the outermost frame, as Python says it: "sys" up to 3.11, "<sys>" since 3.12.
        self.assertEqual(plain[200][0][0], "sys" if sys.version_info < (3, 12) else "<sys>")

    def test_uninstall_puts_warn_back(self):
        original = warnings.warn
        warning_frames.install(self.patcher)
        self.assertIsNot(warnings.warn, original)
        self.patcher.restore()
        self.assertIs(warnings.warn, original)


if __name__ == "__main__":
    unittest.main()
