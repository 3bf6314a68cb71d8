// RecordSession's entry points for torch.distributed collectives (docs/distributed.md). The
// Python hook sees each collective twice: when the rank issues it (inputs) and when its work
// has completed (results; for async_op=True on whichever thread completes the future). The
// seq number taken at issue time is what replay serves by, so completion order never matters.
#include <string>

#include "recorder/RecordSession.h"

namespace dlrr {
namespace {

void setTensor(schema::CollectiveTensor::Builder b, const std::string& dtype, const std::vector<int64_t>& shape,
               const DigestResult& d, const BlobId& blob) {
  b.setDtype(dtype);
  auto s = b.initShape(static_cast<unsigned>(shape.size()));
  for (size_t i = 0; i < shape.size(); ++i) s.set(static_cast<unsigned>(i), shape[i]);
  b.setHash(d.hash);
  b.setNanCount(d.nanCount);
  b.setInfCount(d.infCount);
  if (blob.size) {
    auto r = b.initData();
    r.setHashLo(blob.hash.lo);
    r.setHashHi(blob.hash.hi);
    r.setSize(blob.size);
  }
}

}  // namespace

uint64_t RecordSession::collectiveBegin(const char* op, const char* group, const char* reduceOp, int peer, int bucket,
                                        bool asyncOp) {
  std::lock_guard<std::mutex> lk(collMu_);
  uint64_t seq = nextCollective_++;
  if (!active()) return seq;
  if (collectives_.size() >= kMaxPendingCollectives) collectives_.erase(collectives_.begin());  // never completed
  PendingCollective& c = collectives_[seq];
  c.op = op ? op : "";
  c.group = group ? group : "";
  c.reduceOp = reduceOp ? reduceOp : "";
  c.peer = peer;
  c.bucket = bucket;
  c.asyncOp = asyncOp;
  c.step = step_.load();
  return seq;
}

int RecordSession::collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape,
                                    const void* data, uint64_t nbytes) {
  if (!active()) return 0;
  if (ndim < 0 || ndim > 64 || (ndim > 0 && !shape)) ndim = 0;
  CollectiveTensorRec t;
  t.dtype = dtype ? dtype : "";
  t.shape.assign(shape, shape + ndim);
  t.digest = computeDigest(t.dtype, data, data ? nbytes : 0);
  size_t index;
  std::string op;
  int64_t step;
  {
    std::lock_guard<std::mutex> lk(collMu_);
    auto it = collectives_.find(seq);
    if (it == collectives_.end()) return 0;
    index = result ? it->second.results.size() : it->second.inputs.size();
    op = it->second.op;
    step = it->second.step;
  }
  if (result && data) {
    if (!cfg_.keepCollectives && keepCollectiveInWindow(step, t.dtype, data, nbytes, t.blob)) {
      // --window: the bytes are the window's (written with it at a failure), the event refers to them.
    } else if (cfg_.keepCollectives) {
      // Bytes are hashed and queued (content-addressed: a result equal to an earlier one is
      // stored once); the writer thread compresses them.
      StreamWriter* w;
      {
        std::lock_guard<std::mutex> lk(mu_);
        w = writer();
      }
      if (w) t.blob = w->putBlob(data, nbytes, dtypeElemSize(t.dtype));
    } else {
      // Kept for the last steps only, written if this process fails (dltrace dump can show
      // what the collective returned right before the failure).
      std::string path = "collective/" + std::to_string(seq) + "/" + op;
      keepTensor(static_cast<int>(schema::TensorDigest::Kind::OTHER), path.c_str(), 0, static_cast<uint32_t>(index),
                 t.dtype.c_str(), ndim, shape, data, nbytes);
    }
  }
  std::lock_guard<std::mutex> lk(collMu_);
  auto it = collectives_.find(seq);
  if (it == collectives_.end()) return 0;
  (result ? it->second.results : it->second.inputs).push_back(std::move(t));
  return 0;
}

bool RecordSession::keepCollectiveInWindow(int64_t step, const std::string& dtype, const void* data, uint64_t nbytes,
                                           BlobId& blob) {
  if (!window_) return false;
  Hash128 h = hash128(data, nbytes);
  unsigned elemSize = dtypeElemSize(dtype);
  {
    std::lock_guard<std::mutex> lk(windowMu_);
    if (!windowFlushed_.load()) {
      if (!window_->keepCollective(step, h, data, nbytes, elemSize)) return false;
      blob = BlobId{h, nbytes};
      return true;
    }
  }
  // The window was written at the failure: the failing step goes on (DDP's all-reduce after
  // the forward's NaN), and a replay of the window replays it, so its results are written now.
  int64_t failing;
  if (!firstFailureStep(failing) || step != failing) return false;
  StreamWriter* w;
  {
    std::lock_guard<std::mutex> lk(mu_);
    w = writer();
  }
  if (!w) return false;
  blob = w->putBlob(data, nbytes, elemSize);
  return true;
}

void RecordSession::collectiveEnd(uint64_t seq, const char* status) {
  PendingCollective c;
  {
    std::lock_guard<std::mutex> lk(collMu_);
    auto it = collectives_.find(seq);
    if (it == collectives_.end()) return;
    c = std::move(it->second);
    collectives_.erase(it);
  }
  if (!active()) return;
  appendEvent(c.step, [&](schema::Event::Builder e, StreamWriter&) {
    auto col = e.initCollective();
    col.setSeq(seq);
    col.setOp(c.op);
    col.setGroup(c.group);
    col.setReduceOp(c.reduceOp);
    col.setPeer(c.peer);
    col.setBucket(c.bucket);
    col.setAsyncOp(c.asyncOp);
    col.setStatus(status ? status : "");
    auto in = col.initInputs(static_cast<unsigned>(c.inputs.size()));
    for (size_t i = 0; i < c.inputs.size(); ++i)
      setTensor(in[static_cast<unsigned>(i)], c.inputs[i].dtype, c.inputs[i].shape, c.inputs[i].digest,
                c.inputs[i].blob);
    auto out = col.initResults(static_cast<unsigned>(c.results.size()));
    for (size_t i = 0; i < c.results.size(); ++i)
      setTensor(out[static_cast<unsigned>(i)], c.results[i].dtype, c.results[i].shape, c.results[i].digest,
                c.results[i].blob);
  });
}

void RecordSession::collectiveWait(const CollectiveWaitRec& w) {
  if (!active()) return;
  auto text = [](const char* t) { return t ? t : ""; };
  appendEvent(step_.load(), [&](schema::Event::Builder e, StreamWriter&) {
    auto c = e.initCollectiveWait();
    using R = schema::CollectiveWait::Reason;
    c.setReason(w.reason == 1 ? R::STALLED : w.reason == 2 ? R::TERMINATED : R::HANG);
    c.setWaiting(w.waiting);
    c.setSeq(w.seq);
    c.setOp(text(w.op));
    c.setGroup(text(w.group));
    c.setIssuedStep(w.issuedStep);
    c.setCompletedSeq(w.completedSeq);
    c.setCompletedOp(text(w.completedOp));
    c.setCompletedStep(w.completedStep);
    c.setWaitedMs(w.waitedMs);
    c.setStacks(text(w.stacks));
  });
  commitNow();  // the launcher may kill this rank at any moment now
}

}  // namespace dlrr
