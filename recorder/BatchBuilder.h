#pragma once
// Builds a schema::Value depth-first from the flat call sequence of the C API
// (dlrr_val_list(2), dlrr_val_tensor(...), dlrr_val_int(...)). Containers announce their
// child count, so the Cap'n Proto lists can be allocated up front.
#include <capnp/message.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/StreamWriter.h"
#include "schema/dlrr.capnp.h"
#include "session/BatchDigest.h"

namespace dlrr {

class BatchBuilder {
 public:
  using PutBlob = std::function<BlobId(const void*, size_t, unsigned)>;

  void begin(uint32_t loader, uint32_t iteration, uint64_t index, bool isTraining, const int64_t* indices,
             uint64_t nIndices);
  // The batch begun is recorded by reference (docs/recording.md): its digest is computed as
  // its value is built and set in the event; where its blobs go is the caller's `put`.
  void setByReference();
  bool byReference() const { return byReference_; }
  // A Snapshot event instead of a Batch: the value that follows is the snapshot's tree.
  // `window`: held with the batch window (Snapshot.window).
  void beginSnapshot(int64_t step, bool failure, bool window = false);
  bool isSnapshot() const { return isSnapshot_; }
  bool heldSnapshot() const { return isSnapshot_ && window_; }
  bool active() const { return msg_ != nullptr; }
  void list(uint32_t n);
  void tuple(uint32_t n);
  void dict(uint32_t n);
  void key(const char* k);
  void none();
  void boolean(bool v);
  void integer(int64_t v);
  void real(double v);
  void text(const char* s, uint64_t n);
  void bytes(const void* p, uint64_t n);
  void opaque(const char* typeName);
  void tensor(const char* dtype, uint32_t elemSize, int ndim, const int64_t* shape, const void* data, uint64_t nbytes,
              const char* device, bool requiresGrad, const PutBlob& put);
  // Hands over the finished Event message (nullptr when the structure was incomplete or
  // malformed; `error` then says why).
  std::unique_ptr<capnp::MallocMessageBuilder> finish(std::string& error);
  uint64_t tensorBytes() const { return tensorBytes_; }
  uint64_t newBytes() const { return newBytes_; }  // tensor bytes the stream did not hold yet

 private:
  struct Frame {
    bool isDict = false;
    capnp::List<schema::Value>::Builder items{nullptr};
    capnp::List<schema::DictEntry>::Builder entries{nullptr};
    uint32_t size = 0;
    uint32_t next = 0;
  };
  // The next slot to fill, or nullopt when the structure is already complete / malformed.
  bool nextSlot(schema::Value::Builder& out);
  void filled();

  std::unique_ptr<capnp::MallocMessageBuilder> msg_;
  schema::Batch::Builder batch_{nullptr};
  schema::Snapshot::Builder snapshot_{nullptr};
  bool isSnapshot_ = false;
  bool window_ = false;
  bool byReference_ = false;
  BatchDigest digest_;
  std::vector<Frame> stack_;
  bool rootDone_ = false;
  std::string pendingKey_;
  std::string error_;
  uint64_t tensorBytes_ = 0;
  uint64_t newBytes_ = 0;
};

}  // namespace dlrr
