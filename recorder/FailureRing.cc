#include "recorder/FailureRing.h"

#include <cstring>
#include <iterator>

namespace dlrr {

FailureRing::Keep FailureRing::keep(int64_t step, int kind, std::string_view path, uint32_t callIndex, uint32_t output,
                                    std::string_view dtype, const int64_t* shape, int ndim, const void* data,
                                    uint64_t nbytes) {
  if (!data) return Keep::Dropped;
  return keepFilled(step, kind, path, callIndex, output, dtype, shape, ndim, nbytes, [&](uint8_t* dst) {
    if (nbytes) std::memcpy(dst, data, nbytes);
  });
}

KeptTensor* FailureRing::reserveLocked(int64_t step, int kind, std::string_view path, uint32_t callIndex,
                                       uint32_t output, std::string_view dtype, const int64_t* shape, int ndim,
                                       uint64_t nbytes, Keep& verdict) {
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
  current_->second.push_back(spareLocked(nbytes));
  KeptTensor& k = current_->second.back();  // filled in place: no move of the whole entry
  k.kind = kind;
  k.path.assign(path);
  k.callIndex = callIndex;
  k.output = output;
  k.dtype.assign(dtype);
  k.shape.assign(shape, shape + (ndim > 0 && shape ? ndim : 0));
  // Uninitialised growth (UninitAllocator): the caller writes all nbytes.
  k.bytes.resize(nbytes);
  k.step = step;
  ringBytes_ += nbytes;
  verdict = Keep::Kept;
  return &k;
}

void FailureRing::stepBegan() {
  std::lock_guard<std::mutex> lk(mu_);
  while (!ring_.empty() && static_cast<int64_t>(ring_.size()) >= steps_) {
    for (auto& k : ring_.begin()->second) {
      ringBytes_ -= k.bytes.size();
      recycleLocked(std::move(k));
    }
    if (current_ == ring_.begin()) current_ = ring_.end();
    ring_.erase(ring_.begin());
  }
}

std::vector<KeptTensor> FailureRing::takeForFailure(int64_t failingStep) {
  std::map<int64_t, std::vector<KeptTensor>> ring;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (failed_) return {};
    failed_ = true;
    failingStep_ = failingStep;
    ring.swap(ring_);
    current_ = ring_.end();
    ringBytes_ = 0;
    spare_.clear();  // nothing is kept any more
    spareBytes_ = 0;
  }
  std::vector<KeptTensor> out;
  auto move = [&out](std::vector<KeptTensor>& v) {
    out.insert(out.end(), std::make_move_iterator(v.begin()), std::make_move_iterator(v.end()));
  };
  if (auto it = ring.find(failingStep); it != ring.end()) {
    move(it->second);
    ring.erase(it);
  }
  for (auto it = ring.rbegin(); it != ring.rend(); ++it) move(it->second);
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
  ring_.clear();
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
