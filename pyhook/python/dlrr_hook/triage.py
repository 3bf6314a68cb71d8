"""Facts for failure triage that only Python can see (docs/triage.md).

- Packages: the top-level modules the job imported, with their versions and where they came
  from, sent once, at the first failure or at exit (dlrr_packages).  Standard-library and
  built-in modules are left out; for a module that lives in a site-packages directory the
  version is its installed distribution's metadata, as env-diff and replay read it
  (triage/env_probe.py, HostProbe.cc: a stale __version__, cycler's 0.10.0 in 0.11.0, made a
  spurious "package differs" on the recording machine), else __version__; the job's own
  modules cost nothing.
- GPU memory peaks (torch.cuda.max_memory_allocated/reserved and the device's total), when
  the job itself initialised CUDA (dlrr_gpu_memory), at a failure and at exit.
- Usage errors: argparse reports a bad launch argument by printing usage and exiting with
  status 2, which no excepthook sees; ArgumentParser.error is wrapped (once argparse is
  imported) to record the message as a failure of type argparse.ArgumentError.  In replay the
  same call marks the failure as reproduced.

The library side aggregates failed file-system lookups and library loads itself (libc hooks).
Everything here is best effort: an error is swallowed, never raised into the job.
"""

import ctypes
import os
import sys
import traceback

from . import native
from .imports import ImportWatcher
from .patching import Patcher

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_MAX_PACKAGES = 512


def _stdlib_names():
    names = set(getattr(sys, "stdlib_module_names", ()))
    names.update(sys.builtin_module_names)
    names.update(("__main__", "sitecustomize", "usercustomize", "dlrr_hook"))
    return names


def _module_path(module):
    path = getattr(module, "__file__", None)
    if path:
        if os.path.basename(path).startswith("__init__."):
            path = os.path.dirname(path)
        return str(path)
    locations = getattr(module, "__path__", None)
    try:
        return str(list(locations)[0]) if locations else ""
    except Exception:
        return ""


def _metadata_version(name):
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - python < 3.8
        return ""
    # `name` is an import name (PIL); its distribution may be named otherwise (Pillow), as
    # env-diff's probe (triage/env_probe.py) also resolves it.
    dists = [name]
    try:
        dists += metadata.packages_distributions().get(name, [])
    except Exception:
        pass
    for d in dists:
        try:
            return metadata.version(d)
        except Exception:
            continue
    return ""


def _norm(name):
    return name.lower().replace("-", "_").replace(".", "_")


def _dist_info_version(site_dir, name, listings):
    """The version in the name of `name`'s NAME-VERSION.dist-info / .egg-info directory in
    site_dir, as env-diff reads it from files (triage/EnvironmentDetail.h distVersion); one
    listing per directory (cached in `listings`), no metadata scan of every path entry."""
    entries = listings.get(site_dir)
    if entries is None:
        try:
            entries = listings[site_dir] = os.listdir(site_dir)
        except OSError:
            entries = listings[site_dir] = []
    want = _norm(name)
    for entry in entries:
        for suffix in (".dist-info", ".egg-info"):
            if entry.endswith(suffix):
                stem = entry[:-len(suffix)]
                dash = stem.find("-")
                if dash > 0 and _norm(stem[:dash]) == want:
                    return stem[dash + 1:].split("-py", 1)[0]
    return ""


def _version(name, module, path, listings=None):
    site = "-packages" + os.sep in path or path.endswith("-packages")
    if site:
        # The installed distribution's version, as replay and env-diff read it: a stale
        # __version__ (cycler 0.11.0 says 0.10.0) must not make a spurious "differs".
        version = _dist_info_version(os.path.dirname(path.rstrip(os.sep)), name, {} if listings is None else listings)
        if version:
            return version
    version = getattr(module, "__version__", None)
    if version is not None and not callable(version):
        try:
            text = str(version)
            if text and len(text) < 100:
                return text
        except Exception:
            pass
    if site:
        return _metadata_version(name)
    return ""


def imported_packages(modules=None):
    """[(name, version, path)] of the top-level non-standard-library modules imported."""
    modules = sys.modules if modules is None else modules
    skip = _stdlib_names()
    listings = {}
    out = []
    for name, module in sorted(list(modules.items()), key=lambda item: item[0]):
        if module is None or "." in name or name in skip or name.startswith("_"):
            continue
        path = _module_path(module)
        if path.startswith(_HOOK_DIR):
            continue
        out.append((name, _version(name, module, path, listings), path))
        if len(out) >= _MAX_PACKAGES:
            break
    return out


def gpu_peaks(torch):
    """[(device, max_allocated, max_reserved, total)] when the job initialised CUDA, else []."""
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None:
        return []
    try:
        if not cuda.is_initialized():
            return []
        count = cuda.device_count()
    except Exception:
        return []
    peaks = []
    for device in range(count):
        try:
            total = cuda.get_device_properties(device).total_memory
        except Exception:
            total = 0
        try:
            peaks.append((device, int(cuda.max_memory_allocated(device)), int(cuda.max_memory_reserved(device)),
                          int(total)))
        except Exception:
            continue  # e.g. after a device-side assert the context refuses every call
    return peaks


def _user_frames(frame):
    """traceback.FrameSummary list up to `frame`, without argparse's and the hook's frames."""
    stack = traceback.extract_stack(frame)
    argparse_file = getattr(sys.modules.get("argparse"), "__file__", None)
    return [f for f in stack if not f.filename.startswith(_HOOK_DIR) and f.filename != argparse_file]


class TriageFacts:
    """The hook's part of triage, owned by the Session (record and replay)."""

    def __init__(self, recorder, lib):
        self._rec = recorder
        self._lib = lib
        try:
            self.recording = lib.dlrr_mode() == native.MODE_RECORD
        except Exception:
            self.recording = False
        self._packages_sent = False
        self._patcher = Patcher()
        self._watcher = None

    def install(self):
        self._watcher = ImportWatcher("argparse", self._on_argparse)
        self._watcher.start()

    def uninstall(self):
        if self._watcher is not None:
            self._watcher.stop()
        self._patcher.restore()

    # ------------------------------------------------------------------ reports
    def report(self, reason):
        """GPU peaks and (once) packages; reason is "failure" or "exit".  Never raises."""
        if not self.recording:
            return
        if not getattr(self._rec, "runtime_sent", True) and not self._packages_sent:
            try:  # failed before the first step: the interpreter is all the runtime there is
                info = self._lib.dlrr_runtime_info
                info(b"python", native.text(sys.version.split()[0]))
                info(b"python.implementation", native.text(sys.implementation.name))
                info(b"python.executable", native.text(sys.executable or ""))
            except Exception:
                pass
        try:
            for device, allocated, reserved, total in gpu_peaks(self._rec.torch):
                self._lib.dlrr_gpu_memory(device, allocated, reserved, total)
        except Exception:
            pass
        if self._packages_sent:
            return
        self._packages_sent = True
        try:
            packages = imported_packages()
            n = len(packages)
            names = (ctypes.c_char_p * max(n, 1))(*[native.text(p[0]) for p in packages])
            versions = (ctypes.c_char_p * max(n, 1))(*[native.text(p[1]) for p in packages])
            paths = (ctypes.c_char_p * max(n, 1))(*[native.text(p[2]) for p in packages])
            self._lib.dlrr_packages(native.text(reason), n, names, versions, paths)
        except Exception:
            pass

    def usage_error(self, parser, message, frame):
        """ArgumentParser.error(message): recorded as a failure (argparse exits with status 2)."""
        prog = getattr(parser, "prog", "") or ""
        text = "%s: error: %s" % (prog, message) if prog else str(message)
        frames = _user_frames(frame)
        self.report("failure")
        n = len(frames)
        files = (ctypes.c_char_p * max(n, 1))(*[native.text(f.filename) for f in frames])
        lines = (ctypes.c_int32 * max(n, 1))(*[f.lineno or 0 for f in frames])
        functions = (ctypes.c_char_p * max(n, 1))(*[native.text(f.name) for f in frames])
        code = (ctypes.c_char_p * max(n, 1))(*[native.text(f.line or "") for f in frames])
        where = "%s:%d" % (frames[-1].filename, frames[-1].lineno or 0) if frames else ""
        self._lib.dlrr_failure_exception(b"argparse.ArgumentError", native.text(text), native.text(where), n,
                                         files, lines, functions, code)

    # ------------------------------------------------------------------ argparse
    def _on_argparse(self, argparse):
        facts = self

        def make_error(original):
            def error(parser, message):
                if facts._rec.active:
                    try:
                        facts.usage_error(parser, message, sys._getframe(1))
                    except Exception:
                        pass
                return original(parser, message)
            return error

        try:
            self._patcher.wrap(argparse.ArgumentParser, "error", make_error)
        except Exception:
            pass
