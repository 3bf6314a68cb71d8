#pragma once
// Connects GPU capture to a replayed process: the replayed launches of each step are drained
// synchronously when the step ends (or the replay stops inside it) and handed to the
// ReplaySession, which compares them with the recorded ones.
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "replayer/ReplaySession.h"
#include "session/LaunchTracker.h"
#include "session/StepObserver.h"

namespace dlrr {

class GpuReplayer final : public StepObserver, public gpu::LaunchSink {
 public:
  GpuReplayer(ReplaySession& session, gpu::LaunchTracker& tracker) : session_(session), tracker_(tracker) {}

  void stepBegan(int64_t step) noexcept override;
  void stepEnding(int64_t step) noexcept override;
  void flush() noexcept override;
  void finish() noexcept override { flush(); }

  void name(uint32_t id, std::string_view text) override;
  void launch(const gpu::LaunchEvent& e) override;
  void memcpy(const gpu::MemcpyEvent&) override {}

 private:
  void deliver() noexcept;

  ReplaySession& session_;
  gpu::LaunchTracker& tracker_;
  std::mutex mu_;  // one drain at a time: names_ and pending_
  std::map<uint32_t, std::string> names_;
  std::map<int64_t, std::vector<KernelLaunch>> pending_;
};

}  // namespace dlrr
