#include "recorder/BatchBuilder.h"

namespace dlrr {

void BatchBuilder::begin(uint32_t loader, uint32_t iteration, uint64_t index, bool isTraining, const int64_t* indices,
                         uint64_t nIndices) {
  msg_ = std::make_unique<capnp::MallocMessageBuilder>();
  auto ev = msg_->initRoot<schema::Event>();
  batch_ = ev.initBatch();
  batch_.setLoader(loader);
  batch_.setIteration(iteration);
  batch_.setIndex(index);
  batch_.setIsTraining(isTraining);
  auto idx = batch_.initSampleIndices(static_cast<unsigned>(indices ? nIndices : 0));
  for (uint64_t i = 0; indices && i < nIndices; ++i) idx.set(static_cast<unsigned>(i), indices[i]);
  isSnapshot_ = false;
  window_ = false;
  byReference_ = false;
  stack_.clear();
  rootDone_ = false;
  pendingKey_.clear();
  error_.clear();
  tensorBytes_ = 0;
  newBytes_ = 0;
}

void BatchBuilder::setByReference() {
  if (!msg_ || isSnapshot_) return;
  byReference_ = true;
  batch_.setByReference(true);
  digest_.begin(batch_.getSampleIndices().size());
}

void BatchBuilder::beginSnapshot(int64_t step, bool failure, bool window) {
  msg_ = std::make_unique<capnp::MallocMessageBuilder>();
  snapshot_ = msg_->initRoot<schema::Event>().initSnapshot();
  snapshot_.setStep(step);
  snapshot_.setReason(failure ? schema::Snapshot::Reason::FAILURE : schema::Snapshot::Reason::PERIODIC);
  snapshot_.setWindow(window && !failure);
  isSnapshot_ = true;
  window_ = window && !failure;
  byReference_ = false;
  stack_.clear();
  rootDone_ = false;
  pendingKey_.clear();
  error_.clear();
  tensorBytes_ = 0;
  newBytes_ = 0;
}

bool BatchBuilder::nextSlot(schema::Value::Builder& out) {
  if (!msg_ || !error_.empty()) return false;
  if (stack_.empty()) {
    if (rootDone_) {
      error_ = "value after the batch was complete";
      return false;
    }
    out = isSnapshot_ ? snapshot_.initValue() : batch_.initValue();
    return true;
  }
  Frame& f = stack_.back();
  if (f.isDict) {
    auto e = f.entries[f.next];
    e.setKey(pendingKey_);
    pendingKey_.clear();
    out = e.initValue();
  } else {
    out = f.items[f.next];
  }
  return true;
}

void BatchBuilder::filled() {
  if (stack_.empty()) {
    rootDone_ = true;
    return;
  }
  // A completed child may complete its parents in turn.
  while (!stack_.empty()) {
    Frame& f = stack_.back();
    if (++f.next < f.size) return;
    stack_.pop_back();
  }
  rootDone_ = true;
}

void BatchBuilder::list(uint32_t n) {
  if (byReference_) digest_.container('l', n);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  Frame f;
  f.items = v.initList(n);
  f.size = n;
  if (n == 0) return filled();
  stack_.push_back(f);
}

void BatchBuilder::tuple(uint32_t n) {
  if (byReference_) digest_.container('t', n);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  Frame f;
  f.items = v.initTuple(n);
  f.size = n;
  if (n == 0) return filled();
  stack_.push_back(f);
}

void BatchBuilder::dict(uint32_t n) {
  if (byReference_) digest_.container('d', n);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  Frame f;
  f.isDict = true;
  f.entries = v.initDict(n);
  f.size = n;
  if (n == 0) return filled();
  stack_.push_back(f);
}

void BatchBuilder::key(const char* k) {
  if (byReference_) digest_.key(k ? k : "");
  if (stack_.empty() || !stack_.back().isDict) {
    error_ = "dict key outside a dict";
    return;
  }
  pendingKey_ = k ? k : "";
}

void BatchBuilder::none() {
  if (byReference_) digest_.none();
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setNone();
  filled();
}

void BatchBuilder::boolean(bool b) {
  if (byReference_) digest_.boolean(b);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setBool(b);
  filled();
}

void BatchBuilder::integer(int64_t i) {
  if (byReference_) digest_.integer(i);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setInt(i);
  filled();
}

void BatchBuilder::real(double d) {
  if (byReference_) digest_.real(d);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setFloat(d);
  filled();
}

void BatchBuilder::text(const char* s, uint64_t n) {
  if (byReference_) digest_.text(std::string_view(s ? s : "", s ? n : 0));
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setText(capnp::Text::Reader(s ? s : "", s ? n : 0));
  filled();
}

void BatchBuilder::bytes(const void* p, uint64_t n) {
  if (byReference_) digest_.bytes(p, p ? n : 0);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setBytes(capnp::Data::Reader(static_cast<const kj::byte*>(p), p ? n : 0));
  filled();
}

void BatchBuilder::opaque(const char* typeName) {
  if (byReference_) digest_.opaque(typeName ? typeName : "?");
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  v.setOpaque(typeName ? typeName : "?");
  filled();
}

void BatchBuilder::tensor(const char* dtype, uint32_t elemSize, int ndim, const int64_t* shape, const void* data,
                          uint64_t nbytes, const char* device, bool requiresGrad, const PutBlob& put) {
  if (byReference_) digest_.tensor(dtype ? dtype : "?", ndim > 0 ? ndim : 0, shape, data, data ? nbytes : 0);
  schema::Value::Builder v{nullptr};
  if (!nextSlot(v)) return;
  auto t = v.initTensor();
  t.setDtype(dtype ? dtype : "?");
  auto s = t.initShape(static_cast<unsigned>(ndim > 0 ? ndim : 0));
  for (int i = 0; i < ndim; ++i) s.set(static_cast<unsigned>(i), shape[i]);
  t.setDevice(device ? device : "cpu");
  t.setRequiresGrad(requiresGrad);
  BlobId id = put(data, data ? nbytes : 0, elemSize);
  auto ref = t.initData();
  ref.setHashLo(id.hash.lo);
  ref.setHashHi(id.hash.hi);
  ref.setSize(id.size);
  tensorBytes_ += nbytes;
  if (id.fresh) newBytes_ += nbytes;
  filled();
}

std::unique_ptr<capnp::MallocMessageBuilder> BatchBuilder::finish(std::string& error) {
  if (!msg_) {
    error = "batch end without begin";
    return nullptr;
  }
  if (error_.empty() && !rootDone_) error_ = "batch structure incomplete";
  if (error_.empty() && byReference_) {
    batch_.setDigest(digest_.digest());
    const auto& samples = digest_.samples();
    auto sd = batch_.initSampleDigests(static_cast<unsigned>(samples.size()));
    for (size_t i = 0; i < samples.size(); ++i) sd.set(static_cast<unsigned>(i), samples[i]);
  }
  if (error_.empty() && isSnapshot_) {
    snapshot_.setTensorBytes(tensorBytes_);
    snapshot_.setNewBytes(newBytes_);
  }
  if (!error_.empty()) {
    error = error_;
    msg_.reset();
    return nullptr;
  }
  return std::move(msg_);
}

}  // namespace dlrr
