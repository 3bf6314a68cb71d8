#include "recorder/FailureRing.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>

#include "recorder/OwnMemory.h"
#include "session/TensorDigest.h"

namespace dlrr {

FailureRing::Keep FailureRing::keep(int64_t step, int kind, std::string_view path, uint32_t callIndex, uint32_t output,
                                    std::string_view dtype, const int64_t* shape, int ndim, const void* data,
                                    uint64_t nbytes) {
  if (!data) return Keep::Dropped;
  return keepFilled(step, kind, path, callIndex, output, dtype, shape, ndim, nbytes, [&](uint8_t* dst) {
    if (nbytes) std::memcpy(dst, data, nbytes);
  });
}

namespace {
// What an entry would write: its copy, or the borrowed bytes.
uint64_t sizeOf(const KeptTensor& k) { return k.borrowed ? k.borrowedBytes : k.bytes.size(); }
}  // namespace

FailureRing::Keep FailureRing::keepBorrowed(int64_t step, int kind, std::string_view path, uint32_t callIndex,
                                            uint32_t output, std::string_view dtype, const int64_t* shape, int ndim,
                                            const void* data, uint64_t nbytes, uint64_t hash) {
  if (steps_ <= 0 || !data) return Keep::Dropped;
  std::lock_guard<std::mutex> lk(mu_);
  // A step already evicted (a thread that read the step before it ended): never kept, and its
  // owner may already have let go of it.
  if (!failed_ && step < floor_) return Keep::Dropped;
  Keep verdict = Keep::Dropped;
  KeptTensor* k = reserveLocked(step, kind, path, callIndex, output, dtype, shape, ndim, nbytes, verdict, true);
  if (k) {
    k->borrowed = data;
    k->borrowedBytes = nbytes;
    k->hookHash = hash;
  }
  return verdict;
}

int64_t FailureRing::borrowFloor() const {
  std::lock_guard<std::mutex> lk(mu_);
  return floor_;
}

KeptTensor* FailureRing::reserveLocked(int64_t step, int kind, std::string_view path, uint32_t callIndex,
                                       uint32_t output, std::string_view dtype, const int64_t* shape, int ndim,
                                       uint64_t nbytes, Keep& verdict, bool borrow) {
  verdict = Keep::Dropped;
  if (failed_) {
    if (step != failingStep_ || writtenAfterFailure_ + nbytes > capBytes_) return nullptr;
    writtenAfterFailure_ += nbytes;
    verdict = Keep::WriteNow;
    return nullptr;
  }
  if (ringBytes_ + nbytes > capBytes_) return nullptr;
  // The step's list: the one of the last keep (a map node stays put until erased), or a new
  // one sized like the last step's (the next step keeps the same tensors again).
  if (current_ == ring_.end() || current_->first != step) {
    auto [it, fresh] = ring_.try_emplace(step);
    if (fresh && current_ != ring_.end()) it->second.reserve(current_->second.size());
    current_ = it;
  }
  // A borrowed entry takes a spare without a buffer (or a fresh one): none is filled.
  if (!borrow)
    current_->second.push_back(spareLocked(nbytes));
  else if (!spare_.empty() && spare_.front().bytes.capacity() == 0)
    current_->second.push_back(spareLocked(0));
  else
    current_->second.emplace_back();
  KeptTensor& k = current_->second.back();  // filled in place: no move of the whole entry
  k.kind = kind;
  k.path.assign(path);
  k.callIndex = callIndex;
  k.output = output;
  k.dtype.assign(dtype);
  k.shape.assign(shape, shape + (ndim > 0 && shape ? ndim : 0));
  // Uninitialised growth (UninitAllocator): the caller writes all nbytes.
  k.bytes.resize(borrow ? 0 : nbytes);
  k.step = step;
  k.borrowed = nullptr;
  k.borrowedBytes = 0;
  k.hookHash = 0;
  ringBytes_ += nbytes;
  verdict = Keep::Kept;
  return &k;
}

void FailureRing::stepBegan() {
  std::lock_guard<std::mutex> lk(mu_);
  while (!ring_.empty() && static_cast<int64_t>(ring_.size()) >= steps_) {
    for (auto& k : ring_.begin()->second) {
      ringBytes_ -= sizeOf(k);
      k.borrowed = nullptr;  // its owner may let go of it from now on
      recycleLocked(std::move(k));
    }
    floor_ = std::max(floor_, ring_.begin()->first + 1);
    if (current_ == ring_.begin()) current_ = ring_.end();
    ring_.erase(ring_.begin());
  }
}

namespace {
// A borrowed entry read into its own buffer (OwnMemory.h: it may be unmapped since) and digested
// again: false when the bytes are not the ones its hook digested (changed in place since, or
// freed), which are then never written.
bool resolveBorrowed(KeptTensor& k) {
  if (!k.borrowed) return true;
  KeptBytes bytes(k.borrowedBytes);
  const bool readable = copyOwnMemory(k.borrowed, k.borrowedBytes, bytes.data());
  k.borrowed = nullptr;
  if (!readable) return false;  // freed and unmapped since its hook: counted as changed
  DigestResult now = computeDigest(k.dtype, bytes.data(), bytes.size());
  if (now.hash != k.hookHash) return false;  // not what the hook digested: never written
  k.bytes = std::move(bytes);
  return true;
}
}  // namespace

RingForFailure FailureRing::takeForFailure(int64_t failingStep) {
  RingForFailure out;
  std::lock_guard<std::mutex> lk(mu_);
  if (failed_) return out;
  failed_ = true;
  failingStep_ = failingStep;
  std::map<int64_t, std::vector<KeptTensor>> ring;
  ring.swap(ring_);
  current_ = ring_.end();
  ringBytes_ = 0;
  spare_.clear();  // nothing is kept any more
  spareBytes_ = 0;
  // The borrowed bytes are read under the lock: no step is evicted, so the floor, and with it
  // the owners' references, stay put until every entry holds its own copy.
  auto move = [&out](std::vector<KeptTensor>& v) {
    for (auto& k : v) {
      if (resolveBorrowed(k))
        out.tensors.push_back(std::move(k));
      else
        ++out.changedAfterHook;
    }
  };
  if (auto it = ring.find(failingStep); it != ring.end()) {
    move(it->second);
    ring.erase(it);
  }
  for (auto it = ring.rbegin(); it != ring.rend(); ++it) move(it->second);
  floor_ = INT64_MAX;  // nothing is borrowed after the failure
  return out;
}

size_t FailureRing::countForStep(int64_t step) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ring_.find(step);
  return it == ring_.end() ? 0 : it->second.size();
}

bool FailureRing::failed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failed_;
}

size_t FailureRing::bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ringBytes_;
}

void FailureRing::resetAfterForkChild() noexcept {
  // The parent's borrowed entries are never read here: the child cannot vouch that the memory
  // is still held (its hook's references are copies of the parent's, dropped at its own pace).
  // The child's steps may start again below the parent's: its floor starts afresh.
  ring_.clear();
  floor_ = failed_ ? INT64_MAX : INT64_MIN;
  current_ = ring_.end();
  ringBytes_ = 0;
  spare_.clear();
  spareBytes_ = 0;
  mu_.unlock();
}

KeptTensor FailureRing::spareLocked(size_t n) {
  // A buffer within an eighth of n: the front one in the steady state; otherwise the best fit.
  auto fits = [n](const KeptTensor& k) { return k.bytes.capacity() >= n && k.bytes.capacity() - n <= n / 8; };
  size_t best = spare_.size();
  if (!spare_.empty() && fits(spare_.front())) {
    best = 0;
  } else {
    for (size_t i = 0; i < spare_.size(); ++i) {
      size_t c = spare_[i].bytes.capacity();
      if (c >= n && (best == spare_.size() || c < spare_[best].bytes.capacity())) best = i;
    }
  }
  if (best == spare_.size()) return {};
  KeptTensor out = std::move(spare_[best]);
  if (best == 0) {
    spare_.pop_front();
  } else {
    spare_[best] = std::move(spare_.back());
    spare_.pop_back();
  }
  spareBytes_ -= out.bytes.capacity();
  return out;
}

void FailureRing::recycleLocked(KeptTensor&& kept) {
  if (spare_.size() >= kMaxSpare || spareBytes_ + kept.bytes.capacity() > capBytes_) return;  // freed
  spareBytes_ += kept.bytes.capacity();
  spare_.push_back(std::move(kept));
}

}  // namespace dlrr
