#pragma once
// Something that follows the step boundaries of a recorded or replayed process (GPU capture:
// recorder/GpuRecorder, replayer/GpuReplayer). RecordSession and ReplaySession call these
// outside their own locks; implementations must not throw.
#include <cstdint>

namespace dlrr {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void stepBegan(int64_t step) noexcept = 0;
  // Before the step's end is committed (record) or checked (replay).
  virtual void stepEnding(int64_t step) noexcept = 0;
  // Before a failure is committed, or a replay stop is reported: deliver what is pending.
  virtual void flush() noexcept {}
  // The process is exiting: stop background work, deliver what is pending. Idempotent.
  virtual void finish() noexcept {}
};

}  // namespace dlrr
