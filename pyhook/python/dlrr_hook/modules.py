"""Module paths, the stack of executing modules, and per-module output digests.

Patch points: the global hooks torch.nn.modules.module.register_module_forward_pre_hook /
register_module_forward_hook (public since 1.x; in 2.x registered with always_call=True so
the stack is popped even when a forward raises).

Paths: a module called while no module is executing is a root.  The first root of the
process has the path prefix "", later roots are named after their class ("CrossEntropyLoss",
"Net#2" when a name repeats).  A root's submodules get its named_modules() names under that
prefix ("features.0"; a child named by container indices alone gets its class too, "0 (Linear)",
since a bare "0" names nothing); a module reached in a forward but not registered under its root gets
"<parent path>.<ClassName>".  Paths are cached per module (weakly) so the per-call cost is
one dict lookup.

torch.compile: a compiled model is an OptimizedModule wrapping the original as `_orig_mod`; that
component is left out of paths and parameter names (shown as the original model's).  The
hooks stay out of the compiled graph, so a compiled module's submodules are not seen at all
(the recorder says so in the trace: Session._note_compiled).

Native hooks: where the `_dlrr_native` extension (pyhook/ext/ModuleHooks.cc, built for this
interpreter next to these modules) imports, the two global hooks are its C functions: the same
steps as the Python hooks below, and in the common case (path known, one dense contiguous CPU
tensor out) the output's digest itself, through dlrr_digest's address, with no Python frame and
no ctypes crossing.  Everything else goes to the same Python functions.  DLRR_NATIVE_HOOKS=0, or
an extension that does not import, keeps the Python hooks.  On torch 2.x a two-line Python shim
asks torch.compiler.is_dynamo_compiling() (or is_compiling()) first: torch.compile's tracer
inlines it and sees no call it cannot trace (a C function would break the graph at every module
call).

Data pipeline: module calls made while a DataLoader fetches and collates a batch in this
thread (torchvision transforms such as Normalize are nn.Modules; with num_workers=0 they run
in the main process) are not the step's compute.  Replay serves the batch, so they never run
there: they are left out of the stack, the path naming and the digests (see in_fetch).
"""

import os
import re
import threading
import weakref

_fetch = threading.local()


class in_fetch:
    """Context: this thread is fetching a batch; module calls inside are not digested."""

    __slots__ = ()

    def __enter__(self):
        _fetch.depth = getattr(_fetch, "depth", 0) + 1

    def __exit__(self, *exc):
        _fetch.depth -= 1
        return False


def fetching():
    return getattr(_fetch, "depth", 0) > 0


_BARE_INDEX = re.compile(r"^[0-9]+(\.[0-9]+)*$")  # a path made of container indices only


def visible_name(name):
    """A named_modules()/named_parameters() name without torch.compile's `_orig_mod` parts."""
    if "_orig_mod" not in name:
        return name
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def is_compiled(module):
    """A torch.compile'd module (torch._dynamo's OptimizedModule)."""
    return type(module).__name__ == "OptimizedModule" and getattr(module, "_orig_mod", None) is not None


class ModulePaths:
    """Module -> path bytes, with root naming as described in the module docstring.

    Also caches each root's named parameters.  On torch 2.x the global module/parameter
    registration hooks tell us when any module tree changes, and the cache lives until then.
    Without them (1.x) every step asks again: the extension's module_tree_version
    (pyhook/ext/ModuleTreeVersion.cc) fingerprints the tree's `_parameters` and `_modules`
    dicts in ~1 us, and the names are rebuilt only when it changed (named_parameters() cost
    ~150 us a step on the lm shape of bench/shape_job.py; issue 33); without the extension,
    or where it cannot tell, they are rebuilt for every step.
    """

    def __init__(self, tree_version=None):
        self._paths = {}        # id(module) -> (weakref, path bytes)
        self._root_names = {}   # prefix -> weakref of the root that owns it
        # id(root) -> (weakref, generation, [(name bytes, param)], tree fingerprint, prefix)
        self._params = {}
        self.generation = 0
        self.tracks_registrations = False
        self._tree_version = tree_version  # root -> bytes or None (ModuleTreeVersion.cc)

    @property
    def table(self):
        """id(module) -> (weakref, path bytes): the native hooks read it directly (ModuleHooks.cc)."""
        return self._paths

    def lookup(self, module):
        entry = self._paths.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        return None

    def _store(self, module, path):
        key = id(module)
        paths = self._paths

        def forget(ref, key=key):
            entry = paths.get(key)
            if entry is not None and entry[0] is ref:
                del paths[key]

        path_bytes = path.encode("utf-8", "surrogatepass")
        paths[key] = (weakref.ref(module, forget), path_bytes)
        return path_bytes

    def _index(self, root, prefix):
        for name, module in root.named_modules():
            name = visible_name(name)
            if self.lookup(module) is None:
                path = prefix + "." + name if prefix and name else (prefix or name)
                if _BARE_INDEX.match(path):
                    # an nn.Sequential's child is named by its index alone: "0" says nothing,
                    # "0 (Linear)" does, wherever the name is printed
                    path = "%s (%s)" % (path, type(module).__name__)
                self._store(module, path)

    def _root_prefix(self, root):
        if not self._root_names:
            prefix = ""
        else:
            base = type(root).__name__
            prefix, n = base, 1
            while prefix in self._root_names and self._root_names[prefix]() is not None:
                n += 1
                prefix = "%s#%d" % (base, n)
        self._root_names[prefix] = weakref.ref(root)
        return prefix

    def path_of(self, module, parent, root):
        """Path bytes of `module`, called from `parent` (None for a root) under `root`."""
        path = self.lookup(module)
        if path is not None:
            return path
        if parent is None:
            self._index(module, self._root_prefix(module))
            return self.lookup(module)
        self._index(root, self.path_of(root, None, root).decode("utf-8", "surrogatepass"))
        path = self.lookup(module)
        if path is not None:
            return path
        parent_path = self.path_of(parent, None if parent is root else root, root)
        parent_text = parent_path.decode("utf-8", "surrogatepass")
        name = "<%s>" % type(module).__name__
        return self._store(module, parent_text + "." + name if parent_text else name)

    def invalidate(self, *args):
        """A module tree changed somewhere (a registration hook fired, or a new step on 1.x)."""
        self.generation += 1

    def parameters(self, root):
        """[(name bytes, parameter)] of a root, under its prefix."""
        entry = self._params.get(id(root))
        if entry is not None and entry[1] == self.generation and entry[0]() is root:
            return entry[2]
        prefix = self.lookup(root)
        fingerprint = None
        if entry is not None and entry[0]() is root:
            if self._tree_version is not None and entry[3] is not None and entry[4] == prefix:
                fingerprint = self._tree_version(root)
                if fingerprint == entry[3]:
                    self._params[id(root)] = (entry[0], self.generation, entry[2], fingerprint, prefix)
                    return entry[2]
        if fingerprint is None and self._tree_version is not None and not self.tracks_registrations:
            fingerprint = self._tree_version(root)  # before the walk: a change during it shows next time
        text = prefix.decode("utf-8", "surrogatepass") if prefix else ""
        params = [((text + "." + visible_name(name) if text else visible_name(name)).encode("utf-8", "surrogatepass"), p)
                  for name, p in root.named_parameters()]
        self._params[id(root)] = (weakref.ref(root), self.generation, params, fingerprint, prefix)
        return params


def native_extension():
    """The `_dlrr_native` extension module, or None (not built for this interpreter, or turned off)."""
    if os.environ.get("DLRR_NATIVE_HOOKS", "1") == "0":
        return None
    try:
        from . import _dlrr_native
    except ImportError:
        return None
    return _dlrr_native


class ModuleTracker:
    """Maintains the per-thread stack of executing modules and reports outputs.

    on_root(module, grad_enabled) runs before a root's forward; on_output(path, output)
    after every module's forward.  Both are called inside the recorder's guard.
    """

    def __init__(self, recorder, torch, on_root, on_output, digest_outputs, native_digest=None, native=False):
        """native_digest: a dict of what the native hooks need to digest a dense CPU output
        themselves (RecordStrategy.native_digest), None to send every output to on_output.  native:
        the extension module to use, False to look for it (native_extension()), None for none."""
        self._rec = recorder
        self._torch = torch
        self._on_root = on_root
        self._on_output = on_output
        self._digest_outputs = digest_outputs
        self._native_digest = native_digest
        self._native = native_extension() if native is False else native
        self.native_hooks = None  # the installed _dlrr_native.ModuleHooks, if any
        version = getattr(self._native, "module_tree_version", None)
        module_type = torch.nn.Module
        self.paths = ModulePaths(None if version is None else lambda root: version(root, module_type))
        self._local = threading.local()
        self._handles = []
        # torch.compile traces module calls: stay out of the graph (2.3+; None before).
        self._is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)

    def reset_stack(self):
        """Forget the calling thread's stack (called where no forward can be running)."""
        self._local.__dict__.pop("stack", None)

    def stack(self):
        """The calling thread's executing modules, outermost first (None or empty: none runs)."""
        return self._local.__dict__.get("stack")

    def install(self, module_module):
        rec = self._rec
        local = self._local
        paths = self.paths
        is_grad_enabled = self._torch.is_grad_enabled
        is_compiling = self._is_compiling
        on_root = self._on_root
        on_output = self._on_output
        digest_outputs = self._digest_outputs
        path_entries = paths.table.get  # the per-call lookup, inlined below (ModulePaths.lookup)
        fetch = _fetch

        # The hooks run for every module call of every step: lookups are bound once, and the
        # common case (path known) is inlined; see docs/performance.md.
        def pre_hook(module, args):
            if not rec.active or (is_compiling is not None and is_compiling()) or getattr(fetch, "depth", 0):
                return None
            try:
                stack = local.__dict__.get("stack")
                if stack is None:
                    stack = local.stack = []
                if not stack:
                    on_root(module, is_grad_enabled())
                stack.append(module)
            except Exception as exc:  # never into the job
                rec.internal_error(exc)
            return None

        def post_hook(module, args, output):
            if not rec.active or (is_compiling is not None and is_compiling()) or getattr(fetch, "depth", 0):
                return None
            try:
                stack = local.__dict__.get("stack")
                if not stack:
                    return None
                if stack[-1] is module:
                    stack.pop()
                else:
                    # A forward raised below us (1.x has no always_call): unwind to module.
                    while stack and stack.pop() is not module:
                        pass
                if digest_outputs and output is not None:
                    entry = path_entries(id(module))
                    if entry is not None and entry[0]() is module:
                        on_output(entry[1], output)
                    else:
                        parent = stack[-1] if stack else None
                        root = stack[0] if stack else module
                        on_output(paths.path_of(module, parent, root), output)
            except Exception as exc:
                rec.internal_error(exc)
            return None

        invalidate = paths.invalidate
        for name in ("register_module_parameter_registration_hook",
                     "register_module_module_registration_hook"):
            register = getattr(module_module, name, None)  # torch >= 2.0
            if register is not None:
                self._handles.append(register(lambda *args: invalidate()))
        paths.tracks_registrations = len(self._handles) == 2

        native_hooks = self._native_hooks() if self._native is not None else None
        self.native_hooks = native_hooks
        pre, post = (pre_hook, post_hook) if native_hooks is None else \
            _native_entry_points(native_hooks, is_compiling, getattr(self._torch, "compiler", None))

        register_pre = module_module.register_module_forward_pre_hook
        register_post = module_module.register_module_forward_hook
        self._handles.append(register_pre(pre))
        try:
            handle = register_post(post, always_call=True)
        except TypeError:  # torch < 2.1
            handle = register_post(post)
        self._handles.append(handle)

    def _native_hooks(self):
        """A _dlrr_native.ModuleHooks over this tracker's state, or None (the Python hooks)."""
        rec = self._rec
        digest = self._native_digest or {}
        try:
            return self._native.ModuleHooks(
                rec=rec, local=self._local, fetch=_fetch,
                is_compiling=None,  # torch 2.x: asked by the Python shim, where torch.compile can see it
                is_grad_enabled=self._torch.is_grad_enabled, on_root=self._on_root, on_output=self._on_output,
                path_of=self.paths.path_of, paths=self.paths.table, calls=digest.get("calls", {}),
                tensor_type=self._torch.Tensor, strided=self._torch.strided, dtypes=digest.get("dtypes", {}),
                failure_snapshot=digest.get("failure_snapshot", _nothing), internal_error=rec.internal_error,
                digest_address=digest.get("address", 0), keep=digest.get("keep", 0),
                digest_outputs=bool(self._digest_outputs), borrow_address=digest.get("borrow_address", 0))
        except Exception:  # an extension of another build: the Python hooks do the same
            return None

    def uninstall(self):
        while self._handles:
            self._handles.pop().remove()


class _NoExportFlag:
    _is_compiling_flag = False


def _native_entry_points(native_hooks, is_compiling, compiler=None):
    """The functions to register: the C functions themselves, or on torch 2.x (is_compiling not
    None) Python shims that torch.compile's tracer inlines as no-ops (see the module docstring).

    Where torch has them (2.6), the shims ask is_dynamo_compiling() and then read the flag that
    is_compiling() returns outside dynamo: the same answer (dynamo folds either call to True; the
    flag is export's), one Python frame per hook instead of three (is_compiling calls
    torch.jit.is_scripting), twice per module call.  Elsewhere they ask is_compiling() itself."""
    native_pre, native_post = native_hooks.pre, native_hooks.post
    if is_compiling is None:
        return native_pre, native_post
    compiling, flags = is_compiling, _NoExportFlag
    if getattr(compiler, "is_dynamo_compiling", None) is not None and \
            isinstance(getattr(compiler, "_is_compiling_flag", None), bool):
        compiling, flags = compiler.is_dynamo_compiling, compiler

    def pre_hook(module, args):
        if compiling() or flags._is_compiling_flag:
            return None
        return native_pre(module, args)

    def post_hook(module, args, output):
        if compiling() or flags._is_compiling_flag:
            return None
        return native_post(module, args, output)
    return pre_hook, post_hook


def _nothing():
    return None
