#include "recorder/FullTensorEvent.h"

#include <string>

#include "session/TensorDigest.h"

namespace dlrr {

void fillFullTensor(schema::Event::Builder e, StreamWriter& w, int kind, std::string_view path, uint32_t callIndex,
                    uint32_t output, std::string_view dtype, const int64_t* shape, int ndim, const void* data,
                    uint64_t nbytes) {
  if (ndim < 0 || !shape) ndim = 0;
  auto ft = e.initTensor();
  ft.setKind(static_cast<schema::TensorDigest::Kind>(kind));
  ft.setPath(std::string(path));
  ft.setCallIndex(callIndex);
  ft.setOutput(output);
  auto t = ft.initTensor();
  std::string dt(dtype);
  t.setDtype(dt);
  auto s = t.initShape(static_cast<unsigned>(ndim));
  for (int i = 0; i < ndim; ++i) s.set(static_cast<unsigned>(i), shape[i]);
  t.setDevice("cpu");
  BlobId id = w.putBlob(data, nbytes, dtypeElemSize(dt));
  auto r = t.initData();
  r.setHashLo(id.hash.lo);
  r.setHashHi(id.hash.hi);
  r.setSize(id.size);
}

}  // namespace dlrr
