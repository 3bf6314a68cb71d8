// ReplaySession's side of torch.distributed collectives (docs/distributed.md). Collectives are
// numbered in issue order, as in record; each is checked against the recording (same op, same
// bytes sent) and, replaying one rank alone, its recorded results are served so the rank runs
// without its peers. A mismatch is a divergence like a differing digest: replay never claims
// success past it.
#include <iomanip>
#include <sstream>

#include "replayer/ReplayReport.h"
#include "replayer/ReplaySession.h"

namespace dlrr {
namespace {

std::string hexOf(uint64_t v) {
  std::ostringstream o;
  o << "0x" << std::hex << std::setw(16) << std::setfill('0') << v;
  return o.str();
}

std::string shapeText(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

}  // namespace

void ReplaySession::loadCollective(schema::Event::Reader e) {
  auto c = e.getCollective();
  RecordedCollective rc;
  rc.op = c.getOp().cStr();
  rc.group = c.getGroup().cStr();
  rc.reduceOp = c.getReduceOp().cStr();
  rc.status = c.getStatus().cStr();
  rc.peer = c.getPeer();
  rc.bucket = c.getBucket();
  rc.step = e.getStep();
  auto fill = [](capnp::List<schema::CollectiveTensor>::Reader in, std::vector<RecordedCollectiveTensor>& out) {
    for (auto t : in) {
      RecordedCollectiveTensor r;
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
  };
  fill(c.getInputs(), rc.inputs);
  fill(c.getResults(), rc.results);
  collectives_[c.getSeq()] = std::move(rc);
}

void ReplaySession::collectiveDivergenceLocked(uint64_t seq, int64_t step, const std::string& what) {
  if (divergence_) return;
  Divergence d;
  d.step = step;
  d.kind = static_cast<int>(schema::TensorDigest::Kind::OTHER);  // a collective: no digest kind of its own
  d.path = "collective #" + std::to_string(seq);
  d.detail = what;
  divergence_ = d;
}

uint64_t ReplaySession::beginCollective(const std::string& op) {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t step = step_.load();
  if (jumpStep_ > 0 && step < jumpStep_) return kFastForwardedCollective;  // before the jump: nothing served or checked
  if (!collectivesResynced_ && jumpStep_ > 0) {
    // A jump: the fast-forwarded steps issued what their stand-ins led to (a DDP whose forward
    // was skipped reduces nothing), so numbering resumes at the recording's first collective
    // of the jump step.
    collectivesResynced_ = true;
    for (const auto& [recordedSeq, rc] : collectives_)
      if (rc.step >= jumpStep_) {
        nextCollective_ = recordedSeq;
        break;
      }
  }
  uint64_t seq = nextCollective_++;
  ++collectivesIssued_;
  auto it = collectives_.find(seq);
  if (it == collectives_.end()) {
    collectiveDivergenceLocked(seq, step,
                               "collective #" + std::to_string(seq) + " (" + op +
                                   ") was never issued in the recording (" + std::to_string(collectives_.size()) +
                                   " recorded)");
  } else if (it->second.op != op) {
    collectiveDivergenceLocked(seq, step,
                               "collective #" + std::to_string(seq) + ": the recording issued " + it->second.op +
                                   " (step " + std::to_string(it->second.step) + "), the replay " + op);
  }
  return seq;
}

int ReplaySession::checkCollectiveTensor(uint64_t seq, bool result, const std::string& dtype,
                                         const std::vector<int64_t>& shape, const DigestResult& got) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = collectives_.find(seq);
  if (it == collectives_.end()) return 2;
  auto& seen = collectiveSeen_[seq];
  uint32_t index = result ? seen.second++ : seen.first++;
  const auto& list = result ? it->second.results : it->second.inputs;
  const RecordedCollective& rc = it->second;
  std::string label = "collective #" + std::to_string(seq) + " " + rc.op +
                      (rc.bucket >= 0 ? " bucket " + std::to_string(rc.bucket) : "") + " (step " +
                      std::to_string(rc.step) + "): " + (result ? "result " : "input ") + std::to_string(index);
  if (index >= list.size()) {
    collectiveDivergenceLocked(seq, step_.load(),
                               label + " was not in the recording (" + std::to_string(list.size()) + " recorded)");
    return 1;
  }
  const RecordedCollectiveTensor& want = list[index];
  if (want.hash == got.hash && want.dtype == dtype && want.shape == shape) {
    ++collectiveTensorsVerified_;
    return 0;
  }
  std::ostringstream o;
  o << label << (result ? " (what this rank received)" : " (what this rank sent)") << " differs: recorded "
    << want.dtype << shapeText(want.shape) << " hash " << hexOf(want.hash) << " NaN " << want.nanCount << " Inf "
    << want.infCount << "; replayed " << dtype << shapeText(shape) << " hash " << hexOf(got.hash) << " NaN "
    << got.nanCount << " Inf " << got.infCount;
  collectiveDivergenceLocked(seq, step_.load(), o.str());
  return 1;
}

uint64_t ReplaySession::collectiveBegin(const char* op, const char* /*group*/, const char* /*reduceOp*/, int /*peer*/,
                                        int /*bucket*/, bool /*asyncOp*/) {
  return beginCollective(op ? op : "");
}

int ReplaySession::collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape,
                                    const void* data, uint64_t nbytes) {
  DigestResult d = computeDigest(dtype ? dtype : "", data, data ? nbytes : 0);
  return checkCollectiveTensor(seq, result, dtype ? dtype : "", std::vector<int64_t>(shape, shape + ndim), d);
}

int ReplaySession::collectiveResult(uint64_t seq, uint32_t index, std::vector<uint8_t>& out) {
  Hash128 blob;
  uint64_t size;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = collectives_.find(seq);
    if (it == collectives_.end() || index >= it->second.results.size()) return -1;
    const RecordedCollectiveTensor& r = it->second.results[index];
    if (r.blobSize == 0) return 0;
    blob = r.blob;
    size = r.blobSize;
  }
  if (!stream_->hasBlob(blob)) return 0;  // kept with a --window the job outlived: digest only
  out = stream_->readBlob(blob, size);    // checks the content hash
  std::lock_guard<std::mutex> lk(mu_);
  ++collectiveResultsServed_;
  return 1;
}

int ReplaySession::recordedRank() const { return stream_ ? stream_->header().getRank() : -1; }

void ReplaySession::writeDistReport(ReplayReport& r) {
  if (collectives_.empty() && collectivesIssued_ == 0) return;
  // A jump replay issues the collectives of the steps from the jump on.
  uint64_t recorded = 0;
  for (const auto& [seq, rc] : collectives_) recorded += jumpStep_ <= 0 || rc.step >= jumpStep_ ? 1 : 0;
  r.dist = ReplayReport::Dist{recordedRank(), collectivesIssued_, recorded, collectiveTensorsVerified_,
                              collectiveResultsServed_};
}

}  // namespace dlrr
