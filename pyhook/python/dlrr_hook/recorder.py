"""Record mode: the strategy that writes what the session core (session.py) sees to the trace."""

import importlib
import os

from . import native
from .files import FileCapture
from .loaders import indices_pointer
from .session import Strategy
from .snapshots import SnapshotTaker

# Part of the note _note_plain writes; tools/dlreplay/main.cc (kPlainBatchNote) looks for it.
PLAIN_NOTE = b"dlrr does not record the container's own type"


class RecordStrategy(Strategy):
    """The hook in record mode (dlrr_mode() == 1): writes what the session core sees."""

    _LOAD_PROBES = 2  # batches of a loader looked at: augmentation draws at every one

    def __init__(self, session):
        super().__init__(session)
        # dlrecord --window K: batches of map-style datasets by reference, bytes of the last K
        # steps held in memory (docs/recording.md, "Batches by reference").
        try:
            self.window = max(0, int(os.environ.get("DLRR_WINDOW", "0") or 0))
        except ValueError:
            self.window = 0
        self._by_value_said = set()
        self._term_flush = None  # TermFlush (with a window), False: not here
        self._delivering = False  # a step ending now is durable at the delivery's end (on_batch)
        self._opaque_noted = False  # a batch holding an unrecordable value was noted (_note_opaque)
        self._plain_noted = False  # a batch container recorded as its plain base was noted (_note_plain)
        self._load_probes = {}  # loader number -> in-process loads looked at (_probe_load_draws)
        self._pre_fetch = None  # (loader number, generator states) before an in-process load

    def after_torch(self, torch):
        """What the main process reads (files.py), and the snapshots of what trains; not in a
        child the library no longer records (torch imported after a fork turned it off)."""
        if self.lib.dlrr_mode() != native.MODE_RECORD:
            return
        s = self.session
        FileCapture(s, self.lib).install(s.patcher, importlib.import_module("torch.utils.data.dataloader"))
        s.snapshots = SnapshotTaker(self.lib, s.values, s.registry, self.window)

    def dist_replay_mode(self):
        """None: record (the replay strategy says how it replays collectives)."""
        return None

    def note_unverified(self, key, note):
        """What is not verified, said in the trace (runtime fact `key`, recorder notes); replay
        says it in its report instead (ReplayStrategy.note_unverified)."""
        text = native.text(note)
        self.lib.dlrr_runtime_info(native.text(key), text)
        self.lib.dlrr_recorder_status(1, text)

    def before_fetch(self, iterator):
        """Takes the generators' states before an in-process load, for _probe_load_draws."""
        iteration = iterator.__dict__.get("_dlrr_iteration")
        if iteration is None:
            return
        if self._load_probes.get(iteration.loader.number, 0) < self._LOAD_PROBES:
            self._pre_fetch = (iteration.loader.number, self._rng_bytes())
        else:
            self._pre_fetch = None

    def _rng_bytes(self):
        return [p if isinstance(p, bytes) else p.numpy().tobytes() for _, _, p in self.session.rng.snapshot()]

    def _probe_load_draws(self, loader):
        """Says in the trace (runtime fact rng.loader.N.draws_while_loading) that loader N's Dataset
        or collate_fn drew random numbers as it loaded in this process: replay serves the batch
        and draws nothing there, so its states differ before they are restored at the delivery,
        and that is not the job drawing differently (ReplayStrategy._restore_rng)."""
        pre, self._pre_fetch = self._pre_fetch, None
        if pre is None or pre[0] != loader:
            return
        probes = self._load_probes
        if self._rng_bytes() != pre[1]:
            probes[loader] = self._LOAD_PROBES  # known: no more probes
            self.lib.dlrr_runtime_info(native.text("rng.loader.%d.draws_while_loading" % loader), b"1")
        else:
            probes[loader] = probes.get(loader, 0) + 1

    def on_batch(self, info, data):
        s = self.session
        s.modules.reset_stack()
        if self._pre_fetch is not None:
            s.guarded(self._probe_load_draws, info.loader)
        s.send_runtime_info()
        # A step that ends here is written by the library's writer thread while this delivery
        # records the next step's RNG states and batch; dlrr_batch_end returns once it is
        # durable, before the batch reaches the job: the commit point of the step is the end
        # of the delivery.
        self._delivering = True
        try:
            try:
                training = self.steps.on_batch(info.loader, info.index, info.iteration,
                                               s.torch.is_grad_enabled())
            finally:
                self._delivering = False
            s.rng.write_snapshot()
            indices, count = indices_pointer(info.indices)
            self.lib.dlrr_batch_begin(info.loader, info.iteration, info.index, 1 if training else 0,
                                      indices, count)
            if self.window:
                if self._term_flush is None:
                    self._start_term_flush()
                self._by_reference(info, count)
            s.values.first_opaque = s.values.first_plain = None
            try:
                s.values.write(data)
            finally:
                self.lib.dlrr_batch_end()
            if s.values.first_opaque is not None and not self._opaque_noted:
                self._note_opaque(info, s.values.first_opaque)
            if s.values.first_plain is not None and not self._plain_noted:
                self._note_plain(info, s.values.first_plain)
        except BaseException:
            self.lib.dlrr_step_wait_durable()  # the batch never ended: durable all the same
            raise

    def _note_opaque(self, info, type_name):
        """Says once, in the trace (recorder notes: dltrace info, dlrecord's summary), that a
        batch holds a value dlrr cannot record: replay will refuse that batch."""
        self._opaque_noted = True
        self.lib.dlrr_recorder_status(1, b"batch %d of loader %d holds a value dlrr did not record (%s): replay "
                                      b"cannot serve it from the trace" % (info.index, info.loader,
                                                                           native.text(type_name)))

    def _note_plain(self, info, what):
        """Says once that a batch container is recorded as its plain base type (a namedtuple as
        a tuple): replay serves the base, so a job that uses the container's own type (fields by
        name) cannot be replayed from this trace. dlreplay reads this note (PLAIN_NOTE)."""
        self._plain_noted = True
        self.lib.dlrr_recorder_status(1, b"batch %d of loader %d holds %s; %s: replay serves that plain type" % (
            info.index, info.loader, native.text(what), PLAIN_NOTE))

    def commit_step(self, step, loss):
        if self._delivering:  # a batch delivery: durable at its dlrr_batch_end (on_batch)
            self.lib.dlrr_step_end_deferred(step, loss)
        else:
            self.lib.dlrr_step_end(step, loss)

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
        self.note_unverified("batches.by_value", "loader %d: batches kept by value in the bounded trace: %s"
                             % (info.loader, why))

    def native_digest(self):
        """What the native module hooks need to do _on_output's host path themselves (one dense
        contiguous CPU tensor: the call count, dlrr_digest through its address, the failure
        snapshot at a non-finite value), or None: every output through _on_output."""
        s = self.session
        address = native.address_of(self.lib.dlrr_digest)
        if address is None:
            return None
        # The failure ring without a copy of each output (FailureRing.h: borrowed entries);
        # DLRR_RING_COPY=1 copies them as before (the benches' A/B in one build).
        borrow = 0 if os.environ.get("DLRR_RING_COPY") == "1" else \
            native.address_of(getattr(self.lib, "dlrr_digest_borrowed", None)) or 0
        return {"address": address, "borrow_address": borrow, "keep": s.keep_outputs, "calls": s.module_calls,
                "dtypes": s.marshal.dtypes, "failure_snapshot": s.failure_snapshot}

    def snapshot_rng(self, step=None):
        """RNG states that will belong to optimizer-driven step `step` (see StepTracker)."""
        return self.session.rng.step_snapshot()

    def write_step_rng(self, rng):
        self.session.rng.write_step(rng)

    def digest(self, kind, path, call_index, output, tensor, keep):
        """dlrr_digest of one tensor; returns the host tensor digested (None: skipped or on a GPU)."""
        s = self.session
        g = s.gpu
        if g is not None and g.applies(tensor) and s.capture_level < native.CAPTURE_FULL:
            if kind == native.DIGEST_LOSS and output == 0:
                unscaled = s.training.unscaled_loss(tensor)  # a GradScaler's: the job's loss
                g.note_loss(tensor if unscaled is None else unscaled)
            g.digest(kind, path, call_index, output, tensor, keep)
            return None
        p = s.marshal.prepare(tensor)
        if p is None:
            return None
        s.digest_prepared(kind, path, call_index, output, p, keep)
        out = s.last_digest
        if (out.nan_count or out.inf_count) and kind in (native.DIGEST_MODULE_OUTPUT, native.DIGEST_LOSS):
            s.failure_snapshot()
        return p[0]
