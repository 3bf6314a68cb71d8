// The C API of dlrr.h: thin, exception-proof forwarding to the process's session. The calls
// that recording and replay both make go to one ProcessSession (withSession); the recording
// half of dlrr.h (batch values, RNG states, triage facts) goes to the recorder only
// (withRecorder), the replay half (dlrr_replay_*) to the replayer only (withReplayer).
#include <fcntl.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

#include "dlrr/dlrr.h"
#include "interpose/ActiveSession.h"
#include "interpose/CEnums.h"
#include "interpose/ErrorBoundary.h"
#include "interpose/ReentryGuard.h"
#include "interpose/SignalHandlers.h"

using namespace dlrr;

namespace {

// Runs fn against the session when recording or replaying this process, behind the error
// boundary (ErrorBoundary.h; `where`: the C API call). Returns whether there was a session.
template <typename Fn>
bool withSession(Fn&& fn, const char* where = __builtin_FUNCTION()) noexcept {
  ProcessSession* s = processSession();
  if (!s || !s->active()) return false;
  ReentryGuard g;
  guarded(where, [&] { fn(*s); });
  return true;
}

// Runs fn against the recorder when recording, behind the error boundary.
template <typename Fn>
void withRecorder(Fn&& fn, const char* where = __builtin_FUNCTION()) noexcept {
  RecordSession* s = processRecorder();
  if (!s || !s->active()) return;
  ReentryGuard g;
  guarded(where, [&] { fn(*s); });
}

thread_local std::string tStatus;

// Runs fn against the replayer when this process is being replayed, behind the error boundary.
template <typename Fn>
bool withReplayer(Fn&& fn, const char* where = __builtin_FUNCTION()) noexcept {
  ReplaySession* r = processReplayer();
  if (!r) return false;
  ReentryGuard g;
  guarded(where, [&] { fn(*r); });
  return true;
}

// In replay, a batch the job's pipeline re-made is digested as it is walked (dlrr_val_*).
template <typename Fn>
void remade(Fn&& fn) noexcept {
  withReplayer([&](ReplaySession& r) {
    if (BatchDigest* d = r.remadeDigest()) fn(d);
  });
}

// Bulk answers (batches, snapshots, RNG states, kept tensors) live in a buffer of the calling
// thread, one per function, until that thread's next call of it (dlrr.h): nothing served is
// kept longer, so replay memory stays bounded. Fn fills the buffer and says whether it did.
template <typename Fn>
int exportBytes(std::vector<uint8_t>& buf, const uint8_t** data, uint64_t* n, Fn&& fill) {
  std::vector<uint8_t>().swap(buf);  // the previous answer's memory goes now, not at the next fill
  if (!fill(buf)) return 0;
  if (data) *data = buf.data();
  if (n) *n = buf.size();
  return 1;
}

}  // namespace

extern "C" {

int dlrr_mode(void) {
  ProcessSession* s = processSession();
  return s && s->active() ? static_cast<int>(s->mode()) : DLRR_MODE_OFF;
}

const char* dlrr_status(void) {
  RecordSession* s = processRecorder();
  if (!s) return "dlrr is not recording this process (not started by dlrecord)";
  try {
    tStatus = s->status();
    if (uint64_t n = swallowedCount())
      tStatus += (tStatus.empty() ? "" : "; ") + std::to_string(n) +
                 " internal error(s) stopped at dlrr's edge, the first: " + firstSwallowed();
  } catch (...) {
    DLRR_SWALLOWED();
    tStatus = "status unavailable";
  }
  return tStatus.c_str();
}

const char* dlrr_trace_dir(void) {
  RecordSession* s = processRecorder();
  return s ? s->config().traceDir.c_str() : "";
}

int dlrr_capture_level(void) {
  ProcessSession* s = processSession();
  return s ? s->captureLevel() : 0;
}

int dlrr_pystack_fd(void) {
  RecordSession* s = processRecorder();
  return s && s->active() ? s->pystackFd() : -1;
}

int dlrr_fatal_signals_first(int first) { return takeFatalSignalsFirst(first != 0); }

void dlrr_runtime_info(const char* key, const char* value) {
  withRecorder([&](RecordSession& s) { s.runtimeInfo(key, value); });
}

void dlrr_note(const char* text) {
  withRecorder([&](RecordSession& s) { s.note(text); });
}

void dlrr_recorder_status(int ok, const char* message) {
  withRecorder([&](RecordSession& s) { s.recorderStatus(ok != 0, message); });
}

void dlrr_step_begin(int64_t step, uint32_t loader, uint64_t batch_index, int64_t epoch, int by_optimizer) {
  // An unknown rule (a newer hook) is recorded as a DataLoader step rather than misnamed.
  StepRule rule =
      by_optimizer >= 0 && by_optimizer <= kMaxStepRule ? static_cast<StepRule>(by_optimizer) : StepRule::Batch;
  withSession([&](ProcessSession& s) { s.stepBegin(step, loader, batch_index, epoch, rule); });
}

void dlrr_step_untrained(int64_t step) {
  withRecorder([&](RecordSession& s) { s.stepUntrained(step); });
}

void dlrr_step_end(int64_t step, double loss) {
  withSession([&](ProcessSession& s) { s.stepEnd(step, loss); });
}

void dlrr_step_end_deferred(int64_t step, double loss) {
  RecordSession* r = processRecorder();
  if (r && r->active())
    withRecorder([&](RecordSession& s) { s.stepEnd(step, loss, false); });
  else
    dlrr_step_end(step, loss);
}

void dlrr_step_wait_durable(void) {
  withRecorder([&](RecordSession& s) { s.waitStepDurable(); });
}

int64_t dlrr_current_step(void) {
  ProcessSession* s = processSession();
  return s ? s->currentStep() : -1;
}

void dlrr_rng_state(int kind, int device, const void* data, uint64_t n) {
  if (kind < 0 || kind > kMaxRngKind) return;
  withRecorder([&](RecordSession& s) { s.rngState(kind, device, data, n); });
}

void dlrr_rng_state_at_fork(int kind, int device, const void* data, uint64_t n) {
  if (kind < 0 || kind > kMaxRngKind) return;
  withRecorder([&](RecordSession& s) { s.rngState(kind, device, data, n, true); });
}

namespace {

void rngStates(uint32_t n, const dlrr_rng_item_t* items, bool wake, const char* where) {
  if (!items) return;
  withRecorder(
      [&](RecordSession& s) {
        for (uint32_t i = 0; i < n; ++i) {
          const dlrr_rng_item_t& it = items[i];
          if (it.kind >= 0 && it.kind <= kMaxRngKind) s.rngState(it.kind, it.device, it.data, it.n, false, false);
        }
        if (wake) s.wakeWriter();  // once for all the states
      },
      where);
}

}  // namespace

void dlrr_rng_states(uint32_t n, const dlrr_rng_item_t* items) { rngStates(n, items, true, "dlrr_rng_states"); }

void dlrr_rng_states_queued(uint32_t n, const dlrr_rng_item_t* items) {
  rngStates(n, items, false, "dlrr_rng_states_queued");
}

void dlrr_batch_begin(uint32_t loader, uint32_t iteration, uint64_t index, int is_training,
                      const int64_t* sample_indices, uint64_t n_indices) {
  withRecorder(
      [&](RecordSession& s) { s.batchBegin(loader, iteration, index, is_training != 0, sample_indices, n_indices); });
}

void dlrr_batch_by_reference(void) {
  withRecorder([&](RecordSession& s) { s.batchByReference(); });
}

void dlrr_val_list(uint32_t n) {
  remade([&](BatchDigest* d) { d->container('l', n); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().list(n); });
}
void dlrr_val_tuple(uint32_t n) {
  remade([&](BatchDigest* d) { d->container('t', n); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().tuple(n); });
}
void dlrr_val_dict(uint32_t n) {
  remade([&](BatchDigest* d) { d->container('d', n); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().dict(n); });
}
void dlrr_val_key(const char* key) {
  remade([&](BatchDigest* d) { d->key(key ? key : ""); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().key(key); });
}
void dlrr_val_none(void) {
  remade([&](BatchDigest* d) { d->none(); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().none(); });
}
void dlrr_val_bool(int v) {
  remade([&](BatchDigest* d) { d->boolean(v != 0); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().boolean(v != 0); });
}
void dlrr_val_int(int64_t v) {
  remade([&](BatchDigest* d) { d->integer(v); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().integer(v); });
}
void dlrr_val_float(double v) {
  remade([&](BatchDigest* d) { d->real(v); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().real(v); });
}
void dlrr_val_str(const char* str, uint64_t n) {
  remade([&](BatchDigest* d) { d->text(std::string_view(str ? str : "", str ? n : 0)); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().text(str, n); });
}
void dlrr_val_bytes(const void* p, uint64_t n) {
  remade([&](BatchDigest* d) { d->bytes(p, p ? n : 0); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().bytes(p, n); });
}
void dlrr_val_opaque(const char* type_name) {
  remade([&](BatchDigest* d) { d->opaque(type_name ? type_name : "?"); });
  withRecorder([&](RecordSession& s) { s.batchBuilder().opaque(type_name); });
}
void dlrr_val_tensor(const char* dtype, uint32_t elem_size, int ndim, const int64_t* shape, const void* data,
                     uint64_t nbytes, const char* device, int requires_grad) {
  if (ndim < 0 || ndim > 64) return;
  remade([&](BatchDigest* d) { d->tensor(dtype ? dtype : "?", ndim, shape, data, data ? nbytes : 0); });
  withRecorder([&](RecordSession& s) {
    s.batchTensor(dtype, elem_size, ndim, shape, data, nbytes, device, requires_grad != 0);
  });
}
void dlrr_batch_end(void) {
  withRecorder([&](RecordSession& s) { s.batchEnd(); });
}
void dlrr_snapshot_begin(int64_t step, int failure) {
  // 2: a snapshot held with the batch window (docs/recording.md, "Batches by reference").
  withRecorder([&](RecordSession& s) { s.snapshotBegin(step, failure == 1, failure == 2); });
}
void dlrr_snapshot_end(void) {
  withRecorder([&](RecordSession& s) { s.batchEnd(); });
}
void dlrr_loader_end(uint32_t loader, uint32_t iteration, uint64_t batches) {
  withRecorder([&](RecordSession& s) { s.loaderEnd(loader, iteration, batches); });
}

int dlrr_digest(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype, int ndim,
                const int64_t* shape, const void* data, uint64_t nbytes, int keep, dlrr_digest_t* out) {
  if (kind < 0 || kind > kMaxDigestKind || ndim < 0 || ndim > kMaxTensorDims) return -1;
  int rc = -1;
  auto fill = [&](const DigestResult& r) {
    if (!out) return;
    out->hash = r.hash;
    out->nan_count = r.nanCount;
    out->inf_count = r.infCount;
    out->min = r.min;
    out->max = r.max;
  };
  withSession([&](ProcessSession& s) {
    DigestResult r;
    rc = s.digest(kind, path, call_index, output, dtype, ndim, shape, data, nbytes, keep != 0, r);
    fill(r);
  });
  return rc;
}

int dlrr_digest_borrowed(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype, int ndim,
                         const int64_t* shape, const void* data, uint64_t nbytes, dlrr_digest_t* out, int64_t* lease) {
  int64_t step = -1, borrowed = -1, floor = INT64_MAX;  // not recorded: nothing to hold
  int rc = -1;
  if (kind >= 0 && kind <= kMaxDigestKind && ndim >= 0 && ndim <= kMaxTensorDims) {
    withSession([&](ProcessSession& s) {
      DigestResult r;
      rc = s.digestBorrowed(kind, path, call_index, output, dtype, ndim, shape, data, nbytes, r, borrowed, floor);
      step = borrowed >= 0 ? borrowed : s.currentStep();
      if (out) {
        out->hash = r.hash;
        out->nan_count = r.nanCount;
        out->inf_count = r.infCount;
        out->min = r.min;
        out->max = r.max;
      }
    });
  }
  if (lease) {
    lease[0] = step;
    lease[1] = borrowed >= 0 ? 1 : 0;
    lease[2] = floor;
  }
  return rc;
}

int dlrr_digest_many(int kind, uint32_t n, const dlrr_digest_item_t* items) {
  if (!items && n) return -1;
  int differ = 0, rc = -1;
  for (uint32_t i = 0; i < n; ++i) {
    const dlrr_digest_item_t& it = items[i];
    int r = dlrr_digest(kind, it.path, it.call_index, it.output, it.dtype, it.ndim, it.shape, it.data, it.nbytes,
                        it.keep, nullptr);
    if (r == 1) ++differ;
    if (r >= 0) rc = 0;
  }
  return rc < 0 && n ? -1 : differ;
}

int dlrr_first_failure_step(int64_t* step) {
  RecordSession* s = processRecorder();
  int64_t st = -1;
  if (!s || !s->firstFailureStep(st)) return 0;
  if (step) *step = st;
  return 1;
}

void dlrr_failure_exception(const char* type, const char* message, const char* where, int n_frames,
                            const char* const* files, const int32_t* lines, const char* const* functions,
                            const char* const* code) {
  if (n_frames < 0 || n_frames > 10000) n_frames = 0;
  withSession(
      [&](ProcessSession& s) { s.failureException(type, message, where, n_frames, files, lines, functions, code); });
}

void dlrr_failed_path(const char* path, int error, int op) {
  if (!path || op < DLRR_LOOKUP_OPEN || op > DLRR_LOOKUP_OTHER) return;
  // The lookup is the job's, reported by the hook: not under the hook's reentry guard.
  RecordSession* s = processRecorder();
  if (s && s->active()) s->failedLookup(AT_FDCWD, path, error, static_cast<LookupOp>(op));
}

void dlrr_library_load_error(const char* name, const char* error) {
  RecordSession* s = processRecorder();
  if (s && s->active()) s->libraryLoadError(name, error);
}

void dlrr_gpu_memory(int device, uint64_t max_allocated, uint64_t max_reserved, uint64_t total) {
  withRecorder([&](RecordSession& s) { s.gpuMemory(device, max_allocated, max_reserved, total); });
}

void dlrr_packages(const char* reason, int n, const char* const* names, const char* const* versions,
                   const char* const* paths) {
  if (n < 0 || n > 4096) return;
  withRecorder([&](RecordSession& s) { s.packages(reason, n, names, versions, paths); });
}

int dlrr_replay_target(dlrr_target_t* out) {
  ReplaySession* r = processReplayer();
  if (!r || !out) return 0;
  const ReplayTarget& t = r->target();
  out->kind = static_cast<int>(t.kind);
  out->step = t.step;
  out->digest_kind = t.digestKind;
  out->call_index = t.callIndex;
  std::snprintf(out->where, sizeof out->where, "%s", t.where.c_str());
  return 1;
}

int dlrr_replay_batch(uint32_t loader, uint64_t index, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer([&](ReplaySession& r) {
    rc = exportBytes(buf, data, n,
                     [&](auto& out) { return r.batch(loader, index, ReplaySession::BatchBytes::Recorded, out); });
  });
  return rc;
}

int dlrr_replay_batch_kind(uint32_t loader, uint64_t index) {
  int rc = 0;
  withReplayer([&](ReplaySession& r) { rc = r.batchKind(loader, index); });
  return rc;
}

int dlrr_replay_batch_stand_in(uint32_t loader, uint64_t index, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer([&](ReplaySession& r) {
    rc = exportBytes(buf, data, n,
                     [&](auto& out) { return r.batch(loader, index, ReplaySession::BatchBytes::StandIn, out); });
  });
  return rc;
}

void dlrr_replay_remade_begin(uint32_t loader, uint64_t index) {
  withReplayer([&](ReplaySession& r) { r.remadeBegin(loader, index); });
}

int dlrr_replay_remade_end(char* what, uint64_t cap, int64_t* sample_pos) {
  int rc = -1;
  withReplayer([&](ReplaySession& r) {
    std::string w;
    int64_t pos = -1;
    rc = r.remadeEnd(w, pos);
    if (sample_pos) *sample_pos = pos;
    if (what && cap) std::snprintf(what, cap, "%s", w.c_str());
  });
  return rc;
}

int dlrr_replay_batch_map(char* out, uint64_t cap) {
  int rc = 0;
  withReplayer([&](ReplaySession& r) {
    std::string m = r.batchMap().describe();
    if (out && cap) std::snprintf(out, cap, "%s", m.c_str());
    rc = 1;
  });
  return rc;
}

int64_t dlrr_replay_jump_step(void) {
  int64_t s = -1;
  withReplayer([&](ReplaySession& r) { s = r.jumpStep(); });
  return s;
}

int dlrr_replay_snapshot(int64_t step, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer(
      [&](ReplaySession& r) { rc = exportBytes(buf, data, n, [&](auto& out) { return r.snapshot(step, out); }); });
  return rc;
}

int dlrr_replay_batch_meta(uint32_t loader, uint64_t index, int64_t* step, int* is_training,
                           const int64_t** sample_indices, uint64_t* n_indices) {
  int rc = 0;
  withReplayer([&](ReplaySession& r) {
    int64_t st = -1;
    bool training = false;
    const std::vector<int64_t>* idx = nullptr;
    if (!r.batchMeta(loader, index, st, training, idx)) return;
    if (step) *step = st;
    if (is_training) *is_training = training ? 1 : 0;
    if (sample_indices) *sample_indices = idx->data();
    if (n_indices) *n_indices = idx->size();
    rc = 1;
  });
  return rc;
}

int64_t dlrr_replay_iterator_length(uint32_t loader, uint32_t iteration) {
  int64_t n = -1;
  withReplayer([&](ReplaySession& r) { n = r.iteratorLength(loader, iteration); });
  return n;
}

int dlrr_replay_rng_at_batch(uint32_t loader, uint64_t index, int kind, int device, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer([&](ReplaySession& r) {
    rc = exportBytes(buf, data, n, [&](auto& out) { return r.rngAtBatch(loader, index, kind, device, out); });
  });
  return rc;
}

int dlrr_replay_rng_at_step(int64_t step, int kind, int device, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer([&](ReplaySession& r) {
    rc = exportBytes(buf, data, n, [&](auto& out) { return r.rngAtStep(step, kind, device, out); });
  });
  return rc;
}

int dlrr_replay_rng_at_fork(int kind, int device, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer([&](ReplaySession& r) {
    rc = exportBytes(buf, data, n, [&](auto& out) { return r.rngAtFork(kind, device, out); });
  });
  return rc;
}

const char* dlrr_replay_runtime_info(const char* key) {
  ReplaySession* r = processReplayer();
  if (!r || !key) return nullptr;
  try {
    return r->runtimeInfo(key);
  } catch (...) {
    DLRR_SWALLOWED();
    return nullptr;
  }
}

int64_t dlrr_replay_recorded_steps(void) {
  ReplaySession* r = processReplayer();
  return r ? r->recordedSteps() : -1;
}

int64_t dlrr_replay_last_step_begun(void) {
  ReplaySession* r = processReplayer();
  return r ? r->lastStepBegun() : -1;
}

double dlrr_replay_recorded_loss(int64_t step) {
  ReplaySession* r = processReplayer();
  return r ? r->recordedLoss(step) : std::nan("");
}

int dlrr_replay_recorded_tensors(int64_t step, const uint8_t** data, uint64_t* n) {
  int rc = 0;
  thread_local std::vector<uint8_t> buf;
  withReplayer([&](ReplaySession& r) {
    rc = exportBytes(buf, data, n, [&](auto& out) {
      r.recordedTensors(step, out);
      return true;
    });
  });
  return rc;
}

// native.RecordedDigestT mirrors this layout (tests/python/test_native.py).
static_assert(sizeof(dlrr_recorded_digest_t) == 64 && offsetof(dlrr_recorded_digest_t, digest) == 24);

int dlrr_replay_recorded_digests(int64_t step, const dlrr_recorded_digest_t** items, uint64_t* n) {
  // This thread's answer, kept until its next call: the structs and the paths they point to.
  thread_local std::vector<ReplaySession::StepDigest> tDigests;
  thread_local std::vector<dlrr_recorded_digest_t> tItems;
  if (items) *items = nullptr;
  if (n) *n = 0;
  return withReplayer([&](ReplaySession& r) {
    tItems.clear();
    tDigests = r.recordedDigests(step);
    tItems.reserve(tDigests.size());
    for (const auto& d : tDigests) {
      dlrr_recorded_digest_t c{};
      c.path = d.path.c_str();
      c.kind = d.kind;
      c.call_index = d.callIndex;
      c.output = d.output;
      c.digest = {d.digest.hash, d.digest.nanCount, d.digest.infCount, d.digest.min, d.digest.max};
      tItems.push_back(c);
    }
    if (items) *items = tItems.data();
    if (n) *n = tItems.size();
  });
}

const char* dlrr_replay_divergence(void) {
  ReplaySession* r = processReplayer();
  if (!r) return "";
  try {
    std::optional<Divergence> d = r->divergence();
    tStatus = d ? d->detail : "";
  } catch (...) {
    DLRR_SWALLOWED();
    tStatus.clear();
  }
  return tStatus.c_str();
}

void dlrr_replay_diverged(int64_t step, int kind, const char* path, const char* detail) {
  withReplayer([&](ReplaySession& r) { r.diverge(step, kind, path ? path : "", detail ? detail : ""); });
}

const char* dlrr_replay_recorded_exception(int* while_loading) {
  if (while_loading) *while_loading = 0;
  ReplaySession* r = processReplayer();
  if (!r) return "";
  if (while_loading) *while_loading = r->crashWhileLoading() ? 1 : 0;
  return r->crashException().c_str();
}

void dlrr_replay_fact(const char* key, const char* value) {
  withReplayer([&](ReplaySession& r) { r.fact(key ? key : "", value ? value : ""); });
}

uint64_t dlrr_collective_begin(const char* op, const char* group, const char* reduce_op, int peer, int bucket,
                               int async_op) {
  uint64_t seq = 0;
  withSession([&](ProcessSession& s) { seq = s.collectiveBegin(op, group, reduce_op, peer, bucket, async_op != 0); });
  return seq;
}

int dlrr_collective_tensor(uint64_t seq, int is_result, const char* dtype, int ndim, const int64_t* shape,
                           const void* data, uint64_t nbytes) {
  if (ndim < 0 || ndim > 64 || (ndim > 0 && !shape)) return -1;
  int rc = -1;
  withSession(
      [&](ProcessSession& s) { rc = s.collectiveTensor(seq, is_result != 0, dtype, ndim, shape, data, nbytes); });
  return rc;
}

void dlrr_collective_end(uint64_t seq, const char* status) {
  withRecorder([&](RecordSession& s) { s.collectiveEnd(seq, status); });
}

void dlrr_collective_wait(int reason, int waiting, uint64_t seq, const char* op, const char* group, int64_t issued_step,
                          int64_t completed_seq, const char* completed_op, int64_t completed_step, uint64_t waited_ms,
                          const char* stacks) {
  RecordSession::CollectiveWaitRec w;
  w.reason = reason;
  w.waiting = waiting != 0;
  w.seq = seq;
  w.op = op;
  w.group = group;
  w.issuedStep = issued_step;
  w.completedSeq = completed_seq;
  w.completedOp = completed_op;
  w.completedStep = completed_step;
  w.waitedMs = waited_ms;
  w.stacks = stacks;
  withRecorder([&](RecordSession& s) { s.collectiveWait(w); });
}

void dlrr_window_flush(void) {
  withRecorder([&](RecordSession& s) { s.flushWindow("SIGTERM"); });
}

int dlrr_term_notice(int notify_fd, int ack_fd, int wait_ms) {
  if (!processRecorder()) return 0;
  return installTermNotice(notify_fd, ack_fd, wait_ms);
}

uint64_t dlrr_collective_begin1(const char* op, const char* group, const char* reduce_op, int peer, int bucket,
                                int async_op, const char* dtype, int ndim, const int64_t* shape, const void* data,
                                uint64_t nbytes) {
  uint64_t seq = dlrr_collective_begin(op, group, reduce_op, peer, bucket, async_op);
  if (dtype) dlrr_collective_tensor(seq, 0, dtype, ndim, shape, data, nbytes);
  return seq;
}

void dlrr_collective_end1(uint64_t seq, const char* dtype, int ndim, const int64_t* shape, const void* data,
                          uint64_t nbytes, const char* status) {
  if (dtype) dlrr_collective_tensor(seq, 1, dtype, ndim, shape, data, nbytes);
  dlrr_collective_end(seq, status);
}

int dlrr_replay_collective_result(uint64_t seq, uint32_t index, const uint8_t** data, uint64_t* n) {
  thread_local std::vector<uint8_t> served;
  int rc = -1;
  withReplayer([&](ReplaySession& r) {
    rc = r.collectiveResult(seq, index, served);
    if (rc == 1) {
      if (data) *data = served.data();
      if (n) *n = served.size();
    }
  });
  return rc;
}

int dlrr_replay_rank(void) {
  ReplaySession* r = processReplayer();
  return r ? r->recordedRank() : -1;
}

// Kept out of line and visible so debuggers can break on it by name. The report is written
// before the breakpoint: a debugger that ends the job there must not lose it.
__attribute__((noinline)) void dlrr_replay_stop(const char* reason) {
  withReplayer([&](ReplaySession& r) { r.writeReport(reason ? reason : "stop"); });
  dlrr_replay_stopped(reason);
  asm volatile("" ::: "memory");  // no tail call: this frame stays in the debugger's backtrace
}

// Does nothing; the asm keeps the compiler from dropping the call to an empty function.
__attribute__((noinline)) void dlrr_replay_stopped(const char* reason) { asm volatile("" : : "r"(reason) : "memory"); }

}  // extern "C"
