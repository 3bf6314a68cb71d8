// RecordSession's entry points for tensors that live on a GPU: digests computed on the device
// by the Python hook (the bytes never reach the host), and failure-ring bytes copied to the
// host only when their step fails. Kept apart from RecordSession.cc so the CPU path stays as
// it is; the failure rule is the same as digest()'s: the first non-finite digest of the
// process is the failure.
#include <sstream>

#include "recorder/RecordSession.h"

namespace dlrr {
namespace {

void setShape(capnp::List<int64_t>::Builder s, int ndim, const int64_t* shape) {
  for (int i = 0; i < ndim; ++i) s.set(static_cast<unsigned>(i), shape[i]);
}

}  // namespace

int RecordSession::digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                                int ndim, const int64_t* shape, int algorithm, const DigestResult& d) {
  if (!active()) return -1;
  if (ndim < 0 || (ndim > 0 && !shape)) ndim = 0;
  std::string dt = dtype ? dtype : "";
  std::string p = path ? path : "";
  int64_t step = step_.load();
  stepDigests_.fetch_add(1, std::memory_order_relaxed);
  appendEvent(step, [&](schema::Event::Builder e, StreamWriter&) {
    auto g = e.initDigest();
    g.setKind(static_cast<schema::TensorDigest::Kind>(kind));
    g.setPath(p);
    g.setCallIndex(callIndex);
    g.setOutput(output);
    g.setDtype(dt);
    setShape(g.initShape(static_cast<unsigned>(ndim)), ndim, shape);
    g.setHash(d.hash);
    g.setNanCount(d.nanCount);
    g.setInfCount(d.infCount);
    g.setMin(d.min);
    g.setMax(d.max);
    g.setAlgorithm(static_cast<schema::TensorDigest::Algorithm>(algorithm));
  });
  uint64_t bad = d.nanCount + d.infCount;
  if (!bad) return 0;
  stepNonFinite_.fetch_add(bad, std::memory_order_relaxed);
  bool expected = false;
  if (!haveFailure_.compare_exchange_strong(expected, true)) return 0;
  failureStep_.store(step);
  // Same wording as digest() (RecordSession.cc).
  static const char* kKindNames[] = {"output of", "gradient of", "parameter", "loss", "batch", "tensor", "input of"};
  const char* kn = kind >= 0 && kind <= 6 ? kKindNames[kind] : "tensor";
  std::string shown = p.empty() ? std::string("<root>") : p;
  std::string where = kind == 3 ? "loss" : kind == 1 ? "grad:" + p : kind == 2 ? "param:" + p : shown;
  std::ostringstream msg;
  msg << d.nanCount << " NaN, " << d.infCount << " Inf in " << kn << (kind == 3 ? "" : " " + shown);
  if (kind == 0 && callIndex) msg << " (call " << callIndex << ")";
  std::string text = msg.str();
  appendEvent(step, [&](schema::Event::Builder e, StreamWriter& w) {
    auto f = e.initFailure();
    f.setKind(schema::Failure::Kind::NONFINITE);
    f.setStep(step);
    f.setWhere(where);
    f.setMessage(text);
    f.setCallIndex(callIndex);
    f.setDigestKind(static_cast<schema::TensorDigest::Kind>(kind));
    flushRing(w);
  });
  if (StepObserver* o = observer_.load(std::memory_order_acquire)) o->flush();
  StreamWriter* w;
  {
    std::lock_guard<std::mutex> lk(mu_);
    w = writer_.get();
  }
  if (w) w->commit(true);
  return 0;
}

void RecordSession::keepTensor(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                               int ndim, const int64_t* shape, const void* data, uint64_t nbytes) {
  if (!active() || !data) return;
  if (ndim < 0 || (ndim > 0 && !shape)) ndim = 0;
  std::string dt = dtype ? dtype : "";
  int64_t step = step_.load();
  if (cfg_.capture == CaptureLevel::Full) {
    appendEvent(step, [&](schema::Event::Builder e, StreamWriter& w) {
      auto ft = e.initTensor();
      ft.setKind(static_cast<schema::TensorDigest::Kind>(kind));
      ft.setPath(path ? path : "");
      ft.setCallIndex(callIndex);
      ft.setOutput(output);
      auto t = ft.initTensor();
      t.setDtype(dt);
      setShape(t.initShape(static_cast<unsigned>(ndim)), ndim, shape);
      t.setDevice("cpu");
      BlobId id = w.putBlob(data, nbytes, dtypeElemSize(dt));
      auto r = t.initData();
      r.setHashLo(id.hash.lo);
      r.setHashHi(id.hash.hi);
      r.setSize(id.size);
    });
    return;
  }
  if (cfg_.ringSteps <= 0) return;
  std::lock_guard<std::mutex> lk(ringMu_);
  if (ringBytes_ + nbytes > kRingCapBytes) return;
  const auto* b = static_cast<const uint8_t*>(data);
  Kept k{kind, path ? path : "", callIndex, output, dt, std::vector<int64_t>(shape, shape + ndim),
         std::vector<uint8_t>(b, b + nbytes), step};
  ringBytes_ += nbytes;
  ring_[step].push_back(std::move(k));
}

}  // namespace dlrr
