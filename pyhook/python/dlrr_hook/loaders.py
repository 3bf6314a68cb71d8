"""DataLoader capture: which loader, which iteration, which batch, which samples.

Patch points (torch.utils.data.dataloader; the same names exist from 1.x to 2.x):
  DataLoader.__init__                      a loader exists (see StepTracker, step 0)
  DataLoader.__iter__                      a new iteration (epoch) of that loader begins
  _BaseDataLoaderIter.__next__             a batch reaches the loop (after collation,
                                           workers and pinning) or the iteration ends
  _BaseDataLoaderIter._next_index          the sampler's indices of the batch fetched next
  _MultiProcessingDataLoaderIter._try_put_index
                                           ...and the task number they were sent under
  torch.utils.data._utils.worker._worker_loop
                                           a worker starts: the hook turns itself off there
                                           (forked workers are also off by os.register_at_fork;
                                           this catches spawn/forkserver workers, which run
                                           sitecustomize afresh)

With workers, indices are fetched ahead (prefetch) and batches may arrive out of order, so
indices are kept per task number (_send_idx at the time they are sent) and matched to the
task whose entry leaves _task_info when __next__ returns its batch.  Without workers the
batch returned is the one whose indices were fetched last.

Loader numbers are given in the order of first iteration; batch indices count a loader's
batches across iterations.  Everything here is bookkeeping on the iterator object; what to
do with a batch is the `deliver` callback's business (record now, serve in replay later).
"""

import array
import ctypes
import operator
import weakref

from .modules import in_fetch

_NOTHING = object()


class LoaderState:
    """One DataLoader: its number, how many iterations it began, how many batches it gave."""

    __slots__ = ("number", "iterations", "batches", "__weakref__")

    def __init__(self, number):
        self.number = number
        self.iterations = 0
        self.batches = 0


class Iteration:
    """One iteration (one iterator pass) of a loader."""

    __slots__ = ("loader", "number", "count", "ended")

    def __init__(self, loader, number):
        self.loader = loader
        self.number = number
        self.count = 0
        self.ended = False


class BatchInfo:
    __slots__ = ("loader", "iteration", "index", "indices", "map_style")

    def __init__(self, loader, iteration, index, indices, map_style=False):
        self.loader = loader
        self.iteration = iteration
        self.index = index
        self.indices = indices
        # A map-style dataset's batch: a function of the dataset, its sample indices and the
        # recorded RNG, so a bounded trace records it by reference (docs/recording.md).
        self.map_style = map_style


def map_style(iterator):
    """The iterator draws from a map-style dataset (_DatasetKind.Map), not an IterableDataset."""
    kind = iterator.__dict__.get("_dataset_kind")
    return kind == 0


def indices_pointer(index):
    """The sample indices of a batch for dlrr_batch_begin: (c_int64 array or None, count).

    A batch sampler yields a list of ints (or numpy ints, or a tensor); batch_size=None
    yields one int; IterableDatasets yield None.  Anything that is not a flat sequence of
    integers within int64 is not recorded (count 0).  The values go into an array.array that
    the c_int64 array views: a ctypes array filled element by element cost 13.5 us median per
    delivery in the cnn job, this about half of that.
    """
    if index is None or index is _NOTHING:
        return None, 0
    try:
        seq = [index] if isinstance(index, int) else list(index)
        try:
            values = array.array("q", seq)
        except TypeError:  # numpy ints, 0-d integer tensors
            values = array.array("q", [operator.index(i) for i in seq])
    except (TypeError, ValueError, OverflowError):
        return None, 0
    if not values:
        return None, 0
    return (ctypes.c_int64 * len(values)).from_buffer(values), len(values)


class LoaderTracker:
    """Numbers loaders and their batches; calls deliver/end/created callbacks.

    deliver(info: BatchInfo, data), end(loader: LoaderState, iteration: Iteration) and
    created() are called from inside the patched methods; the caller guards them.
    """

    def __init__(self, recorder, deliver, end, created):
        self._rec = recorder
        self._deliver = deliver
        self._end = end
        self._created = created
        self._loaders = weakref.WeakKeyDictionary()
        self._next_number = 0

    # -- state
    def loader_state(self, key):
        state = self._loaders.get(key)
        if state is None:
            state = self._loaders[key] = LoaderState(self._next_number)
            self._next_number += 1
        return state

    def begin_iteration(self, loader, iterator):
        state = self.loader_state(loader)
        iteration = Iteration(state, state.iterations)
        state.iterations += 1
        iterator._dlrr_iteration = iteration
        return iteration

    def iteration_of(self, iterator):
        iteration = getattr(iterator, "_dlrr_iteration", None)
        if iteration is None:
            # An iterator made without DataLoader.__iter__ (a subclass that builds its own):
            # it counts as a loader of its own.
            iteration = self.begin_iteration(iterator, iterator)
        return iteration

    # -- events (called by the patches)
    def before_next(self, iterator):
        """Task numbers in flight before __next__ runs (None without workers)."""
        task_info = getattr(iterator, "_task_info", None)
        if task_info is None:
            return None
        return list(task_info)

    def after_next(self, iterator, data, in_flight):
        iteration = getattr(iterator, "_dlrr_iteration", None)  # iteration_of, a frame saved
        if iteration is None:
            iteration = self.iteration_of(iterator)
        loader = iteration.loader
        info = BatchInfo(loader.number, iteration.number, loader.batches,
                         self._indices_of(iterator, in_flight), map_style(iterator))
        loader.batches += 1
        iteration.count += 1
        self._deliver(info, data)

    def stopped(self, iterator):
        iteration = self.iteration_of(iterator)
        if iteration.ended:
            return
        iteration.ended = True
        self._end(iteration.loader, iteration)

    def _indices_of(self, iterator, in_flight):
        attrs = iterator.__dict__
        task_info = attrs.get("_task_info")
        if in_flight is None or task_info is None:
            return attrs.get("_dlrr_index")
        pending = attrs.get("_dlrr_pending")
        if not pending:
            return None
        done = [task for task in in_flight if task not in task_info]
        if not done:
            return None
        # In order, tasks skipped (exhausted IterableDataset workers) precede the one
        # returned, so the returned one is the highest; out of order only one leaves.
        index = pending.pop(max(done), None)
        for task in done:
            pending.pop(task, None)
        return index

    # -- patches
    def install(self, patcher, dataloader_module, worker_module=None):
        rec = self._rec
        tracker = self
        DataLoader = dataloader_module.DataLoader
        BaseIter = dataloader_module._BaseDataLoaderIter
        MultiIter = getattr(dataloader_module, "_MultiProcessingDataLoaderIter", None)

        def wrap_init(original):
            def __init__(self, *args, **kwargs):
                original(self, *args, **kwargs)
                if rec.active:
                    rec.guarded(tracker._created)
            return __init__

        # Entropy a worker loader's machinery draws in this process (its queues' semaphore names,
        # the connection challenges that bring tensors from workers) is marked: replay serves the
        # batches without it (dlrr_entropy_loader_scope; format/EntropyFlags.h).
        scope = getattr(rec.lib, "dlrr_entropy_loader_scope", None)

        def wrap_iter(original):
            def __iter__(self):
                if scope is not None and rec.active and getattr(self, "num_workers", 0) > 0:
                    scope(1)
                    try:
                        iterator = original(self)
                    finally:
                        scope(0)
                else:
                    iterator = original(self)
                if rec.active:
                    rec.guarded(tracker.begin_iteration, self, iterator)
                return iterator
            return __iter__

        before_next = tracker.before_next
        after_next = tracker.after_next
        internal_error = rec.internal_error

        def wrap_next(original):
            # rec.guarded(before_next, ...) and rec.guarded(after_next, ...), their try inlined:
            # a batch delivery, at every step, saves two frames.
            def __next__(self):
                if not rec.active:
                    return original(self)
                try:
                    in_flight = before_next(self)
                except Exception as exc:
                    internal_error(exc)
                    in_flight = None
                workers = scope is not None and self.__dict__.get("_num_workers", 0) > 0
                try:
                    if workers:
                        scope(1)
                    try:
                        with in_fetch():  # transforms/collate run here: not the step's compute
                            data = original(self)
                    finally:
                        if workers:
                            scope(0)
                except StopIteration:
                    if rec.active:
                        rec.guarded(tracker.stopped, self)
                    raise
                if rec.active:
                    try:
                        after_next(self, data, in_flight)
                    except Exception as exc:
                        internal_error(exc)
                return data
            return __next__

        def wrap_next_index(original):
            def _next_index(self):
                index = original(self)
                self._dlrr_index = index
                if rec.active and self.__dict__.get("_num_workers") == 0:  # loads in this process
                    rec.guarded(rec.before_fetch, self)
                return index
            return _next_index

        def wrap_try_put_index(original):
            def _try_put_index(self):
                if not rec.active:
                    return original(self)
                task = getattr(self, "_send_idx", None)
                self._dlrr_index = _NOTHING
                original(self)
                if task is not None and getattr(self, "_send_idx", None) != task:
                    pending = self.__dict__.get("_dlrr_pending")
                    if pending is None:
                        pending = self._dlrr_pending = {}
                    pending[task] = self._dlrr_index
            return _try_put_index

        def wrap_worker_loop(original):
            def _worker_loop(*args, **kwargs):
                rec.disable_in_child()
                return original(*args, **kwargs)
            return _worker_loop

        if worker_module is not None and hasattr(worker_module, "_worker_loop"):
            patcher.wrap(worker_module, "_worker_loop", wrap_worker_loop)
        patcher.wrap(DataLoader, "__init__", wrap_init)
        patcher.wrap(DataLoader, "__iter__", wrap_iter)
        patcher.wrap(BaseIter, "__next__", wrap_next)
        patcher.wrap(BaseIter, "_next_index", wrap_next_index)
        if MultiIter is not None and hasattr(MultiIter, "_try_put_index"):
            patcher.wrap(MultiIter, "_try_put_index", wrap_try_put_index)
