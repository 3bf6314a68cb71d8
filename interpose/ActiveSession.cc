#include "interpose/ActiveSession.h"

#include <atomic>
#include <new>

namespace dlrr {
namespace {

// Storage that is constructed once and never destructed (see header for why).
alignas(RecordSession) unsigned char gStorage[sizeof(RecordSession)];
std::atomic<RecordSession*> gRecorder{nullptr};
alignas(ReplaySession) unsigned char gReplayStorage[sizeof(ReplaySession)];
std::atomic<ReplaySession*> gReplayer{nullptr};

}  // namespace

RecordSession* processRecorder() noexcept { return gRecorder.load(std::memory_order_acquire); }

void startProcessRecorder(const Config& cfg) {
  if (gRecorder.load()) return;
  auto* s = ::new (static_cast<void*>(gStorage)) RecordSession(cfg);
  gRecorder.store(s, std::memory_order_release);
}

ReplaySession* processReplayer() noexcept {
  ReplaySession* r = gReplayer.load(std::memory_order_acquire);
  return r && r->active() ? r : nullptr;
}

ProcessSession* processSession() noexcept {
  if (ReplaySession* r = processReplayer()) return r;
  return processRecorder();
}

ReplaySession* processReplayerAny() noexcept { return gReplayer.load(std::memory_order_acquire); }

void startProcessReplayer(const Config& cfg, const std::string& until) {
  if (gReplayer.load()) return;
  auto* r = ::new (static_cast<void*>(gReplayStorage)) ReplaySession(cfg, until);
  gReplayer.store(r, std::memory_order_release);
}

}  // namespace dlrr
