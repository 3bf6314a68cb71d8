#include "interpose/ProcessRecorder.h"

#include <atomic>
#include <new>

namespace dlrr {
namespace {

// Storage that is constructed once and never destructed (see header for why).
alignas(RecordSession) unsigned char gStorage[sizeof(RecordSession)];
std::atomic<RecordSession*> gRecorder{nullptr};

}  // namespace

RecordSession* processRecorder() noexcept { return gRecorder.load(std::memory_order_acquire); }

void startProcessRecorder(const Config& cfg) {
  if (gRecorder.load()) return;
  auto* s = ::new (static_cast<void*>(gStorage)) RecordSession(cfg);
  gRecorder.store(s, std::memory_order_release);
}

}  // namespace dlrr
