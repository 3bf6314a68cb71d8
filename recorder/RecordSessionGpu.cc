// RecordSession's entry points for tensors that live on a GPU: digests computed on the device
// by the Python hook (the bytes never reach the host), and failure-ring bytes copied to the
// host only when their step fails. Kept apart from RecordSession.cc so the CPU path stays as
// it is; the failure rule is digest()'s (recordNonFinite): the first non-finite digest of the
// process is the failure.
#include "recorder/FullTensorEvent.h"
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
  recordNonFinite(step, kind, path, callIndex, d, true);
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
      fillFullTensor(e, w, kind, path ? path : "", callIndex, output, dt, shape, ndim, data, nbytes);
    });
    return;
  }
  keepInRing(step, kind, path, callIndex, output, dt, shape, ndim, data, nbytes);
}

}  // namespace dlrr
