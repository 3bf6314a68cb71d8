#pragma once
// Why a trace ends where it does, for a replay that runs past its end: a recorded job killed
// (kill -9, a timeout's SIGTERM), or recording that stopped (a full disk) leaves a trace cut
// short, whose end is no end of the job. Pure, unit-tested (tests/unit/ReplayOutcomeTest.cc).
#include <optional>
#include <string>
#include <vector>

#include "format/Trace.h"

namespace dlrr {

// "" when the replayed stream ended as its process did (closed cleanly); else why it was cut:
// the signal that killed the job, the recorder's "recording stopped: ..." note, or a stream
// that was not closed. `jobExit` is the launcher's recorded status of the job (128+N: signal N).
std::string traceCutReason(const StreamSummary& stream, std::optional<int> jobExit,
                           const std::vector<std::string>& notes);

}  // namespace dlrr
