#pragma once
// Jump replay's plan (docs/replay.md, "Jump replay"): which recorded snapshot the replay
// restores, so that the steps before it are fast-forwarded (the job's Python code runs, its
// model compute is skipped, nothing is verified) and every step from it on is verified.
// Pure: unit-tested in tests/unit/ReplayPlanTest.cc.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "replayer/ReplayTarget.h"

namespace dlrr {

struct SnapshotInfo {
  int64_t step = -1;
  bool failure = false;  // taken inside the step with the first non-finite value
};

struct JumpPlan {
  int64_t jumpStep = -1;  // -1: replay from step 0, verifying every step
  std::string why;        // one line for the user: what is restored, what is fast-forwarded
};

// `from`: "" (default: the latest periodic snapshot at or before the target's step, when the
// target has a step; the failure snapshot too when `useFailure`, as for --check), "snapshot"
// (the latest snapshot of either kind at or before the target, for --until end the latest of
// all), "start", or "step=N" (a snapshot of step N must exist). The default leaves the failure
// snapshot alone so that a short job (no periodic snapshot yet) still verifies every step.
// `targetStep` is the step the target lies in (-1: none, as for end). nullopt with `error`
// set when `from` cannot be honoured.
std::optional<JumpPlan> planJump(const std::vector<SnapshotInfo>& snapshots, ReplayTarget::Kind target,
                                 int64_t targetStep, const std::string& from, bool useFailure, std::string& error);

// Whether `from` is a text planJump accepts (for the option parser).
bool validJumpFrom(const std::string& from);

}  // namespace dlrr
