#pragma once
// Which events belong to one step, read from the step's first frame onwards.
//
// A step's own events come in order, but the failure ring's full tensors (module outputs,
// losses, collective results) of the steps before a failure are written only when the
// failure happens: during the failing step, right after its first non-finite failure event
// (older recordings: just before it), each stamped with its own (earlier) step. So after step
// N's events the scan goes on, taking only tensors of step N: up to that failure event and
// on after it until the failing step's next step boundary; or until a step too far after N
// for N to still have been in the ring (the ring keeps at most kMaxRingSteps steps), or until
// it is known that no ring was written after step N (a failure at or before N: the ring is
// written once, at the first failure, and not at all after an exception). GPU capture's kernel
// launches and copies of step N are written by its drain thread, woken at N's end: they may
// follow N's end and the next step's start, and are taken there too (until step N+2 begins, where
// no ring keeps the scan going).
#include <cstdint>

#include "schema/dlrr.capnp.h"

namespace dlrr::tools {

// dlrecord --ring-steps takes 0-64 (session/Config.cc).
constexpr int64_t kMaxRingSteps = 64;

class StepScan {
 public:
  enum class Verdict { Take, Skip, Stop };

  explicit StepScan(int64_t step) : step_(step) {}

  Verdict operator()(schema::Event::Reader e) {
    int64_t s = e.getStep();
    if (!past_) {
      if (s <= step_) {
        if (e.isFailure()) failureSeen_ = true;
        return s == step_ ? Verdict::Take : Verdict::Skip;
      }
      past_ = true;
    }
    // Past the step: only the GPU drain's events and the failure ring's tensors of it can still come.
    if (e.isCudaLaunch() || e.isCudaMemcpy()) return s == step_ ? Verdict::Take : Verdict::Skip;
    if (s >= step_ + kMaxRingSteps || (failureSeen_ && s >= step_ + 2)) return Verdict::Stop;
    if (failureSeen_) return Verdict::Skip;
    if (e.isFailure()) {
      ringFollows_ = true;  // the ring, if any, is written right after it
      return Verdict::Skip;
    }
    if (ringFollows_ && (e.isStepBegin() || e.isStepEnd())) return Verdict::Stop;
    return e.isTensor() && s == step_ ? Verdict::Take : Verdict::Skip;
  }

 private:
  int64_t step_;
  bool past_ = false;
  bool failureSeen_ = false;
  bool ringFollows_ = false;
};

}  // namespace dlrr::tools
