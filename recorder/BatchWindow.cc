#include "recorder/BatchWindow.h"

#include <cstring>

namespace dlrr {

void BatchWindow::keep(const Hash128& h, const void* data, size_t n, unsigned elemSize) {
  Blob b{h, {}, elemSize};
  const auto* p = static_cast<const uint8_t*>(data);
  b.bytes.assign(p, p + n);
  pending_.push_back(std::move(b));
}

void BatchWindow::endBatch(int64_t step) {
  if (segments_.empty()) {
    // No held snapshot yet: the window starts with the job (a replay from step 0 needs none).
    segments_.emplace_back();
    segments_.back().startStep = step <= 0 ? 0 : step;
    segments_.back().startable = step <= 0;
  }
  Segment& s = segments_.back();
  uint64_t n = 0;
  for (const auto& b : pending_) n += b.bytes.size();
  s.bytes += n;
  s.batches.push_back(std::move(pending_));
  pending_.clear();
  trim();
}

bool BatchWindow::keepCollective(int64_t step, const Hash128& h, const void* data, size_t n, unsigned elemSize) {
  if (segments_.empty()) {  // no batch yet (a loop without a DataLoader): the job's start
    segments_.emplace_back();
    segments_.back().startStep = step <= 0 ? 0 : step;
    segments_.back().startable = step <= 0;
  }
  Segment& s = segments_.back();
  // Without batches nothing else bounds a segment: past 2K steps it stops being a start.
  if (s.startable && step - s.startStep >= 2 * static_cast<int64_t>(steps_)) {
    s.startable = false;
    dropCollectives(s);
  }
  if (!s.startable) return false;
  if (s.collectives.empty() || s.collectives.back().step != step) s.collectives.push_back({step, {}});
  Blob b{h, {}, elemSize};
  const auto* p = static_cast<const uint8_t*>(data);
  b.bytes.assign(p, p + n);
  s.collectives.back().blobs.push_back(std::move(b));
  s.bytes += n;
  s.collectiveBytes += n;
  trim();
  return true;
}

void BatchWindow::dropCollectives(Segment& s) {
  s.bytes -= s.collectiveBytes;
  s.collectiveBytes = 0;
  s.collectives.clear();
}

void BatchWindow::endSnapshot(int64_t step, std::unique_ptr<capnp::MallocMessageBuilder> event) {
  Segment s;
  s.startStep = step;
  s.snapshot = std::move(event);
  for (const auto& b : pending_) s.bytes += b.bytes.size();
  s.snapshotBlobs = std::move(pending_);
  pending_.clear();
  segments_.push_back(std::move(s));
  while (segments_.size() > 2) segments_.pop_front();
  trim();
}

void BatchWindow::trim() {
  // At most 2K batches: the oldest segment loses its oldest batches (and its start), then goes.
  size_t total = 0;
  for (const auto& s : segments_) total += s.batches.size();
  while (total > 2 * static_cast<size_t>(steps_) && !segments_.empty()) {
    Segment& old = segments_.front();
    if (old.batches.empty() || (segments_.size() > 1 && !old.startable)) {
      total -= old.batches.size();
      segments_.pop_front();
      continue;
    }
    for (const auto& b : old.batches.front()) old.bytes -= b.bytes.size();
    old.batches.pop_front();
    old.startable = false;
    dropCollectives(old);  // no replay starts there any more
    --total;
  }
  uint64_t held = bytesHeld();
  if (held > peak_) peak_ = held;
  uint64_t coll = collectiveBytesHeld();
  if (coll > collectivePeak_) collectivePeak_ = coll;
}

uint64_t BatchWindow::collectiveBytesHeld() const {
  uint64_t n = 0;
  for (const auto& s : segments_) n += s.collectiveBytes;
  return n;
}

uint64_t BatchWindow::bytesHeld() const {
  uint64_t n = 0;
  for (const auto& s : segments_) n += s.bytes;
  return n;
}

std::deque<BatchWindow::Segment> BatchWindow::take() {
  std::deque<Segment> out;
  out.swap(segments_);
  pending_.clear();
  return out;
}

}  // namespace dlrr
