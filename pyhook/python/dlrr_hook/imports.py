"""Run a callback right after a module (torch) has been imported, without importing it.

A job that never imports torch must pay nothing, so the hook cannot import torch itself.
A sys.meta_path finder sees the first `import torch`, lets the normal finders locate it,
and wraps that one loader's exec_module so the callback runs once torch/__init__.py has
finished executing (torch.nn, torch.optim and torch.utils.data are loaded by then).
"""

import sys


class ImportWatcher:
    """One-shot post-import callback for a top-level module name."""

    def __init__(self, name, callback):
        self._name = name
        self._callback = callback
        self._searching = False
        self._fired = False

    def start(self):
        """Fires at once when the module is already imported, else waits for its import."""
        module = sys.modules.get(self._name)
        if module is not None and getattr(module, "__spec__", None) is not None:
            self.fire(module)
        else:
            sys.meta_path.insert(0, self)

    def stop(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass

    # importlib.abc.MetaPathFinder protocol
    def find_spec(self, fullname, path=None, target=None):
        if fullname != self._name or self._searching or self._fired:
            return None
        self._searching = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._searching = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        try:
            self._wrap_loader(spec.loader)
        except (AttributeError, TypeError):
            spec.loader = _LoaderProxy(spec.loader, self)
        return spec

    def invalidate_caches(self):
        pass

    def _wrap_loader(self, loader):
        original = loader.exec_module
        watcher = self

        def exec_module(module):
            original(module)  # exceptions from the module's own import pass through untouched
            try:
                del loader.exec_module  # back to the class's method
            except AttributeError:
                pass
            watcher.fire(module)

        loader.exec_module = exec_module

    def fire(self, module):
        if self._fired:
            return
        self._fired = True
        self.stop()
        self._callback(module)


class _LoaderProxy:
    """Stands in for a loader whose exec_module cannot be replaced on the instance."""

    def __init__(self, loader, watcher):
        self._loader = loader
        self._watcher = watcher

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._watcher.fire(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)
