#include "replayer/ReplaySession.h"

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "format/TraceError.h"
#include "replayer/ProcessMatch.h"
#include "session/DistEnv.h"

namespace dlrr {
namespace {

std::vector<std::string> readCmdline() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> out;
  size_t start = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) end = all.size();
    out.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// dlreplay --all-ranks: each rank writes DLRR_REPORT.rank<R>.
std::string reportSuffix(const Config& cfg) {
  if (cfg.replayStream != kEachRank) return "";
  DistEnv d = DistEnv::fromEnvironment();
  return d.isRank() ? ".rank" + std::to_string(d.rank) : "";
}

int64_t envStep(const char* name, int64_t otherwise) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : otherwise;
}

struct Remade {
  bool active = false;
  uint32_t loader = 0;
  uint64_t index = 0;
  BatchDigest digest;
};
thread_local Remade tRemade;

}  // namespace

ReplaySession::ReplaySession(const Config& cfg, const std::string& until)
    : cfg_(cfg),
      jumpStep_(envStep("DLRR_JUMP_STEP", -1)),
      whatIfStep_(envStep("DLRR_WHAT_IF_FROM", INT64_MAX)),
      report_(reportSuffix(cfg)),
      verifier_(std::make_unique<ReplayVerifier>(nullptr, jumpStep_, whatIfStep_, nullptr)) {
  std::string err;
  auto t = parseReplayTarget(until.empty() ? "end" : until, err);
  if (!t) throw TraceError(ErrorKind::Usage, err);
  target_ = *t;
  trace_ = Trace::open(cfg_.traceDir, OpenMode::Tolerant);  // as dlreplay: a stream torn at birth is skipped
  if (cfg_.replayStream == kEachRank) {
    // dlreplay --all-ranks: every rank the launcher starts replays its own stream; the
    // launcher agent and anything else without a rank runs untouched.
    DistEnv d = DistEnv::fromEnvironment();
    stream_ = d.isRank() ? trace_->findRank(d.rank, d.restartCount) : nullptr;
    if (!stream_) return;
  } else {
    stream_ = cfg_.replayStream.empty() ? trace_->mainStream() : trace_->find(cfg_.replayStream);
  }
  if (!stream_) throw TraceError(ErrorKind::NotFound, "stream " + cfg_.replayStream + " is not in the trace");
  std::vector<std::string> recorded;
  for (auto a : stream_->header().getArgv()) recorded.emplace_back(a.cStr());
  active_ = sameCommand(recorded, readCmdline());
  if (const char* id = std::getenv(kProcessIdEnv)) identity_ = id;
  std::string recordedIdentity = stream_->header().getProcessIdentity().cStr();
  if (!recordedIdentity.empty()) {
    // A multiprocessing.Process (fork or spawn): siblings share a command line (a forked one
    // shares its parent's), so the process the parent created in the same order replays the
    // stream, whichever starts first.
    active_ = active_ && identity_ == recordedIdentity;
  } else if (active_ && isMultiprocessingChild(recorded)) {
    // A trace without identities (recorded before they were): sibling children (a Hogwild
    // job's trainers) share a command line: the first to start replays the stream, the
    // others run unreplayed. The claim lives beside dlreplay's report.
    const char* report = std::getenv("DLRR_REPORT");
    if (report && *report) {
      std::string claim = std::string(report) + ".claim." + stream_->name();
      int fd = ::open(claim.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0)
        active_ = false;
      else
        ::close(fd);
    }
  }
  if (StreamReader* l = trace_->launcher()) {
    std::string mode = l->header().getTrace().getCaptureMode().cStr();
    captureLevel_ = mode == "process" ? -1 : mode == "minimal" ? 0 : mode == "full" ? 2 : 1;
  }
  if (active_) load();
}

ReplaySession::~ReplaySession() = default;

void ReplaySession::beforeFork() noexcept {
  reportMu_.lock();
  mu_.lock();
  verifier_->lockForFork();
  report_.lockForFork();
  if (index_) index_->lockForFork();
}

void ReplaySession::afterForkParent() noexcept {
  if (index_) index_->unlockAfterFork();
  report_.unlockAfterFork();
  verifier_->unlockAfterFork();
  mu_.unlock();
  reportMu_.unlock();
}

void ReplaySession::afterForkChild() noexcept {
  afterForkParent();  // the locks beforeFork took
  const char* id = std::getenv(kProcessIdEnv);
  std::string recordedIdentity = stream_ ? stream_->header().getProcessIdentity().cStr() : "";
  bool mine = isTrainerIdentity(id) && identity_ != id && recordedIdentity == id;
  active_ = false;
  if (!mine) return;
  identity_ = id;
  try {
    if (!index_) load();
    active_ = true;
  } catch (...) {
    // best effort: the child runs unreplayed; dlreplay reports that the stream was never attached.
  }
}

void ReplaySession::load() {
  index_ = std::make_unique<RecordingIndex>(*stream_, jumpStep_);
  verifier_ = std::make_unique<ReplayVerifier>(index_.get(), jumpStep_, whatIfStep_,
                                               [this](const std::string& w) { report_.warn(w); });
  // The target: the first non-finite failure for nan, the first exception or fatal signal for
  // crash, whichever came first (a NaN, then an exception raised because of it).
  const RecordedFailure* f = nullptr;
  if (target_.kind == ReplayTarget::Kind::Nan)
    f = index_->firstNonfinite() ? &*index_->firstNonfinite() : nullptr;
  else if (target_.kind == ReplayTarget::Kind::Crash)
    f = index_->firstCrash() ? &*index_->firstCrash() : nullptr;
  if (!f) return;
  target_.step = f->step;
  target_.where = f->where;
  if (target_.kind == ReplayTarget::Kind::Nan) {
    target_.digestKind = f->digestKind;
    target_.callIndex = f->callIndex;
  } else {
    crashSignal_ = f->signal;
    crashException_ = f->exceptionType;
    crashWhileLoading_ = f->whileLoading;
  }
}

bool ReplaySession::serveEntropy(schema::Entropy::Source src, void* buf, size_t n, size_t& got) {
  if (!active_ || !index_) return false;
  const auto& entropy = index_->entropy();
  std::lock_guard<std::mutex> lk(mu_);
  if (entropyNext_ >= entropy.size()) return false;
  const RecordingIndex::Entropy& r = entropy[entropyNext_];
  // /dev/urandom and /dev/random reads are interchangeable sources of the same kind of bytes.
  bool srcOk = r.source == static_cast<int>(src) || (r.source >= 2 && static_cast<int>(src) >= 2);
  if (!srcOk || r.requested != n || r.data.size() > n) {
    report_.warn("entropy request " + std::to_string(entropyNext_) + " differs from the recording (" +
                     std::to_string(n) + " bytes asked, " + std::to_string(r.requested) +
                     " recorded); served fresh bytes from then on",
                 20);
    entropyNext_ = entropy.size();  // out of step: stop serving rather than serve the wrong bytes
    return false;
  }
  std::memcpy(buf, r.data.data(), r.data.size());
  got = r.data.size();
  ++entropyNext_;
  return true;
}

bool ReplaySession::batch(uint32_t loader, uint64_t index, BatchBytes which, std::vector<uint8_t>& out) {
  const RecordingIndex::Batch* b = index_ ? index_->batch(loader, index) : nullptr;
  if (!b) return false;
  out = index_->encodeBatch(*b, which == BatchBytes::StandIn);
  return true;
}

int ReplaySession::batchKind(uint32_t loader, uint64_t index) const {
  const RecordingIndex::Batch* b = index_ ? index_->batch(loader, index) : nullptr;
  if (!b) return 0;
  if (!b->byReference) return 1;
  return b->bytesInTrace ? 2 : 3;
}

void ReplaySession::remadeBegin(uint32_t loader, uint64_t index) {
  const RecordingIndex::Batch* b = index_ ? index_->batch(loader, index) : nullptr;
  tRemade.active = true;
  tRemade.loader = loader;
  tRemade.index = index;
  tRemade.digest.begin(b ? b->sampleIndices.size() : 0);
}

BatchDigest* ReplaySession::remadeDigest() { return tRemade.active ? &tRemade.digest : nullptr; }

int ReplaySession::remadeEnd(std::string& what, int64_t& samplePos) {
  samplePos = -1;
  if (!tRemade.active) return -1;
  tRemade.active = false;
  const RecordingIndex::Batch* b = index_ ? index_->batch(tRemade.loader, tRemade.index) : nullptr;
  if (!b || !b->byReference) return -1;
  if (b->digest == tRemade.digest.digest()) return 1;
  const std::vector<uint64_t>& recorded = b->sampleDigests;
  samplePos = BatchDigest::firstDifferentSample(recorded, tRemade.digest.samples());
  what = samplePos >= 0 ? "sample " + std::to_string(samplePos) + " of the batch differs from the recorded one"
         : recorded.size() == tRemade.digest.samples().size()
             ? "the batch differs from the recorded one (its structure, or a value not split by sample)"
             : "the batch has " + std::to_string(tRemade.digest.samples().size()) + " samples, " +
                   std::to_string(recorded.size()) + " recorded";
  return 0;
}

BatchMap ReplaySession::batchMap() const {
  BatchMapBuilder m;
  if (!index_) return m.build();
  for (const auto& [key, b] : index_->batches()) {
    int kind = batchKind(key.first, key.second);
    m.batch(b.step >= 0 ? b.step : b.eventStep, kind >= 2, kind != 3);
  }
  for (const auto& [step, ref] : index_->snapshots())  // one whose tensors were dropped for the budget starts nothing
    if (index_->snapshotComplete(step)) m.snapshot(step);
  return m.build();
}

bool ReplaySession::snapshot(int64_t step, std::vector<uint8_t>& out) {
  if (!index_ || !index_->snapshotComplete(step)) return false;
  out = index_->encodeSnapshot(step);
  return true;
}

bool ReplaySession::batchMeta(uint32_t loader, uint64_t index, int64_t& step, bool& training,
                              const std::vector<int64_t>*& indices) const {
  const RecordingIndex::Batch* b = index_ ? index_->batch(loader, index) : nullptr;
  if (!b) return false;
  // A batch's StepBegin precedes its Batch event (the step begins at the delivery): the step
  // the event was stamped with stands in where the StepBegin did not match it at load.
  step = b->step >= 0 ? b->step : b->training ? b->eventStep : -1;
  training = b->training;
  indices = &b->sampleIndices;
  return true;
}

int64_t ReplaySession::iteratorLength(uint32_t loader, uint32_t iteration) const {
  return index_ ? index_->iteratorLength(loader, iteration) : -1;
}

bool ReplaySession::rngBytes(const std::vector<RecordingIndex::RngRef>* list, int kind, int device,
                             std::vector<uint8_t>& out) {
  if (!list) return false;
  for (const auto& r : *list) {
    if (r.kind != kind || r.device != device) continue;
    out = r.size ? index_->readBlob(r.hash, r.size) : std::vector<uint8_t>{};
    return true;
  }
  return false;
}

bool ReplaySession::rngAtBatch(uint32_t loader, uint64_t index, int kind, int device, std::vector<uint8_t>& out) {
  const RecordingIndex::Batch* b = index_ ? index_->batch(loader, index) : nullptr;
  return b && rngBytes(&b->rng, kind, device, out);
}

bool ReplaySession::rngAtStep(int64_t step, int kind, int device, std::vector<uint8_t>& out) {
  return index_ && rngBytes(index_->rngAtStep(step), kind, device, out);
}

bool ReplaySession::rngAtFork(int kind, int device, std::vector<uint8_t>& out) {
  return index_ && rngBytes(&index_->rngAtFork(), kind, device, out);
}

const char* ReplaySession::runtimeInfo(const std::string& key) const {
  return index_ ? index_->runtimeInfo(key) : nullptr;
}

double ReplaySession::recordedLoss(int64_t step) const {
  std::optional<double> l = index_ ? index_->loss(step) : std::nullopt;
  return l ? *l : std::nan("");
}

void ReplaySession::stepBegin(int64_t step, uint32_t /*loader*/, uint64_t /*batchIndex*/, int64_t /*epoch*/,
                              StepRule /*rule*/) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->stepBegan(step);
  step_.store(step);
  verifier_->beginStep(step);
}

void ReplaySession::stepEnd(int64_t step, double loss) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->stepEnding(step);  // delivers its launches
  if (verifier_->compares(step)) {
    std::lock_guard<std::mutex> lk(mu_);
    checkLaunchesLocked(step, true);
  }
  verifier_->endStep(step, loss);
  if (step >= jumpStep()) writeReport("running");  // a crash later still leaves the figures so far
}

int ReplaySession::digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                          int /*ndim*/, const int64_t* /*shape*/, const void* data, uint64_t nbytes, bool /*keep*/,
                          DigestResult& out) {
  out = computeDigest(dtype ? dtype : "", data, data ? nbytes : 0);
  return verifier_->checkDigest(currentStep(), kind, path ? path : "", callIndex, output, 0, out);
}

int ReplaySession::digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* /*dtype*/,
                                int /*ndim*/, const int64_t* /*shape*/, int algorithm, const DigestResult& d) {
  return verifier_->checkDigest(currentStep(), kind, path ? path : "", callIndex, output, algorithm, d);
}

void ReplaySession::failureException(const char* type, const char* message, const char* where, int /*n*/,
                                     const char* const* /*files*/, const int32_t* /*lines*/,
                                     const char* const* /*functions*/, const char* const* /*code*/) {
  fact("exception", std::string(type ? type : "") + ": " + (message ? message : ""));
  fact("exception.where", where ? where : "");
}

void ReplaySession::diverge(int64_t step, int kind, const std::string& path, const std::string& detail) {
  Divergence d;
  d.step = step;
  d.kind = kind;
  d.path = path;
  d.detail = detail;
  verifier_->diverge(d);
}

void ReplaySession::recordedTensors(int64_t step, std::vector<uint8_t>& out) {
  if (index_) {
    out = index_->encodeKeptTensors(step);
    return;
  }
  out.assign({'D', 0, 0, 0, 0});  // an empty dict
}

std::vector<ReplaySession::StepDigest> ReplaySession::recordedDigests(int64_t step) const {
  std::vector<StepDigest> out;
  if (!index_) return out;
  const auto& all = index_->digests();
  for (auto it = all.lower_bound(RecordingIndex::DigestKey{step, INT_MIN, "", 0, 0}); it != all.end(); ++it) {
    const auto& [s, kind, path, callIndex, output] = it->first;
    if (s != step) break;
    out.push_back(StepDigest{kind, path, callIndex, output, it->second});
  }
  return out;
}

void ReplaySession::writeReport(const std::string& stopReason) {
  const char* reportEnv = std::getenv("DLRR_REPORT");
  if (!reportEnv || !*reportEnv) return;
  bool stopping = stopReason != "running" && stopReason != "exit";
  if (stopping)
    if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();
  // One writer at a time, its figures gathered under it: the latest figures are written last.
  std::lock_guard<std::mutex> wk(reportMu_);
  ReplayReport gpu;
  {
    std::lock_guard<std::mutex> lk(mu_);
    int64_t open = verifier_->openStep();
    if (stopping && open != INT64_MIN) checkLaunchesLocked(open, false);
    gpuFigures(gpu);
  }
  ReplayVerifier::Figures v = verifier_->figures();
  report_.write(stopReason, [&](ReplayReport& r) {
    r.target = target_.describe();
    r.targetStep = target_.step;
    r.targetWhere = target_.where;
    r.verifiedSteps = v.verifiedSteps;
    r.recordedSteps = recordedSteps();
    r.lastStep = v.lastStepEnded;
    if (jumpStep_ >= 0) r.jumpStep = jumpStep_;
    if (v.divergence)
      r.divergence = ReplayReport::Divergence{v.divergence->step, digestKindName(v.divergence->kind),
                                              v.divergence->path, v.divergence->detail};
    // A text the hook said too keeps both, one a line (as the report always did).
    auto say = [](std::optional<std::string>& field, const std::optional<std::string>& v) {
      if (v) field = field ? *field + "\n" + *v : *v;
    };
    say(r.gpuCapture, gpu.gpuCapture);
    say(r.gpuRecorded, gpu.gpuRecorded);
    if (gpu.launches) r.launches = gpu.launches;
    if (gpu.launchDivergence) r.launchDivergence = gpu.launchDivergence;
    if (gpu.launchAtStop) r.launchAtStop = gpu.launchAtStop;
    r.incomparableDigests = v.incomparableDigests;
    // A jump replay issues the collectives of the steps from the jump on.
    uint64_t recordedCollectives = verifier_ ? verifier_->recordedCollectivesFromJump() : 0;
    if (recordedCollectives || v.collectivesIssued)
      r.dist = ReplayReport::Dist{recordedRank(), v.collectivesIssued, recordedCollectives, v.collectiveTensorsVerified,
                                  collectiveResultsServed_.load()};
  });
}

}  // namespace dlrr
