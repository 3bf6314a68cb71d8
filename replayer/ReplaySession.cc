#include "replayer/ReplaySession.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "format/EntropyFlags.h"
#include "format/TraceError.h"
#include "replayer/BatchEncoding.h"
#include "replayer/ProcessMatch.h"
#include "replayer/ReplayReport.h"
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

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string num(double d) {
  if (std::isnan(d)) return "nan";
  std::ostringstream o;
  o.precision(9);
  o << d;
  return o.str();
}

bool sameBits(double a, double b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);  // bit for bit: -0.0 is not 0.0
}

const char* kindName(int k) {
  static const char* names[] = {"module output", "gradient", "parameter", "loss", "batch", "tensor", "module input"};
  constexpr int n = sizeof(names) / sizeof(names[0]);
  static_assert(n == static_cast<int>(schema::TensorDigest::Kind::MODULE_INPUT) + 1, "a name per TensorDigest.Kind");
  return k >= 0 && k < n ? names[k] : "tensor";
}

}  // namespace

ReplaySession::ReplaySession(const Config& cfg, const std::string& until) : cfg_(cfg) {
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
    reportSuffix_ = ".rank" + std::to_string(d.rank);
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
  if (const char* j = std::getenv("DLRR_JUMP_STEP"); j && *j) jumpStep_ = std::strtoll(j, nullptr, 10);
  if (const char* w = std::getenv("DLRR_WHAT_IF_FROM"); w && *w) whatIfStep_ = std::strtoll(w, nullptr, 10);
  if (active_) load();
}

ReplaySession::~ReplaySession() = default;

void ReplaySession::beforeFork() noexcept { mu_.lock(); }

void ReplaySession::afterForkParent() noexcept { mu_.unlock(); }

void ReplaySession::afterForkChild() noexcept {
  mu_.unlock();  // taken by beforeFork
  const char* id = std::getenv(kProcessIdEnv);
  std::string recordedIdentity = stream_ ? stream_->header().getProcessIdentity().cStr() : "";
  bool mine = isTrainerIdentity(id) && identity_ != id && recordedIdentity == id;
  active_ = false;
  if (!mine) return;
  identity_ = id;
  try {
    if (!loaded_) load();
    active_ = true;
  } catch (...) {
    // The child runs unreplayed; dlreplay reports that the stream was never attached.
  }
}

void ReplaySession::load() {
  loaded_ = true;
  std::vector<RngRecord> pendingRng;
  BatchKey lastBatch{UINT32_MAX, 0};
  std::optional<schema::Failure::Kind> failureKind;
  bool inStep = false;  // digests between a StepBegin and its StepEnd are the step's own
  // RNG states follow the StepBegin they belong to (optimizer-driven steps) and precede the
  // Batch they were taken at (DataLoader deliveries): keep them for both.
  int64_t openStep = -1;
  bool stepWithoutBatch = false;
  stream_->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
    switch (e.which()) {
      case schema::Event::ENTROPY: {
        auto en = e.getEntropy();
        if (en.getFlags() & kEntropyLoaderDraw) break;  // machinery replay does not run: never asked
        auto d = en.getData();
        entropy_.push_back({static_cast<int>(en.getSource()), static_cast<size_t>(en.getRequested()),
                            std::vector<uint8_t>(d.begin(), d.end())});
        break;
      }
      case schema::Event::RNG_STATE: {
        auto r = e.getRngState();
        auto ref = r.getState();
        RngRecord rec{
            static_cast<int>(r.getKind()), r.getDevice(), Hash128{ref.getHashLo(), ref.getHashHi()}, ref.getSize(), {}};
        if (r.getAtFork()) {  // not a step's nor a batch's
          forkRng_.push_back(std::move(rec));
          break;
        }
        if (stepWithoutBatch) stepRng_[openStep].push_back(rec);
        pendingRng.push_back(std::move(rec));
        break;
      }
      case schema::Event::BATCH: {
        auto b = e.getBatch();
        BatchRecord rec;
        rec.event = std::make_unique<capnp::MallocMessageBuilder>();
        rec.event->setRoot(e);
        rec.training = b.getIsTraining();
        rec.eventStep = e.getStep();
        rec.byReference = b.getByReference();
        for (auto i : b.getSampleIndices()) rec.sampleIndices.push_back(i);
        rec.rng = std::move(pendingRng);
        pendingRng.clear();
        lastBatch = {b.getLoader(), b.getIndex()};
        stepWithoutBatch = false;
        batches_[lastBatch] = std::move(rec);
        break;
      }
      case schema::Event::SNAPSHOT: {
        BatchRecord rec;
        rec.event = std::make_unique<capnp::MallocMessageBuilder>();
        rec.event->setRoot(e);
        int64_t step = e.getSnapshot().getStep();
        // Periodic snapshots are taken at the step's start, a failure one mid-step: prefer periodic.
        if (!snapshots_.count(step) || e.getSnapshot().getReason() == schema::Snapshot::Reason::PERIODIC)
          snapshots_[step] = std::move(rec);
        break;
      }
      case schema::Event::STEP_BEGIN: {
        auto sb = e.getStepBegin();
        int64_t step = sb.getStep();
        if (!sb.getByOptimizer()) {
          auto it = batches_.find({sb.getLoader(), sb.getBatchIndex()});
          if (it != batches_.end()) {
            it->second.step = step;
            it->second.training = true;
          }
        }
        pendingRng.clear();  // a step's RNG states follow its StepBegin
        lastStepBegun_ = std::max(lastStepBegun_, step);
        inStep = true;
        openStep = step;
        stepWithoutBatch = true;
        break;
      }
      case schema::Event::STEP_END: {
        inStep = false;
        auto se = e.getStepEnd();
        losses_[se.getStep()] = se.getLoss();
        recordedSteps_ = std::max<int64_t>(recordedSteps_, se.getStep() + 1);
        break;
      }
      case schema::Event::LOADER_END: {
        auto le = e.getLoaderEnd();
        iteratorLengths_[{le.getLoader(), le.getIteration()}] = static_cast<int64_t>(le.getBatches());
        break;
      }
      case schema::Event::DIGEST: {
        if (e.getStep() < jumpStep_) break;  // a fast-forwarded step: never compared
        auto d = e.getDigest();
        RecordedDigest rd;
        rd.hash = d.getHash();
        rd.nanCount = d.getNanCount();
        rd.infCount = d.getInfCount();
        rd.min = d.getMin();
        rd.max = d.getMax();
        rd.dtype = d.getDtype().cStr();
        rd.algorithm = static_cast<int>(d.getAlgorithm());
        for (auto x : d.getShape()) rd.shape.push_back(x);
        DigestKey k{e.getStep(), static_cast<int>(d.getKind()), d.getPath().cStr(), d.getCallIndex(), d.getOutput()};
        if (digests_.emplace(k, std::move(rd)).second && inStep) ++digestsPerStep_[e.getStep()];
        break;
      }
      case schema::Event::TENSOR: {
        auto ft = e.getTensor();
        KeptTensor k;
        k.key = std::string(kindName(static_cast<int>(ft.getKind()))) + ":" + ft.getPath().cStr() + "#" +
                std::to_string(ft.getCallIndex()) + "." + std::to_string(ft.getOutput());
        k.msg = std::make_unique<capnp::MallocMessageBuilder>();
        k.msg->setRoot(ft);
        kept_[e.getStep()].push_back(std::move(k));
        break;
      }
      case schema::Event::INTERNED_STRING:
      case schema::Event::CUDA_LAUNCH:
        loadGpuEvent(e);
        break;
      case schema::Event::COLLECTIVE:
        loadCollective(e);
        break;
      case schema::Event::RUNTIME_INFO:
        for (auto kv : e.getRuntimeInfo().getItems()) runtime_[kv.getKey().cStr()] = kv.getValue().cStr();
        break;
      case schema::Event::FAILURE: {
        auto f = e.getFailure();
        if (failureKind) break;  // the first failure is the target
        failureKind = f.getKind();
        if (target_.kind == ReplayTarget::Kind::Nan && f.getKind() == schema::Failure::Kind::NONFINITE) {
          target_.step = f.getStep();
          target_.where = f.getWhere().cStr();
          target_.digestKind = static_cast<int>(f.getDigestKind());
          target_.callIndex = f.getCallIndex();
        } else if (target_.kind == ReplayTarget::Kind::Crash && f.getKind() != schema::Failure::Kind::NONFINITE) {
          target_.step = f.getStep();
          target_.where = f.getWhere().cStr();
          if (f.getKind() == schema::Failure::Kind::SIGNAL) crashSignal_ = f.getSignal();
          if (f.getKind() == schema::Failure::Kind::EXCEPTION) {
            crashException_ = f.getExceptionType().cStr();
            for (auto fr : f.getTraceback())
              if (std::string_view(fr.getFile().cStr()).find("/torch/utils/data/") != std::string_view::npos)
                crashWhileLoading_ = true;
          }
        }
        break;
      }
      default:
        break;
    }
  });
  resolveKernelNames();
  // A non-finite target found later than another failure kind is still the nan target.
  if (target_.kind == ReplayTarget::Kind::Nan && target_.step < 0) {
    stream_->forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      if (target_.step >= 0 || !e.isFailure()) return;
      auto f = e.getFailure();
      if (f.getKind() != schema::Failure::Kind::NONFINITE) return;
      target_.step = f.getStep();
      target_.where = f.getWhere().cStr();
      target_.digestKind = static_cast<int>(f.getDigestKind());
      target_.callIndex = f.getCallIndex();
    });
  }
}

bool ReplaySession::serveEntropy(schema::Entropy::Source src, void* buf, size_t n, size_t& got) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!active_ || entropyNext_ >= entropy_.size()) return false;
  const EntropyRecord& r = entropy_[entropyNext_];
  // /dev/urandom and /dev/random reads are interchangeable sources of the same kind of bytes.
  bool srcOk = r.source == static_cast<int>(src) || (r.source >= 2 && static_cast<int>(src) >= 2);
  if (!srcOk || r.requested != n || r.data.size() > n) {
    if (warnings_.size() < 20)
      warnings_.push_back("entropy request " + std::to_string(entropyNext_) + " differs from the recording (" +
                          std::to_string(n) + " bytes asked, " + std::to_string(r.requested) +
                          " recorded); served fresh bytes from then on");
    entropyNext_ = entropy_.size();  // out of step: stop serving rather than serve the wrong bytes
    return false;
  }
  std::memcpy(buf, r.data.data(), r.data.size());
  got = r.data.size();
  ++entropyNext_;
  return true;
}

const std::vector<uint8_t>* ReplaySession::snapshot(int64_t step) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = snapshots_.find(step);
  if (it == snapshots_.end()) return nullptr;
  BatchRecord& rec = it->second;
  if (rec.encoded.empty()) {
    auto ev = rec.event->getRoot<schema::Event>().asReader();
    encodeValue(
        ev.getSnapshot().getValue(), [&](const Hash128& h, uint64_t size) { return stream_->readBlob(h, size); },
        rec.encoded);
  }
  return &rec.encoded;
}

const std::vector<uint8_t>* ReplaySession::batch(uint32_t loader, uint64_t index) {
  // Whole or nothing: a blob missing (a bounded trace outside its window) throws.
  return encodedBatch(loader, index, [&](const Hash128& h, uint64_t size) { return stream_->readBlob(h, size); });
}

const std::vector<uint8_t>* ReplaySession::encodedBatch(uint32_t loader, uint64_t index, const BlobLoader& blob) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = batches_.find({loader, index});
  if (it == batches_.end()) return nullptr;
  BatchRecord& rec = it->second;
  if (rec.encoded.empty()) {
    std::vector<uint8_t> out;
    encodeValue(rec.event->getRoot<schema::Event>().asReader().getBatch().getValue(), blob, out);
    rec.encoded = std::move(out);
  }
  return &rec.encoded;
}

namespace {
// Every tensor blob of a value, depth first.
void forEachTensor(schema::Value::Reader v, const std::function<void(schema::TensorRef::Reader)>& fn, int depth = 0) {
  if (depth > 64) return;
  switch (v.which()) {
    case schema::Value::TENSOR:
      fn(v.getTensor());
      break;
    case schema::Value::LIST:
      for (auto c : v.getList()) forEachTensor(c, fn, depth + 1);
      break;
    case schema::Value::TUPLE:
      for (auto c : v.getTuple()) forEachTensor(c, fn, depth + 1);
      break;
    case schema::Value::DICT:
      for (auto e : v.getDict()) forEachTensor(e.getValue(), fn, depth + 1);
      break;
    default:
      break;
  }
}

struct Remade {
  bool active = false;
  uint32_t loader = 0;
  uint64_t index = 0;
  BatchDigest digest;
};
thread_local Remade tRemade;
}  // namespace

int ReplaySession::batchKind(uint32_t loader, uint64_t index) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = batches_.find({loader, index});
  if (it == batches_.end()) return 0;
  BatchRecord& rec = it->second;
  if (!rec.byReference) return 1;
  if (rec.bytes < 0) {
    bool all = true;
    forEachTensor(rec.event->getRoot<schema::Event>().asReader().getBatch().getValue(),
                  [&](schema::TensorRef::Reader t) {
                    auto ref = t.getData();
                    if (all && ref.getSize() > 0) all = stream_->hasBlob(Hash128{ref.getHashLo(), ref.getHashHi()});
                  });
    rec.bytes = all ? 1 : 0;
  }
  return rec.bytes ? 2 : 3;
}

const std::vector<uint8_t>* ReplaySession::batchStandIn(uint32_t loader, uint64_t index) {
  // Only for a batch whose bytes the trace lacks (batchKind 3): batch() cannot encode it, so the
  // cached encoding shared with batch() is never a stand-in of a batch that has bytes.
  return encodedBatch(loader, index, [&](const Hash128& h, uint64_t size) {
    return stream_->hasBlob(h) ? stream_->readBlob(h, size) : std::vector<uint8_t>(size, 0);
  });
}

void ReplaySession::remadeBegin(uint32_t loader, uint64_t index) {
  uint64_t samples = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = batches_.find({loader, index});
    if (it != batches_.end()) samples = it->second.sampleIndices.size();
  }
  tRemade.active = true;
  tRemade.loader = loader;
  tRemade.index = index;
  tRemade.digest.begin(samples);
}

BatchDigest* ReplaySession::remadeDigest() { return tRemade.active ? &tRemade.digest : nullptr; }

int ReplaySession::remadeEnd(std::string& what, int64_t& samplePos) {
  samplePos = -1;
  if (!tRemade.active) return -1;
  tRemade.active = false;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = batches_.find({tRemade.loader, tRemade.index});
  if (it == batches_.end() || !it->second.byReference) return -1;
  auto b = it->second.event->getRoot<schema::Event>().asReader().getBatch();
  if (b.getDigest() == tRemade.digest.digest()) return 1;
  std::vector<uint64_t> recorded;
  for (auto d : b.getSampleDigests()) recorded.push_back(d);
  samplePos = BatchDigest::firstDifferentSample(recorded, tRemade.digest.samples());
  what = samplePos >= 0 ? "sample " + std::to_string(samplePos) + " of the batch differs from the recorded one"
         : recorded.size() == tRemade.digest.samples().size()
             ? "the batch differs from the recorded one (its structure, or a value not split by sample)"
             : "the batch has " + std::to_string(tRemade.digest.samples().size()) + " samples, " +
                   std::to_string(recorded.size()) + " recorded";
  return 0;
}

BatchMap ReplaySession::batchMap() {
  std::vector<std::pair<uint32_t, uint64_t>> keys;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& [k, rec] : batches_) keys.push_back(k);
  }
  BatchMapBuilder b;
  for (const auto& k : keys) {
    int kind = batchKind(k.first, k.second);
    std::lock_guard<std::mutex> lk(mu_);
    const BatchRecord& rec = batches_[k];
    b.batch(rec.step >= 0 ? rec.step : rec.eventStep, kind >= 2, kind != 3);
  }
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& [step, rec] : snapshots_) {
    (void)rec;
    b.snapshot(step);
  }
  return b.build();
}

bool ReplaySession::batchMeta(uint32_t loader, uint64_t index, int64_t& step, bool& training,
                              const std::vector<int64_t>*& indices) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = batches_.find({loader, index});
  if (it == batches_.end()) return false;
  // A batch's StepBegin precedes its Batch event (the step begins at the delivery): the step
  // the event was stamped with stands in where the StepBegin did not match it at load.
  step = it->second.step >= 0 ? it->second.step : it->second.training ? it->second.eventStep : -1;
  training = it->second.training;
  indices = &it->second.sampleIndices;
  return true;
}

int64_t ReplaySession::iteratorLength(uint32_t loader, uint32_t iteration) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = iteratorLengths_.find({loader, iteration});
  return it == iteratorLengths_.end() ? -1 : it->second;
}

const std::vector<uint8_t>* ReplaySession::rngBytes(std::vector<RngRecord>& list, int kind, int device) {
  for (auto& r : list) {
    if (r.kind != kind || r.device != device) continue;
    if (r.bytes.empty() && r.size) r.bytes = stream_->readBlob(r.hash, r.size);
    return &r.bytes;
  }
  return nullptr;
}

const std::vector<uint8_t>* ReplaySession::rngAtBatch(uint32_t loader, uint64_t index, int kind, int device) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = batches_.find({loader, index});
  return it == batches_.end() ? nullptr : rngBytes(it->second.rng, kind, device);
}

const std::vector<uint8_t>* ReplaySession::rngAtFork(int kind, int device) {
  std::lock_guard<std::mutex> lk(mu_);
  return rngBytes(forkRng_, kind, device);
}

const std::vector<uint8_t>* ReplaySession::rngAtStep(int64_t step, int kind, int device) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = stepRng_.find(step);
  return it == stepRng_.end() ? nullptr : rngBytes(it->second, kind, device);
}

const char* ReplaySession::runtimeInfo(const std::string& key) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = runtime_.find(key);
  return it == runtime_.end() ? nullptr : it->second.c_str();
}

double ReplaySession::recordedLoss(int64_t step) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = losses_.find(step);
  return it == losses_.end() ? std::nan("") : it->second;
}

void ReplaySession::stepBegin(int64_t step, uint32_t /*loader*/, uint64_t /*batchIndex*/, int64_t /*epoch*/,
                              StepRule /*rule*/) {
  beginStep(step);
}

void ReplaySession::stepEnd(int64_t step, double loss) {
  endStep(step, loss);
  if (step >= jumpStep()) writeReport("running");  // a crash later still leaves the figures so far
}

int ReplaySession::digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                          int /*ndim*/, const int64_t* /*shape*/, const void* data, uint64_t nbytes, bool /*keep*/,
                          DigestResult& out) {
  out = computeDigest(dtype ? dtype : "", data, data ? nbytes : 0);
  return checkDigest(currentStep(), kind, path ? path : "", callIndex, output, out);
}

void ReplaySession::failureException(const char* type, const char* message, const char* where, int /*n*/,
                                     const char* const* /*files*/, const int32_t* /*lines*/,
                                     const char* const* /*functions*/, const char* const* /*code*/) {
  fact("exception", std::string(type ? type : "") + ": " + (message ? message : ""));
  fact("exception.where", where ? where : "");
}

int ReplaySession::checkDigest(int64_t step, int kind, const std::string& path, uint32_t callIndex, uint32_t output,
                               const DigestResult& got) {
  return checkDigestAlgorithm(step, kind, path, callIndex, output, 0, got);
}

int ReplaySession::checkDigestAlgorithm(int64_t step, int kind, const std::string& path, uint32_t callIndex,
                                        uint32_t output, int algorithm, const DigestResult& got) {
  std::lock_guard<std::mutex> lk(mu_);
  if (step < jumpStep_) return 0;     // fast-forwarded: its compute was skipped, nothing to compare
  if (step >= whatIfStep_) return 0;  // --what-if: changed on purpose, nothing to compare
  auto it = digests_.find(DigestKey{step, kind, path, callIndex, output});
  if (it == digests_.end()) return 2;
  if (step == inStepNumber_) ++seenPerStep_[step];
  const RecordedDigest& want = it->second;
  if (want.algorithm != algorithm) return incomparableLocked(want.algorithm, algorithm);  // like with like
  // rawHash: a trace recorded before NaNs were canonicalised in the hash (TensorDigest.h).
  if (want.hash == got.hash || (got.nanCount && want.hash == got.rawHash)) return 0;
  if (!divergence_) {
    Divergence d;
    d.step = step;
    d.kind = kind;
    d.path = path;
    d.callIndex = callIndex;
    d.output = output;
    std::ostringstream o;
    o << kindName(kind) << " " << (path.empty() ? "<root>" : path) << " (call " << callIndex << ", output " << output
      << "): recorded hash " << hex(want.hash) << " NaN " << want.nanCount << " Inf " << want.infCount << " min "
      << num(want.min) << " max " << num(want.max) << "; replayed hash " << hex(got.hash) << " NaN " << got.nanCount
      << " Inf " << got.infCount << " min " << num(got.min) << " max " << num(got.max);
    d.detail = o.str();
    divergence_ = d;
  }
  return 1;
}

void ReplaySession::diverge(int64_t step, int kind, const std::string& path, const std::string& detail) {
  std::lock_guard<std::mutex> lk(mu_);
  if (divergence_) return;
  Divergence d;
  d.step = step;
  d.kind = kind;
  d.path = path;
  d.detail = detail;
  divergence_ = d;
}

void ReplaySession::beginStep(int64_t step) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->stepBegan(step);
  std::lock_guard<std::mutex> lk(mu_);
  step_.store(step);
  inStepNumber_ = step;
}

int ReplaySession::endStep(int64_t step, double loss) {
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->stepEnding(step);  // delivers its launches
  std::lock_guard<std::mutex> lk(mu_);
  if (step < jumpStep_ || step >= whatIfStep_) {  // fast-forwarded, or changed by --what-if: not checked
    lastStepEnded_ = step;
    inStepNumber_ = INT64_MIN;
    return 0;
  }
  checkLaunchesLocked(step, true);
  lastStepEnded_ = step;
  inStepNumber_ = INT64_MIN;
  bool ok = !divergence_;
  auto lit = losses_.find(step);
  // A step whose end the trace does not hold (cut in it, or past its end) has nothing to be
  // checked against: never counted verified.
  if (lit == losses_.end()) return ok ? 0 : 1;
  if (ok && lit != losses_.end() && !sameBits(lit->second, loss)) {
    Divergence d;
    d.step = step;
    d.kind = static_cast<int>(schema::TensorDigest::Kind::LOSS);
    d.path = "loss";
    d.detail = "loss: recorded " + num(lit->second) + ", replayed " + num(loss);
    divergence_ = d;
    ok = false;
  }
  uint32_t want = digestsPerStep_.count(step) ? digestsPerStep_[step] : 0;
  uint32_t seen = seenPerStep_.count(step) ? seenPerStep_[step] : 0;
  if (ok && seen < want) {
    Divergence d;
    d.step = step;
    d.detail = "step " + std::to_string(step) + " recomputed " + std::to_string(seen) + " of its " +
               std::to_string(want) + " recorded digests (the replayed code took another path)";
    divergence_ = d;
    ok = false;
  }
  if (ok) ++verifiedSteps_;
  return ok ? 0 : 1;
}

const std::vector<uint8_t>& ReplaySession::recordedTensors(int64_t step) {
  std::lock_guard<std::mutex> lk(mu_);
  auto cached = keptEncoded_.find(step);
  if (cached != keptEncoded_.end()) return cached->second;
  std::vector<uint8_t>& out = keptEncoded_[step];
  auto it = kept_.find(step);
  size_t n = it == kept_.end() ? 0 : it->second.size();
  out.push_back('D');
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  for (size_t i = 0; i < n; ++i) {
    const KeptTensor& k = it->second[i];
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(k.key.size() >> (8 * b)));
    out.insert(out.end(), k.key.begin(), k.key.end());
    capnp::MallocMessageBuilder v;
    v.initRoot<schema::Value>().setTensor(k.msg->getRoot<schema::FullTensor>().asReader().getTensor());
    encodeValue(
        v.getRoot<schema::Value>().asReader(),
        [&](const Hash128& h, uint64_t size) { return stream_->readBlob(h, size); }, out);
  }
  return out;
}

std::vector<ReplaySession::StepDigest> ReplaySession::recordedDigests(int64_t step) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<StepDigest> out;
  for (auto it = digests_.lower_bound(DigestKey{step, INT_MIN, "", 0, 0}); it != digests_.end(); ++it) {
    const auto& [s, kind, path, callIndex, output] = it->first;
    if (s != step) break;
    out.push_back(StepDigest{kind, path, callIndex, output, it->second});
  }
  return out;
}

void ReplaySession::fact(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lk(mu_);
  if (key == "warning")
    warnings_.push_back(value);
  else if (!addHookFact(facts_, key, value))
    warnings_.push_back("the Python hook sent a report fact this library does not know: " + key);
}

void ReplaySession::writeReport(const std::string& stopReason) {
  const char* reportEnv = std::getenv("DLRR_REPORT");
  if (!reportEnv || !*reportEnv) return;
  const std::string path = std::string(reportEnv) + reportSuffix_;
  bool stopping = stopReason != "running" && stopReason != "exit";
  if (stopping)
    if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping && inStepNumber_ != INT64_MIN) checkLaunchesLocked(inStepNumber_, false);
  std::string reason = stopReason;
  if (!finalStop_.empty())
    reason = finalStop_;
  else if (reason != "running" && reason != "exit")
    finalStop_ = reason;
  ReplayReport r = facts_;
  r.attached = true;
  r.stop = parseStop(reason);
  r.target = target_.describe();
  r.targetStep = target_.step;
  r.targetWhere = target_.where;
  r.verifiedSteps = verifiedSteps_;
  r.recordedSteps = recordedSteps_;
  r.lastStep = lastStepEnded_;
  if (jumpStep_ >= 0) r.jumpStep = jumpStep_;
  if (divergence_)
    r.divergence = ReplayReport::Divergence{divergence_->step, kindName(divergence_->kind), divergence_->path,
                                            divergence_->detail};
  writeGpuReport(r);
  writeDistReport(r);
  r.warnings = warnings_;
  writeReplayReportFile(path, r);  // under mu_: one writer at a time, the latest figures last
}

}  // namespace dlrr
