#include "replayer/RecordingIndex.h"

#include <capnp/message.h>

#include <algorithm>
#include <functional>
#include <string_view>

#include "format/EntropyFlags.h"
#include "format/TraceError.h"
#include "format/ValueBlobs.h"
#include "replayer/BatchEncoding.h"
#include "schema/dlrr.capnp.h"

namespace dlrr {
namespace {

// Every tensor of a value, depth first.
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

RecordedFailure failureOf(schema::Failure::Reader f) {
  RecordedFailure r;
  r.kind = static_cast<int>(f.getKind());
  r.step = f.getStep();
  r.where = f.getWhere().cStr();
  r.digestKind = static_cast<int>(f.getDigestKind());
  r.callIndex = f.getCallIndex();
  if (f.getKind() == schema::Failure::Kind::SIGNAL) r.signal = f.getSignal();
  if (f.getKind() == schema::Failure::Kind::EXCEPTION) {
    r.exceptionType = f.getExceptionType().cStr();
    for (auto fr : f.getTraceback())
      if (std::string_view(fr.getFile().cStr()).find("/torch/utils/data/") != std::string_view::npos)
        r.whileLoading = true;
  }
  return r;
}

void fillCollectiveTensors(capnp::List<schema::CollectiveTensor>::Reader in,
                           std::vector<RecordingIndex::CollectiveTensor>& out) {
  for (auto t : in) {
    RecordingIndex::CollectiveTensor r;
    r.dtype = t.getDtype().cStr();
    for (auto d : t.getShape()) r.shape.push_back(d);
    r.hash = t.getHash();
    r.nanCount = t.getNanCount();
    r.infCount = t.getInfCount();
    if (t.hasData()) {
      auto d = t.getData();
      r.blob = Hash128{d.getHashLo(), d.getHashHi()};
      r.blobSize = d.getSize();
    }
    out.push_back(std::move(r));
  }
}

KernelLaunch launchOf(schema::CudaLaunch::Reader c) {
  KernelLaunch l;
  l.seq = c.getSeq();
  l.nameId = c.getNameId();
  l.grid[0] = c.getGridX(), l.grid[1] = c.getGridY(), l.grid[2] = c.getGridZ();
  l.block[0] = c.getBlockX(), l.block[1] = c.getBlockY(), l.block[2] = c.getBlockZ();
  l.sharedMem = c.getSharedMem();
  l.device = c.getDevice();
  l.flags = c.getFlags();
  // Older traces (no flags): grid/block were set whenever known.
  if (!l.flags && (l.grid[0] || l.block[0])) l.flags = 8;
  return l;
}

}  // namespace

const char* digestKindName(int k) {
  static const char* names[] = {"module output", "gradient", "parameter", "loss", "batch", "tensor", "module input"};
  constexpr int n = sizeof(names) / sizeof(names[0]);
  static_assert(n == static_cast<int>(schema::TensorDigest::Kind::MODULE_INPUT) + 1, "a name per TensorDigest.Kind");
  return k >= 0 && k < n ? names[k] : "tensor";
}

RecordingIndex::RecordingIndex(StreamReader& stream, int64_t digestsFrom) : stream_(stream) {
  std::vector<RngRef> pendingRng;
  std::map<uint32_t, std::string> kernelNames;
  std::map<BatchKey, std::vector<Hash128>> refBlobs;  // a batch by reference: its tensors' blobs
  bool inStep = false;                                // digests between a StepBegin and its StepEnd are the step's own
  // RNG states follow the StepBegin they belong to (optimizer-driven steps) and precede the
  // Batch they were taken at (DataLoader deliveries): keep them for both.
  int64_t openStep = -1;
  bool stepWithoutBatch = false;
  uint64_t frame = UINT64_MAX;
  uint32_t ordinal = 0;
  stream_.forEachEvent([&](schema::Event::Reader e, const FrameInfo& f) {
    if (f.offset != frame) frame = f.offset, ordinal = 0;
    EventRef here{frame, ordinal++};
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
        RngRef rec{static_cast<int>(r.getKind()), static_cast<int>(r.getDevice()),
                   Hash128{ref.getHashLo(), ref.getHashHi()}, ref.getSize()};
        if (r.getAtFork()) {  // not a step's nor a batch's
          forkRng_.push_back(rec);
          break;
        }
        if (stepWithoutBatch) stepRng_[openStep].push_back(rec);
        pendingRng.push_back(rec);
        break;
      }
      case schema::Event::BATCH: {
        auto b = e.getBatch();
        Batch rec;
        rec.event = here;
        rec.training = b.getIsTraining();
        rec.eventStep = e.getStep();
        rec.byReference = b.getByReference();
        rec.digest = b.getDigest();
        for (auto d : b.getSampleDigests()) rec.sampleDigests.push_back(d);
        for (auto i : b.getSampleIndices()) rec.sampleIndices.push_back(i);
        BatchKey key{b.getLoader(), b.getIndex()};
        if (rec.byReference) {
          auto& blobs = refBlobs[key];
          blobs.clear();
          forEachTensor(b.getValue(), [&](schema::TensorRef::Reader t) {
            auto ref = t.getData();
            if (ref.getSize() > 0) blobs.push_back(Hash128{ref.getHashLo(), ref.getHashHi()});
          });
        }
        rec.rng = std::move(pendingRng);
        pendingRng.clear();
        stepWithoutBatch = false;
        batches_[key] = std::move(rec);
        break;
      }
      case schema::Event::SNAPSHOT: {
        int64_t step = e.getSnapshot().getStep();
        // Periodic snapshots are taken at the step's start, a failure one mid-step: prefer periodic.
        if (!snapshots_.count(step) || e.getSnapshot().getReason() == schema::Snapshot::Reason::PERIODIC)
          snapshots_[step] = here;
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
        if (e.getStep() < digestsFrom) break;  // a fast-forwarded step: never compared
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
        kept_[e.getStep()].push_back(KeptTensor{std::string(digestKindName(static_cast<int>(ft.getKind()))) + ":" +
                                                    ft.getPath().cStr() + "#" + std::to_string(ft.getCallIndex()) +
                                                    "." + std::to_string(ft.getOutput()),
                                                here});
        break;
      }
      case schema::Event::INTERNED_STRING:
        kernelNames[e.getInternedString().getId()] = e.getInternedString().getText().cStr();
        break;
      case schema::Event::CUDA_LAUNCH:
        launches_[e.getStep()].push_back(launchOf(e.getCudaLaunch()));
        break;
      case schema::Event::COLLECTIVE: {
        auto c = e.getCollective();
        Collective rc;
        rc.op = c.getOp().cStr();
        rc.group = c.getGroup().cStr();
        rc.reduceOp = c.getReduceOp().cStr();
        rc.status = c.getStatus().cStr();
        rc.peer = c.getPeer();
        rc.bucket = c.getBucket();
        rc.step = e.getStep();
        fillCollectiveTensors(c.getInputs(), rc.inputs);
        fillCollectiveTensors(c.getResults(), rc.results);
        collectives_[c.getSeq()] = std::move(rc);
        break;
      }
      case schema::Event::RUNTIME_INFO:
        for (auto kv : e.getRuntimeInfo().getItems()) runtime_[kv.getKey().cStr()] = kv.getValue().cStr();
        break;
      case schema::Event::FAILURE: {
        auto f = e.getFailure();
        if (!firstFailure_) firstFailure_ = failureOf(f);
        if (!firstNonfinite_ && f.getKind() == schema::Failure::Kind::NONFINITE) firstNonfinite_ = failureOf(f);
        if (!firstCrash_ && f.getKind() != schema::Failure::Kind::NONFINITE) firstCrash_ = failureOf(f);
        break;
      }
      default:
        break;
    }
  });
  for (auto& [step, launches] : launches_)
    for (auto& l : launches) {
      auto it = kernelNames.find(l.nameId);
      l.name = it == kernelNames.end() ? "<name " + std::to_string(l.nameId) + " missing>" : it->second;
    }
  // A batch by reference: whether the window put all its bytes in the stream (at any time
  // after the event, hence checked once the whole stream is read).
  for (const auto& [key, blobs] : refBlobs) {
    Batch& b = batches_[key];
    for (const Hash128& h : blobs) b.bytesInTrace = b.bytesInTrace && stream_.hasBlob(h);
  }
}

const RecordingIndex::Batch* RecordingIndex::batch(uint32_t loader, uint64_t index) const {
  auto it = batches_.find({loader, index});
  return it == batches_.end() ? nullptr : &it->second;
}

int64_t RecordingIndex::iteratorLength(uint32_t loader, uint32_t iteration) const {
  auto it = iteratorLengths_.find({loader, iteration});
  return it == iteratorLengths_.end() ? -1 : it->second;
}

const std::vector<RecordingIndex::RngRef>* RecordingIndex::rngAtStep(int64_t step) const {
  auto it = stepRng_.find(step);
  return it == stepRng_.end() ? nullptr : &it->second;
}

const RecordedDigest* RecordingIndex::digest(const DigestKey& k) const {
  auto it = digests_.find(k);
  return it == digests_.end() ? nullptr : &it->second;
}

uint32_t RecordingIndex::digestsInStep(int64_t step) const {
  auto it = digestsPerStep_.find(step);
  return it == digestsPerStep_.end() ? 0 : it->second;
}

std::optional<double> RecordingIndex::loss(int64_t step) const {
  auto it = losses_.find(step);
  if (it == losses_.end()) return std::nullopt;
  return it->second;
}

const char* RecordingIndex::runtimeInfo(const std::string& key) const {
  auto it = runtime_.find(key);
  return it == runtime_.end() ? nullptr : it->second.c_str();
}

const std::vector<KernelLaunch>* RecordingIndex::launches(int64_t step) const {
  auto it = launches_.find(step);
  return it == launches_.end() ? nullptr : &it->second;
}

int RecordingIndex::rank() const { return stream_.header().getRank(); }

template <typename Fn>
void RecordingIndex::withEvent(EventRef r, Fn&& fn) const {
  // The caller holds readMu_.
  capnp::MallocMessageBuilder copy;
  bool found = false;
  uint32_t n = 0;
  stream_.forEachEventUntil(
      [&](schema::Event::Reader e, const FrameInfo& f) {
        if (f.offset != r.frame) return false;
        if (n++ != r.ordinal) return true;
        copy.setRoot(e);
        found = true;
        return false;
      },
      r.frame);
  if (!found) throw TraceError(ErrorKind::Corrupt, stream_.name() + ": an event read before is no longer in its frame");
  fn(copy.getRoot<schema::Event>().asReader());
}

std::vector<uint8_t> RecordingIndex::encodeBatch(const Batch& b, bool zerosForMissing) const {
  std::lock_guard<std::mutex> lk(readMu_);
  std::vector<uint8_t> out;
  withEvent(b.event, [&](schema::Event::Reader e) {
    encodeValue(
        e.getBatch().getValue(),
        [&](const Hash128& h, uint64_t size) {
          return !zerosForMissing || stream_.hasBlob(h) ? stream_.readBlob(h, size) : std::vector<uint8_t>(size, 0);
        },
        out);
  });
  return out;
}

std::vector<uint8_t> RecordingIndex::encodeSnapshot(int64_t step) const {
  auto it = snapshots_.find(step);
  if (it == snapshots_.end()) return {};
  std::lock_guard<std::mutex> lk(readMu_);
  std::vector<uint8_t> out;
  withEvent(it->second, [&](schema::Event::Reader e) {
    encodeValue(
        e.getSnapshot().getValue(), [&](const Hash128& h, uint64_t size) { return stream_.readBlob(h, size); }, out);
  });
  return out;
}

bool RecordingIndex::snapshotComplete(int64_t step) const {
  auto it = snapshots_.find(step);
  if (it == snapshots_.end()) return false;
  std::lock_guard<std::mutex> lk(readMu_);
  bool complete = false;
  withEvent(it->second,
            [&](schema::Event::Reader e) { complete = valueBlobsPresent(stream_, e.getSnapshot().getValue()); });
  return complete;
}

std::vector<uint8_t> RecordingIndex::encodeKeptTensors(int64_t step) const {
  auto it = kept_.find(step);
  size_t n = it == kept_.end() ? 0 : it->second.size();
  std::vector<uint8_t> out;
  out.push_back('D');
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  std::lock_guard<std::mutex> lk(readMu_);
  for (size_t i = 0; i < n; ++i) {
    const KeptTensor& k = it->second[i];
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(k.key.size() >> (8 * b)));
    out.insert(out.end(), k.key.begin(), k.key.end());
    withEvent(k.event, [&](schema::Event::Reader e) {
      capnp::MallocMessageBuilder v;
      v.initRoot<schema::Value>().setTensor(e.getTensor().getTensor());
      encodeValue(
          v.getRoot<schema::Value>().asReader(),
          [&](const Hash128& h, uint64_t size) { return stream_.readBlob(h, size); }, out);
    });
  }
  return out;
}

std::vector<uint8_t> RecordingIndex::readBlob(const Hash128& h, uint64_t size) const {
  std::lock_guard<std::mutex> lk(readMu_);
  return stream_.readBlob(h, size);  // checks the content hash
}

bool RecordingIndex::hasBlob(const Hash128& h) const {
  std::lock_guard<std::mutex> lk(readMu_);
  return stream_.hasBlob(h);
}

}  // namespace dlrr
