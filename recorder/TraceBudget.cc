#include "recorder/TraceBudget.h"

#include <unistd.h>

#include <algorithm>

#include "format/TraceDir.h"

namespace dlrr {

uint64_t TraceBudget::used() const { return traceBytes(dirFd_); }

TraceBudget::Kept* TraceBudget::find(uint64_t id) {
  for (auto& k : kept_)
    if (k.id == id) return &k;
  return nullptr;
}

void TraceBudget::unpin(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids)
    if (Kept* k = find(id); k && k->pins > 0) --k->pins;
}

bool TraceBudget::reference(const Hash128& h) {
  auto it = blobs_.find(h);
  if (it == blobs_.end()) return false;
  if (std::find(pendingRefs_.begin(), pendingRefs_.end(), it->second) == pendingRefs_.end()) {
    Kept* k = find(it->second);
    if (!k) return false;
    ++k->pins;  // from now on: makeRoom() may run on another thread before the snapshot is kept
    pendingRefs_.push_back(it->second);
  }
  return true;
}

void TraceBudget::addBulk(Bulk b) {
  Kept k;
  k.bulk = std::move(b);
  k.id = nextId_++;
  k.refs = std::move(pendingRefs_);
  pendingRefs_.clear();
  for (const auto& h : pendingBlobs_) blobs_.emplace(h, k.id);
  pendingBlobs_.clear();
  kept_.push_back(std::move(k));
}

void TraceBudget::abandon() {
  unpin(pendingRefs_);
  pendingRefs_.clear();
  pendingBlobs_.clear();
}

size_t TraceBudget::pinned() const {
  return static_cast<size_t>(std::count_if(kept_.begin(), kept_.end(), [](const Kept& k) { return k.pins > 0; }));
}

std::vector<TraceBudget::Bulk> TraceBudget::makeRoom(uint64_t extra, uint64_t& usedAfter) {
  std::vector<Bulk> dropped;
  usedAfter = used();
  while (limit_ && usedAfter + extra > limit_ && kept_.size() > 1) {
    // The oldest that nothing kept refers to; the newest never.
    auto victim = std::find_if(kept_.begin(), kept_.end() - 1, [](const Kept& k) { return k.pins == 0; });
    if (victim == kept_.end() - 1) break;  // every older one is pinned: what is kept is all needed
    Kept k = std::move(*victim);
    kept_.erase(victim);
    std::erase_if(blobs_, [&](const auto& e) { return e.second == k.id; });
    unpin(k.refs);
    if (::unlinkat(dirFd_, k.bulk.file.c_str(), 0) != 0) continue;  // gone already: nothing to free
    dropped.push_back(std::move(k.bulk));
    usedAfter = used();
  }
  return dropped;
}

}  // namespace dlrr
