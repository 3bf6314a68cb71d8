#include "format/StreamBatchMap.h"

#include <functional>

#include "format/StreamReader.h"
#include "format/TraceError.h"
#include "format/ValueBlobs.h"

namespace dlrr {

BatchMap batchMapOf(StreamReader& r) {
  BatchMapBuilder b;
  try {
    r.forEachEvent([&](schema::Event::Reader e, const FrameInfo&) {
      // A snapshot whose tensors were dropped for the budget cannot start a data-less replay.
      if (e.isSnapshot() && valueBlobsPresent(r, e.getSnapshot().getValue())) b.snapshot(e.getSnapshot().getStep());
      if (!e.isBatch()) return;
      auto batch = e.getBatch();
      bool present = true;
      std::function<void(schema::Value::Reader, int)> walk = [&](schema::Value::Reader v, int depth) {
        if (depth > 64 || !present) return;
        if (v.isTensor()) {
          auto ref = v.getTensor().getData();
          if (ref.getSize() > 0) present = r.hasBlob(Hash128{ref.getHashLo(), ref.getHashHi()});
        } else if (v.isList()) {
          for (auto c : v.getList()) walk(c, depth + 1);
        } else if (v.isTuple()) {
          for (auto c : v.getTuple()) walk(c, depth + 1);
        } else if (v.isDict()) {
          for (auto c : v.getDict()) walk(c.getValue(), depth + 1);
        }
      };
      if (batch.getByReference()) walk(batch.getValue(), 0);
      b.batch(e.getStep(), batch.getByReference(), present);
    });
  } catch (const TraceError&) {  // best effort: damage ends the map where the readable events end
  }
  return b.build();
}

}  // namespace dlrr
