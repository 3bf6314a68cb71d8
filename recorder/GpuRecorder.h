#pragma once
// Connects GPU capture to a recorded process: step boundaries go into the LaunchTracker, and a
// background thread drains it into the trace (InternedString, CudaLaunch and CudaMemcpy
// events, each stamped with the step it happened in). The job's threads never encode: the
// CUPTI callback only fills a ring (LaunchTracker), and stepEnding() only moves the tracker to
// the next epoch and wakes the drain thread.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <thread>

#include "recorder/RecordSession.h"
#include "session/LaunchTracker.h"
#include "session/StepObserver.h"

namespace dlrr {

class GpuRecorder final : public StepObserver, public gpu::LaunchSink {
 public:
  GpuRecorder(RecordSession& session, gpu::LaunchTracker& tracker,
              std::chrono::milliseconds drainEvery = std::chrono::milliseconds(50));
  ~GpuRecorder() override;

  // The drain thread (not started: drains happen at flush()/finish() and drainNow() only).
  void startDrainThread();
  // Drains on the calling thread now (tests; flush and finish use it).
  size_t drainNow();

  // StepObserver
  void stepBegan(int64_t step) noexcept override;
  void stepEnding(int64_t step) noexcept override;
  void flush() noexcept override;
  void finish() noexcept override;

  // LaunchSink
  void name(uint32_t id, std::string_view text) override;
  void launch(const gpu::LaunchEvent& e) override;
  void memcpy(const gpu::MemcpyEvent& e) override;
  void dropped(int64_t step, uint64_t launches, uint64_t copies) override;

 private:
  void run();
  void stopThread() noexcept;

  RecordSession& session_;
  gpu::LaunchTracker& tracker_;
  std::chrono::milliseconds every_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool wake_ = false;
  bool finished_ = false;
  std::thread thread_;
  uint64_t droppedReported_ = 0;
};

}  // namespace dlrr
