"""Record mode: the session core (session.py) with the record strategy: what the job does
is written to the trace."""

from . import native
from .loaders import indices_pointer
from .session import Session


class Recorder(Session):
    """The hook in record mode (dlrr_mode() == 1): writes what the session core sees."""

    def dist_replay_mode(self):
        """None: record (the Replayer says how it replays collectives)."""
        return None

    def _note_unverified(self, key, note):
        """What is not verified, said in the trace (runtime fact `key`, recorder notes); replay
        says it in its report instead (Replayer._note_unverified)."""
        text = native.text(note)
        self.lib.dlrr_runtime_info(native.text(key), text)
        self.lib.dlrr_recorder_status(1, text)

    _LOAD_PROBES = 2  # batches of a loader looked at: augmentation draws at every one

    def before_fetch(self, iterator):
        """Takes the generators' states before an in-process load, for _probe_load_draws."""
        iteration = iterator.__dict__.get("_dlrr_iteration")
        if iteration is None:
            return
        probes = self.__dict__.setdefault("_load_probes", {})
        if probes.get(iteration.loader.number, 0) < self._LOAD_PROBES:
            self._pre_fetch = (iteration.loader.number, self._rng_bytes())
        else:
            self._pre_fetch = None

    def _rng_bytes(self):
        return [p if isinstance(p, bytes) else p.numpy().tobytes() for _, _, p in self.rng.snapshot()]

    def _probe_load_draws(self, loader):
        """Says in the trace (runtime fact rng.loader.N.draws_while_loading) that loader N's Dataset
        or collate_fn drew random numbers as it loaded in this process: replay serves the batch
        and draws nothing there, so its states differ before they are restored at the delivery,
        and that is not the job drawing differently (Replayer._restore_rng)."""
        pre, self._pre_fetch = self.__dict__.get("_pre_fetch"), None
        if pre is None or pre[0] != loader:
            return
        probes = self._load_probes
        if self._rng_bytes() != pre[1]:
            probes[loader] = self._LOAD_PROBES  # known: no more probes
            self.lib.dlrr_runtime_info(native.text("rng.loader.%d.draws_while_loading" % loader), b"1")
        else:
            probes[loader] = probes.get(loader, 0) + 1

    def _on_batch(self, info, data):
        self.modules.reset_stack()
        if self.__dict__.get("_pre_fetch") is not None:
            self.guarded(self._probe_load_draws, info.loader)
        if not self._runtime_sent:
            self._send_runtime_info()
        # A step that ends here is written by the library's writer thread while this delivery
        # records the next step's RNG states and batch; dlrr_batch_end returns once it is
        # durable, before the batch reaches the job: the commit point of the step is the end
        # of the delivery.
        self._step_end_deferred = True
        try:
            try:
                training = self.steps.on_batch(info.loader, info.index, info.iteration,
                                               self.torch.is_grad_enabled())
            finally:
                self._step_end_deferred = False
            self.rng.write_snapshot()
            indices, count = indices_pointer(info.indices)
            self.lib.dlrr_batch_begin(info.loader, info.iteration, info.index, 1 if training else 0,
                                      indices, count)
            if self.window:
                if self._term_flush is None:
                    self._start_term_flush()
                self._by_reference(info, count)
            try:
                self.values.write(data)
            finally:
                self.lib.dlrr_batch_end()
        except BaseException:
            self.lib.dlrr_step_wait_durable()  # the batch never ended: durable all the same
            raise

    def _start_term_flush(self):
        """SIGTERM writes the window (term_flush.py); a distributed rank's hang watch does it there."""
        from .term_flush import TermFlush, distributed
        self._term_flush = False
        if not distributed():
            self._term_flush = TermFlush(self.lib)
            self._term_flush.start()

    def _by_reference(self, info, count):
        """A bounded trace (dlrecord --window): a map-style dataset's batch whose sample indices
        are known is recorded by reference; any other keeps its bytes, and says why once."""
        if info.map_style and count:
            self.lib.dlrr_batch_by_reference()
            return
        if info.loader in self._by_value_said:
            return
        self._by_value_said.add(info.loader)
        why = ("an IterableDataset (its batches cannot be re-made from sample indices)" if not info.map_style
               else "no sample indices (a batch sampler that yields something else)")
        self._note_unverified("batches.by_value", "loader %d: batches kept by value in the bounded trace: %s"
                              % (info.loader, why))

    def native_digest(self):
        """What the native module hooks need to do _on_output's host path themselves (one dense
        contiguous CPU tensor: the call count, dlrr_digest through its address, the failure
        snapshot at a non-finite value), or None: every output through _on_output."""
        address = native.address_of(self._digest_fn)
        if address is None:
            return None
        return {"address": address, "keep": self._keep_outputs, "calls": self._module_calls,
                "dtypes": self.marshal.dtypes, "failure_snapshot": self._failure_snapshot}

    def snapshot_rng(self, step=None):
        """RNG states that will belong to optimizer-driven step `step` (see StepTracker)."""
        return self.rng.snapshot()

    def _digest(self, kind, path, call_index, output, tensor, keep):
        """dlrr_digest of one tensor; returns the host tensor digested (None: skipped or on a GPU)."""
        g = self.gpu
        if g is not None and g.applies(tensor) and self.capture_level < native.CAPTURE_FULL:
            if kind == native.DIGEST_LOSS and output == 0:
                g.note_loss(tensor)
            g.digest(kind, path, call_index, output, tensor, keep)
            return None
        p = self._prepare(tensor)
        if p is None:
            return None
        self._digest_fn(kind, path, call_index, output, p[1], p[3], p[4], p[5], p[6], keep,
                        self._digest_ref)
        out = self._digest_out
        if (out.nan_count or out.inf_count) and kind in (native.DIGEST_MODULE_OUTPUT, native.DIGEST_LOSS):
            self._failure_snapshot()
        return p[0]
