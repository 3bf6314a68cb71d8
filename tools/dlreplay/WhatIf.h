#pragma once
// dlreplay --what-if INTERVENTION [--steps N]: the recorded failure replayed with one change.
// The replay jumps as usual and verifies up to the step the change starts at (the failing
// step, or the --from step); from there it applies the change (the Python hook,
// pyhook/python/dlrr_hook/whatif.py), replays N steps on the recorded data unverified, and
// says whether a non-finite value (module output, loss, gradient or parameter) came back, with
// the replayed loss beside the recorded one (whatif.* facts of the report). Divergence after
// the change is expected and is never a verdict on the trace.
#include <cstdint>
#include <string>

#include "replayer/ReplayReport.h"
#include "tools/common/ExitCodes.h"
#include "tools/dlreplay/ReplayFiles.h"
#include "tools/dlreplay/WhatIfChange.h"

namespace dlrr {

struct WhatIfOutcome {
  int exitCode = 0;     // 0: the failure did not recur; kExitWhatIfRecurred; else a replay problem
  std::string outcome;  // "prevented", "recurred", "divergence", "not-reached", "not-attached"
  std::string message;
};

// From the replayed job's report and its wait status.
WhatIfOutcome decideWhatIf(const ReplayReport& r, int waitStatus, const std::string& intervention);

void printWhatIfText(const ReplayReport& r, const WhatIfOutcome& o, const ReplayFiles& files);
void printWhatIfJson(const ReplayReport& r, const WhatIfOutcome& o, const std::string& intervention,
                     const ReplayFiles& files);

}  // namespace dlrr
