"""Preflight: the unchanged job in miniature (dlpreflight, docs/preflight.md).

Active when the launcher sets DLRR_PREFLIGHT=K (K >= 1) in a recorded process:

- every DataLoader pass is cut to K batches (the iterator's _next_data raises StopIteration
  once K batches were given; the recorder's own DataLoader patch then sees an ordinary end of
  the pass), so every epoch, every evaluation pass and whatever follows them runs;
- a loop that trains without a DataLoader (K optimizer steps, or K backward() calls in a job
  with no optimizer, with no batch fetched in between) is left after its K-th update: the
  frame that runs the loop is traced until it is back at the loop's header, and there it
  jumps to the loop's exit (or to the loop's own `break`); a loop that cannot be left that
  way runs on, and the report says so;
- what the run did is sent as RuntimeInfo items `preflight.*` (one key per fact, written as
  they happen, so a job that dies still reports what came before): the passes with their
  phase (training when a backward/step ran in them, else evaluation), batch counts, whether
  they were cut, and their peak RSS; the loops cut; torch.save / torch.jit.save /
  torch.onnx.export calls with their paths and outcome; paths the job's own code opened,
  listed, created or removed (outside the Python installation); environment variables its
  code read.

Nothing here changes what a pass computes: only how many batches it takes.  Every hook body
is guarded: an internal error turns the fact gathering off, never the job.
"""

import dis
import linecache
import os
import sys
import warnings
import weakref

_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
_MAX_PATHS = 256
_MAX_ENV = 128
_MAX_SAVES = 128
_MAX_LOADERS = 128
# Backward jumps that close a loop: 3.11 ends a `while COND:` loop with a conditional one
# (the condition is repeated at the bottom), 3.12+ with JUMP_BACKWARD.  Not
# JUMP_BACKWARD_NO_INTERRUPT: no loop of the job's ends with it (3.11 uses it in `yield from`
# and `await`; 3.12+ also at the end of an `except` block, laid out after the function's body,
# jumping back into it: taken for a loop, it hid the loop around the `try`).
_LOOP_OPS = ("JUMP_BACKWARD", "JUMP_ABSOLUTE", "POP_JUMP_BACKWARD_IF_TRUE", "POP_JUMP_BACKWARD_IF_FALSE",
             "POP_JUMP_BACKWARD_IF_NONE", "POP_JUMP_BACKWARD_IF_NOT_NONE")
# os.getenv and Mapping.get between os.environ and its reader (frozen modules from 3.11 on)
_ENVIRON_FILES = ("os.py", "_collections_abc.py", "<frozen os>", "<frozen _collections_abc>")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def preflight_batches(environ=None):
    """K from DLRR_PREFLIGHT, or 0 when preflight is off (unset, empty, not a positive int)."""
    value = (environ if environ is not None else os.environ).get("DLRR_PREFLIGHT", "")
    if not value.isdigit():
        return 0
    k = int(value)
    return k if k > 0 else 0


def _ignored_roots():
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(_HOOK_DIR), "/proc", "/sys", "/dev",
             "/usr/lib", "/usr/share", "/usr/local/lib", "/lib", "/etc/ld.so.cache"}
    try:
        import site
        roots.update(site.getsitepackages())
        roots.add(site.getusersitepackages())
    except Exception:
        pass
    trace = os.environ.get("DLRR_TRACE_DIR")
    if trace:
        roots.add(trace)
    return tuple(sorted(os.path.abspath(r) for r in roots if r))


def _under(path, roots):
    for root in roots:
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            return True
    return False


# Python versions whose loop layout find_loop reads and whose f_lineno jump out of a loop was
# checked (Debian 12's 3.11, Debian 13's 3.13).
LOOP_JUMP_VERSIONS = ((3, 11), (3, 13))


def _starts_line(x):
    """The line instruction x starts, or None (Python 3.13 made starts_line a bool and put the
    number in line_number)."""
    if isinstance(x.starts_line, bool):
        return getattr(x, "line_number", None) if x.starts_line else None
    return x.starts_line


def find_loop(code, offset):
    """(start, exit, break_line) of the innermost loop of `code` around instruction `offset`.

    start: offset the loop jumps back to (a `for`'s FOR_ITER, a `while`'s first body
    instruction); exit: where the loop is left normally; break_line: the line of a `break`
    of this loop (a jump to its exit from inside), or None.  None when no loop encloses it.
    """
    ins = list(dis.get_instructions(code))
    best = None
    for i, x in enumerate(ins):
        if x.opname in _LOOP_OPS and isinstance(x.argval, int) and x.argval <= offset < x.offset:
            if best is None or x.argval > best[0]:
                best = (x.argval, x.offset, i)
    if best is None:
        return None
    start, end, i = best
    head = next((x for x in ins if x.offset == start), None)
    if head is not None and head.opname == "FOR_ITER":
        exit_offset = head.argval
        # 3.12+ ends a for loop with END_FOR (3.13: END_FOR, POP_TOP) numbered with the header's
        # line; the loop is left for the instruction after them.
        at = next((j for j, x in enumerate(ins) if x.offset == exit_offset), None)
        if at is not None and ins[at].opname == "END_FOR":
            at += 1
            if at < len(ins) and ins[at].opname == "POP_TOP" and sys.version_info >= (3, 13):
                at += 1
            exit_offset = ins[at].offset if at < len(ins) else None
    else:
        exit_offset = ins[i + 1].offset if i + 1 < len(ins) else None
    break_line = None
    line = None
    for x in ins:
        if _starts_line(x) is not None:
            line = _starts_line(x)
        # A break jumps out of the loop: to its exit, or (3.13, a loop ending its enclosing loop's
        # body) straight back to the enclosing loop's header.
        out = isinstance(x.argval, int) and (x.argval == exit_offset or not start <= x.argval <= end)
        if (start < x.offset < end and x.opname.startswith("JUMP") and out and line is not None and
                linecache.getline(code.co_filename, line).strip() == "break"):
            break_line = line
            break
    return start, exit_offset, break_line


def _lines_of(code):
    """{offset: line} of every instruction (the line in force at that offset)."""
    lines, line = {}, None
    for x in dis.get_instructions(code):
        if _starts_line(x) is not None:
            line = _starts_line(x)
        lines[x.offset] = line
    return lines


def _line_runs(lines):
    """{line: how many separate stretches of instructions carry it}.  Setting f_lineno to a
    line held by two stretches lands on the one whose stack fits deepest, not necessarily the
    first: the line of a `with` after a loop is also the line of the with's exit code, whose
    stack slot for __exit__ takes the loop's iterator (a false `TypeError: 'range_iterator'
    object is not callable`)."""
    runs, previous = {}, None
    for o in sorted(lines):
        if lines[o] is not None and lines[o] != previous:
            runs[lines[o]] = runs.get(lines[o], 0) + 1
        previous = lines[o]
    return runs


def _library_file(name, roots):
    """A frame of the standard library, site-packages, dlrr's hook or the import machinery."""
    return name.startswith("<") or _under(os.path.abspath(name), roots)


def _frame_above(depth):
    """sys._getframe(depth + 1) of the caller, or None when the stack is not that deep."""
    try:
        return sys._getframe(depth + 1)
    except ValueError:
        return None


def _stdlib_dir():
    try:
        import sysconfig
        return os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
    except Exception:
        return os.path.dirname(os.path.abspath(os.__file__)) + os.sep


_STDLIB = _stdlib_dir()


def _caller_is_import_or_hook(frame):
    """The event was raised by the import system or by dlrr's hook itself: the innermost
    frame that is not the standard library's is the hook's (or an import is under way)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or name.startswith(_HOOK_DIR):
            return True
        if name.startswith("<frozen") or (name.startswith(_STDLIB) and "-packages" not in name):
            frame = frame.f_back
            continue
        return False
    return False


class _Pass:
    __slots__ = ("key", "loader", "dataset", "length", "batches", "updates", "peak", "cut", "batch_size",
                 "gpu_start", "gpu_peak", "gpu_new")

    def __init__(self, key, loader, dataset, length, batch_size):
        self.batch_size = batch_size
        self.gpu_start = None  # the CUDA allocator's peak so far when the pass began
        self.gpu_peak = None
        self.gpu_new = False
        self.key = key
        self.loader = loader
        self.dataset = dataset
        self.length = length
        self.batches = 0
        self.updates = 0
        self.peak = 0
        self.cut = False


class Preflight:
    """The job in miniature: cuts passes and loops, and reports what ran (see module doc)."""

    def __init__(self, lib, k, info):
        self.lib = lib
        self.k = k
        self._info = info  # (key, value) -> RuntimeInfo item
        self.active = True
        self._roots = _ignored_roots()
        self._passes = {}  # id(iterator) -> _Pass in progress
        self._stack = []  # passes in progress, outermost first (nested evaluation passes)
        self._loaders = {}  # id(the loader's batch sampler) -> loader number
        self._pass_count = 0
        self._fetched = 0  # batches fetched since the last update outside a pass
        self._loop_updates = 0
        self._loops_cut = 0
        self._optimizer_seen = False
        self._backward_counted = False
        self._paths = {}
        self._env = {}
        self._saves = 0
        self._no_loop_reported = False
        self._uncuttable = set()  # (code, loop start) reported as not cut once
        self._tracing = None  # (frame, code, start, exit_line, break_line, previous trace)
        self._made = []  # [weakref to the loader's batch sampler, dataset name, where made, iterated]
        self._next_cut = None  # loader whose pass was cut in a next() of the job's own loop
        self._last_loader = None  # loader of the last batch fetched
        self._clear_refs_ok = True
        self.cuda_rewrites = 0  # device arguments moved from CUDA to the CPU
        self._cpu_mode = None
        self._torch = None
        self.error = None

    # ------------------------------------------------------------------ plumbing
    def _fact(self, key, value):
        self._info(key, value)

    def _guard(self, fn, *args):
        if not self.active:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # never the job's problem
            self.active = False
            self.error = exc
            try:
                self._fact("preflight.error", "%s: %s" % (type(exc).__name__, exc))
            except Exception:
                pass
            return None

    def install(self):
        """Process-wide parts (audit hook, environment reads): at interpreter start."""
        self._fact("preflight.k", str(self.k))
        sys.addaudithook(self._audit)
        self._patch_environ()

    # ------------------------------------------------------------------ memory
    def _hwm_kib(self):
        try:
            with open("/proc/self/status", "rb") as f:
                for line in f:
                    if line.startswith(b"VmHWM:"):
                        return int(line.split()[1])
        except Exception:
            pass
        return 0

    def _reset_hwm(self):
        """Peak RSS starts again from the current RSS (Linux >= 4.0: clear_refs 5)."""
        if not self._clear_refs_ok:
            return
        try:
            fd = os.open("/proc/self/clear_refs", os.O_WRONLY)
            try:
                os.write(fd, b"5")
            finally:
                os.close(fd)
        except Exception:
            self._clear_refs_ok = False

    def _fold_peak(self):
        hwm = self._hwm_kib()
        for p in self._stack:
            if hwm > p.peak:
                p.peak = hwm
        return hwm

    # ------------------------------------------------------------------ DataLoader passes
    def install_torch(self, patcher, torch, dataloader):
        self._torch = torch
        for cls_name in ("_SingleProcessDataLoaderIter", "_MultiProcessingDataLoaderIter"):
            cls = getattr(dataloader, cls_name, None)
            if cls is not None and "_next_data" in vars(cls):
                patcher.wrap(cls, "_next_data", self._make_next_data)
        loader_cls = getattr(dataloader, "DataLoader", None)
        if loader_cls is not None:
            patcher.wrap(loader_cls, "__init__", self._make_loader_init)
        patcher.wrap(torch, "save", lambda original: self._make_saver(original, "torch.save"))
        jit = getattr(torch, "jit", None)
        if jit is not None and hasattr(jit, "save"):
            patcher.wrap(jit, "save", lambda original: self._make_saver(original, "torch.jit.save"))
        script = sys.modules.get("torch.jit._script")
        for name in ("RecursiveScriptModule", "ScriptModule"):  # traced/scripted_model.save(path)
            cls = getattr(script, name, None)
            if cls is not None and "save" in vars(cls):
                patcher.wrap(cls, "save", lambda original: self._make_saver(original, "ScriptModule.save"))
        onnx = sys.modules.get("torch.onnx")
        if onnx is not None and hasattr(onnx, "export"):
            patcher.wrap(onnx, "export", lambda original: self._make_saver(original, "torch.onnx.export"))

    # ------------------------------------------------------------------ CUDA asked, none here
    def install_cpu_fallback(self, patcher, torch):
        """On a machine without a GPU, CUDA devices the job asks for are given the CPU (a
        global TorchFunctionMode rewrites device arguments of factories, Tensor.to/.cuda and
        so Module.to/.cuda; torch.cuda.set_device/synchronize become no-ops), the way a user
        would edit the job to test it on a laptop.  Decided without initialising CUDA: a CPU
        build of torch, or no NVIDIA driver."""
        if getattr(torch.version, "cuda", None) and os.path.exists("/proc/driver/nvidia/version"):
            return False
        mode_base = getattr(getattr(torch, "overrides", None), "TorchFunctionMode", None)
        if mode_base is None:
            return False
        pf = self

        def cpu(device):
            if isinstance(device, str) and device.startswith("cuda"):
                pf.cuda_rewrites += 1
                return "cpu"
            if isinstance(device, torch.device) and device.type == "cuda":
                pf.cuda_rewrites += 1
                return torch.device("cpu")
            if isinstance(device, int) and not isinstance(device, bool):
                pf.cuda_rewrites += 1  # .to(0) / .cuda(0): device ordinal 0 is cuda:0
                return "cpu"
            return device

        class CudaToCpu(mode_base):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if "device" in kwargs:
                    kwargs = dict(kwargs)
                    kwargs["device"] = cpu(kwargs["device"])
                name = getattr(func, "__name__", "")
                if name == "cuda":
                    pf.cuda_rewrites += 1
                    return args[0]
                if name == "to" and len(args) > 1:
                    args = (args[0],) + tuple(cpu(a) for a in args[1:])
                return func(*args, **kwargs)

        cuda = getattr(torch, "cuda", None)
        for name in ("set_device", "synchronize"):
            if cuda is not None and hasattr(cuda, name):
                patcher.wrap(cuda, name, lambda original: (lambda *a, **k: None))
        self._cpu_mode = CudaToCpu()
        self._cpu_mode.__enter__()  # for the rest of the process
        self._fact("preflight.cpu", "no GPU here: CUDA devices the job asks for are given the CPU")
        return True

    def _make_loader_init(self, original):
        pf = self

        def __init__(loader, *args, **kwargs):
            original(loader, *args, **kwargs)
            pf._guard(pf._note_loader_made, loader)
        return __init__

    def _note_loader_made(self, loader):
        """Every DataLoader made, with the job's line that made it: one never iterated is a
        phase the miniature did not reach (validation every N steps, with N > K)."""
        if len(self._made) >= _MAX_LOADERS:
            return
        sampler = getattr(loader, "_index_sampler", None)
        frame = _frame_above(2)
        while frame is not None and (_library_file(frame.f_code.co_filename, self._roots)
                                     or frame.f_code.co_filename.startswith(_HOOK_DIR)):
            frame = frame.f_back
        where = "%s:%d" % (os.path.basename(frame.f_code.co_filename), frame.f_lineno) if frame else "?"
        try:
            ref = weakref.ref(sampler)
        except TypeError:
            return
        self._made.append([ref, type(getattr(loader, "dataset", None)).__name__, where, False])

    def _note_loader_iterated(self, it):
        sampler = getattr(it, "_index_sampler", None)
        for made in self._made:
            if made[0]() is sampler:
                made[3] = True

    def _cut_in_next_call(self):
        """The batch was asked for by an explicit next() in the job's own code (not by a `for`
        over the iterator, nor by a library): the job catches the StopIteration and makes a
        new iterator, so cutting the pass does not end its loop."""
        frame = _frame_above(2)
        data_dir = os.sep + os.path.join("torch", "utils", "data") + os.sep
        while frame is not None and (data_dir in frame.f_code.co_filename
                                     or frame.f_code.co_filename.startswith(_HOOK_DIR)):
            frame = frame.f_back
        if frame is None or _library_file(frame.f_code.co_filename, self._roots):
            return False
        for x in dis.get_instructions(frame.f_code):
            if x.offset == frame.f_lasti:
                return x.opname != "FOR_ITER"
        return False

    def _make_next_data(self, original):
        pf = self

        def _next_data(it):
            if not pf.active:
                return original(it)
            p = pf._passes.get(id(it))
            if p is None or getattr(it, "_num_yielded", 0) == 0:
                if p is not None:
                    pf._guard(pf._end_pass, it, p, False)
                p = pf._guard(pf._begin_pass, it)
            if p is not None and p.batches >= pf.k and not 0 <= p.length <= p.batches:
                pf._guard(pf._end_pass, it, p, True)
                if pf._guard(pf._cut_in_next_call):
                    pf._next_cut = p.loader
                if not getattr(it, "_persistent_workers", False) and hasattr(it, "_shutdown_workers"):
                    it._shutdown_workers()
                raise StopIteration
            try:
                data = original(it)
            except StopIteration:
                if p is not None:
                    pf._guard(pf._end_pass, it, p, False)
                raise
            if p is not None:
                p.batches += 1
                pf._fetched += 1
                pf._last_loader = p.loader
            return data
        return _next_data

    def _begin_pass(self, it):
        dataset = getattr(it, "_dataset", None)
        # The batch sampler is made once per DataLoader (two loaders may share a dataset).
        key = id(getattr(it, "_index_sampler", None) or dataset)
        loader = self._loaders.setdefault(key, len(self._loaders))
        self._note_loader_iterated(it)
        if self._next_cut is not None and self._next_cut != loader:
            self._next_cut = None
        try:
            length = len(it)
        except Exception:
            length = -1
        self._fold_peak()
        self._reset_hwm()
        batch_size = getattr(getattr(it, "_index_sampler", None), "batch_size", None)
        p = _Pass(self._pass_count, loader, type(dataset).__name__, length,
                  batch_size if isinstance(batch_size, int) else -1)
        self._pass_count += 1
        self._passes[id(it)] = p
        self._stack.append(p)
        p.peak = self._hwm_kib()
        p.gpu_start = self._gpu_max()
        return p

    def _gpu_max(self):
        """The CUDA caching allocator's peak so far (max over devices), or None without CUDA.
        Never resets the statistics: a job may log them itself."""
        cuda = getattr(self._torch, "cuda", None)
        if cuda is None or not cuda.is_initialized():
            return None
        return max((cuda.max_memory_allocated(d) for d in range(cuda.device_count())), default=None)

    def _end_pass(self, it, p, cut):
        self._fold_peak()
        now = self._gpu_max()
        if now is not None:
            # A peak above the one before the pass was reached in it (exact); otherwise the
            # pass stayed at or below the earlier peak.
            p.gpu_peak = now
            p.gpu_new = p.gpu_start is None or now > p.gpu_start
        self._passes.pop(id(it), None)
        if p in self._stack:
            self._stack.remove(p)
        p.cut = cut or p.cut
        self._send_pass(p)

    def _send_pass(self, p):
        self._fact("preflight.pass.%d" % p.key,
                   "loader=%d dataset=%s phase=%s batches=%d of=%d cut=%d updates=%d peak_rss_kib=%d "
                   "batch_size=%d" % (p.loader, p.dataset, "training" if p.updates else "evaluation", p.batches,
                                      p.length, 1 if p.cut else 0, p.updates, p.peak, p.batch_size)
                   + ("" if p.gpu_peak is None else " gpu_peak=%d gpu_new_peak=%d" % (p.gpu_peak, 1 if p.gpu_new else 0)))

    # ------------------------------------------------------------------ updates and loops
    def on_update(self, kind):
        """kind: 'step' after optimizer.step(), 'backward' after backward()."""
        if not self.active:
            return
        if kind == "step":
            first = not self._optimizer_seen
            self._optimizer_seen = True
            if first and self._backward_counted:
                self._backward_counted = False
                return  # the backward() before the job's first step already counted this update
        elif self._optimizer_seen:
            return  # with an optimizer, steps count updates, not backward() calls
        else:
            self._backward_counted = True
        for p in self._stack:
            p.updates += 1
        if self._fetched:  # this update used a batch of a pass: the pass is what is cut
            self._fetched = 0
            self._loop_updates = 0
            if self._next_cut is None or self._next_cut != self._last_loader or self._tracing is not None:
                return
            # ...unless the job's loop draws with next() and makes a new iterator when one
            # ends (`while step < max_steps:`): it is left as a loop without a DataLoader.
            self._next_cut = None
            self._loop_updates = self.k
            self._guard(self._leave_loop, sys._getframe(1))
            return
        if self._tracing is not None:
            return
        self._loop_updates += 1
        if self._loop_updates >= self.k:
            self._guard(self._leave_loop, sys._getframe(1))

    def _user_frame_with_loop(self, frame):
        while frame is not None:
            code = frame.f_code
            path = os.path.abspath(code.co_filename) if not code.co_filename.startswith("<") else ""
            if path and not _under(path, self._roots):
                loop = find_loop(code, frame.f_lasti)
                if loop is not None:
                    return frame, loop
            frame = frame.f_back
        return None, None

    def _leave_loop(self, frame):
        if sys.version_info[:2] not in LOOP_JUMP_VERSIONS:
            # The jump relies on each version's loop layout and line events (checked on these
            # versions only): elsewhere no jump is ever attempted; the loop runs whole.
            if not self._no_loop_reported:
                self._no_loop_reported = True
                self._fact("preflight.loop.%d" % self._loops_cut, "not cut: leaving loops without a "
                           "DataLoader is not supported on Python %d.%d (tested: %s); they run whole"
                           % (sys.version_info[:2] + (", ".join("%d.%d" % v for v in LOOP_JUMP_VERSIONS),)))
                self._loops_cut += 1
            self._loop_updates = 0
            return
        frame, loop = self._user_frame_with_loop(frame)
        where = None
        if frame is None:
            if not self._no_loop_reported:  # once: it is the same story at every K updates
                self._no_loop_reported = True
                self._fact("preflight.loop.%d" % self._loops_cut, "not cut: no loop of the job's code "
                           "encloses its updates")
                self._loops_cut += 1
            self._loop_updates = 0
            return
        code = frame.f_code
        lines = _lines_of(code)
        # The innermost loop that can be left; when it cannot (no line to jump to), the loop
        # around it in the same function: the inner one then runs its course once, and the
        # job still gets out after one pass of the outer body instead of all of them.
        while loop is not None:
            start = loop[0]
            if (code, start) not in self._uncuttable:
                target, header_line, where, why = self._loop_target(code, lines, loop)
                if target is not None:
                    break
                self._uncuttable.add((code, start))
                self._fact("preflight.loop.%d" % self._loops_cut, "not cut: %s (%s); it ran to its end" % (where, why))
                self._loops_cut += 1
            loop = find_loop(code, start - 1) if start > 0 else None
        if loop is None:
            self._loop_updates = 0
            return
        previous = sys.gettrace()
        self._tracing = (frame, start, header_line, target, where, previous)
        frame.f_trace_lines = True
        frame.f_trace = self._local_trace
        sys.settrace(_global_trace if previous is None else previous)

    def _loop_target(self, code, lines, loop):
        """(line to jump to or None, header line, where, why not) for leaving `loop`."""
        start, exit_offset, break_line = loop
        first = {}  # line -> the offset a jump to that line lands on (its first instruction)
        for o in sorted(lines):
            if lines[o] is not None:
                first.setdefault(lines[o], o)
        header_line = lines.get(start)
        # A `while` loop's first body instruction is the jump target; its header is the
        # condition's line before it (3.11: `while COND:` tests COND at the top and the bottom).
        before = max((o for o in lines if o < start), default=None)
        if before is not None and lines.get(before) is not None and lines[before] < (header_line or 0):
            header_line = lines[before] if self._is_while(code, before, exit_offset) else header_line
        body = [lines[o] for o in lines if start <= o < (exit_offset or start) and lines[o] is not None]
        exit_line = lines.get(exit_offset) if exit_offset is not None else None
        where = "%s:%s" % (os.path.basename(code.co_filename), header_line)
        runs = _line_runs(lines)
        # f_lineno lands on a line's first instruction: the exit's line must start at the exit
        # (3.13 numbers an inner loop's exit with the enclosing loop's header, whose first
        # instruction sets that loop up again), and hold no other stretch of code (_line_runs).
        if (exit_line is not None and body and not (min(body) <= exit_line <= max(body))
                and exit_line != header_line and first.get(exit_line) == exit_offset and runs.get(exit_line) == 1):
            return exit_line, header_line, where, None
        if break_line is not None:  # a `break` line's stretches are jumps: no stack of their own
            return break_line, header_line, where, None
        why = ("the line after it also holds other code" if exit_line is not None and runs.get(exit_line, 0) > 1
               else "no line after the loop and no break to jump to")
        return None, header_line, where, why

    @staticmethod
    def _is_while(code, offset, exit_offset):
        """The instruction at offset is a `while` condition's jump out of the loop."""
        for x in dis.get_instructions(code):
            if x.offset == offset:
                return "JUMP" in x.opname and x.argval == exit_offset
        return False

    def _local_trace(self, frame, event, arg):
        t = self._tracing
        if t is None or frame is not t[0]:
            return None
        if event == "line" and frame.f_lasti == t[1]:
            _, _, _, target, where, previous = t
            self._tracing = None
            try:
                with warnings.catch_warnings():
                    # 3.13 warns (on the job's stderr) when the jump leaves locals unbound.
                    warnings.simplefilter("ignore", RuntimeWarning)
                    frame.f_lineno = target  # only from inside a trace function of this frame
                self._fact("preflight.loop.%d" % self._loops_cut,
                           "cut: %s after %d updates" % (where, self._loop_updates))
            except Exception as exc:
                self._uncuttable.add((frame.f_code, t[1]))
                self._fact("preflight.loop.%d" % self._loops_cut,
                           "not cut: %s (%s); it ran to its end" % (where, exc))
            frame.f_trace = None
            sys.settrace(previous)
            self._loops_cut += 1
            self._loop_updates = 0
            return None
        if event == "return":
            # The loop ended on its own before coming back to its header.
            self._tracing = None
            sys.settrace(t[5])
            self._loop_updates = 0
            return None
        return self._local_trace

    # ------------------------------------------------------------------ saves and exports
    def _make_saver(self, original, what):
        pf = self

        def saver(*args, **kwargs):
            target = None
            if what == "torch.onnx.export":
                target = args[2] if len(args) > 2 else kwargs.get("f")
            else:
                target = args[1] if len(args) > 1 else kwargs.get("f")
            try:
                result = original(*args, **kwargs)
            except BaseException as exc:
                pf._guard(pf._note_save, what, target, "failed: %s: %s" % (type(exc).__name__, exc))
                raise
            pf._guard(pf._note_save, what, target, "ok")
            return result
        return saver

    def _note_save(self, what, target, outcome):
        if self._saves >= _MAX_SAVES:
            return
        if isinstance(target, (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(target))
            self._add_path(path, "write")  # C++ writers (torch's zip writer) raise no audit event
        else:
            path = "<%s>" % type(target).__name__
        phase = "training" if any(p.updates for p in self._stack) else ("evaluation" if self._stack else "between passes")
        self._fact("preflight.save.%d" % self._saves, "%s %s %s (%s)" % (what, path, outcome, phase))
        self._saves += 1

    # ------------------------------------------------------------------ paths and environment
    def _audit(self, event, args):
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            self._guard(self._note_path, path, "write" if write else "read")
        elif event in ("os.listdir", "os.scandir"):
            self._guard(self._note_path, args[0] if args else ".", "list")
        elif event == "os.mkdir":
            self._guard(self._note_path, args[0], "mkdir")
        elif event in ("os.remove", "os.rmdir"):
            self._guard(self._note_path, args[0], "remove")
        elif event == "os.rename":
            self._guard(self._note_path, args[1], "write")

    def _note_path(self, path, how):
        if path is None or isinstance(path, int) or _caller_is_import_or_hook(_frame_above(3)):
            return
        self._add_path(path, how)

    def _add_path(self, path, how):
        path = os.path.abspath(os.fsdecode(path))
        if _under(path, self._roots) or path.endswith((".py", ".pyc", ".so")):
            return
        key = (path, how)
        if key in self._paths or len(self._paths) >= _MAX_PATHS:
            return
        self._paths[key] = len(self._paths)
        self._fact("preflight.path.%d" % self._paths[key], "%s %s" % (how, path))

    def _patch_environ(self):
        cls = type(os.environ)
        original = cls.__getitem__
        pf = self

        def __getitem__(env, key):
            try:
                value = original(env, key)
            except KeyError:
                if env is os.environ:
                    pf._guard(pf._note_env, key, False)
                raise
            if env is os.environ:
                pf._guard(pf._note_env, key, True)
            return value
        __getitem__.__dlrr_original__ = original
        cls.__getitem__ = __getitem__

    def _note_env(self, key, present):
        """A variable read by the job's own code (not by a library, the standard library or
        dlrr itself), with the line that read it."""
        if key in self._env or len(self._env) >= _MAX_ENV:
            return
        frame = _frame_above(3)
        while frame is not None and frame.f_code.co_filename.endswith(_ENVIRON_FILES):
            frame = frame.f_back  # os.getenv, Mapping.get
        if frame is None or _library_file(frame.f_code.co_filename, self._roots):
            return
        if _caller_is_import_or_hook(frame):
            return
        self._env[key] = len(self._env)
        self._fact("preflight.env.%d" % self._env[key], "%s %s %s:%d" % (
            key, "set" if present else "unset", os.path.basename(frame.f_code.co_filename), frame.f_lineno))

    # ------------------------------------------------------------------ exit
    def at_exit(self):
        """Passes still open (a loop left with `break`, a crash) are reported as they stand."""
        if not self.active:
            return
        for p in list(self._stack):
            self._fold_peak()
            self._send_pass(p)
        self._stack.clear()
        self._passes.clear()
        for n, made in enumerate(m for m in self._made if not m[3]):
            self._fact("preflight.unused.%d" % n, "dataset=%s where=%s" % (made[1], made[2]))
        self._fact("preflight.peak_rss_kib", str(self._hwm_kib()))
        if self._cpu_mode is not None:
            self._fact("preflight.cuda_rewrites", str(self.cuda_rewrites))


def _global_trace(frame, event, arg):
    """Tracing must be on for a frame's f_trace to run; new frames are not traced."""
    return None
