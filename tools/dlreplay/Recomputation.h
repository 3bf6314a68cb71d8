#pragma once
// A jump replay that diverged is run a second time from the same snapshot (docs/replay.md
// "When the snapshot is not enough"): two computations of the same steps from the same restored
// state. Where they agree, the difference from the recording is deterministic (state the
// snapshot cannot hold); where they differ, the computation itself is non-deterministic, and
// the difference is not the snapshot's. Pure, unit-tested (tests/unit/ReplayOutcomeTest.cc).
#include <optional>
#include <string>

#include "replayer/ReplayReport.h"

namespace dlrr {

struct Recomputation {
  bool ran = false;     // the second computation ran and attached
  bool agreed = false;  // it diverged where the first did, with the same values
  // The computations differ: the tensor where they first differ ("module output fc (call 0,
  // output 0) of step 6"), or, at two places of one step whose order the reports do not hold,
  // both. Empty: they agree, or nothing can be said.
  std::string differsAt;
};

// `first`: the replay's divergence; `second`: the second computation's report, `secondOk`:
// whether that one ended as a verified replay (no divergence, target reached or ended as recorded).
Recomputation compareComputations(const ReplayReport::Divergence& first, const ReplayReport& second, bool secondOk);

// "module output fc (call 0, output 0)" of a divergence's detail ("...: recorded hash ...").
std::string divergedTensor(const ReplayReport::Divergence& d);

}  // namespace dlrr
