#include "format/BatchMap.h"

namespace dlrr {

void BatchMapBuilder::batch(int64_t step, bool byReference, bool bytesPresent) {
  if (step < 0) step = 0;  // a batch before the first step belongs to step 0's start
  auto [it, fresh] = steps_.emplace(step, bytesPresent);
  if (!fresh) it->second = it->second && bytesPresent;
  if (byReference) ++byReference_;
  if (!bytesPresent) ++missing_;
}

BatchMap BatchMapBuilder::build() const {
  BatchMap m;
  m.byReference = byReference_;
  m.bytesMissing = missing_;
  if (steps_.empty()) return m;
  m.lastStep = steps_.rbegin()->first;
  // A start is step 0 or a snapshot's step; a range runs while every step's batches are held.
  std::vector<int64_t> starts;
  starts.push_back(0);
  for (int64_t s : snapshots_)
    if (s > 0) starts.push_back(s);
  int64_t coveredTo = -1;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t s = starts[i];
    if (s <= coveredTo) continue;  // inside the previous range already
    auto it = steps_.lower_bound(s);
    if (it == steps_.end() || !it->second) continue;
    int64_t last = it->first;
    for (; it != steps_.end() && it->second; ++it) last = it->first;
    // A step with no batch after the held ones (a job's last steps without a loader) ends it too.
    m.withoutData.push_back({s, last, s == 0 ? -1 : s});
    coveredTo = last;
  }
  return m;
}

std::string BatchMap::describe() const {
  if (lastStep < 0) return "no DataLoader batches recorded";
  std::string out = "steps 0-" + std::to_string(lastStep) + " replay with the dataset present";
  if (byReference == 0) return out + " or without it (every batch recorded by value)";
  if (withoutData.empty()) return out + "; none without it (no batch bytes held from a snapshot on)";
  out += "; without it only steps ";
  for (size_t i = 0; i < withoutData.size(); ++i) {
    const Range& r = withoutData[i];
    if (i) out += ", ";
    out += std::to_string(r.first) + "-" + std::to_string(r.last);
    out += r.snapshot < 0 ? " (from the start)" : " (from the snapshot of step " + std::to_string(r.snapshot) + ")";
  }
  return out;
}

const BatchMap::Range* BatchMap::rangeOf(int64_t step) const {
  for (const Range& r : withoutData)
    if (step >= r.first && step <= r.last) return &r;
  return nullptr;
}

}  // namespace dlrr
