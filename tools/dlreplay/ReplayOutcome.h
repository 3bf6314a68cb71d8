#pragma once
// What one replayed process came to, decided once: from its report (the facts it wrote) and
// its wait status, and what the recording holds, the exit code and the outcome line dlreplay
// prints. Pure, so every failure mode is unit-tested (tests/unit/ReplayOutcomeTest.cc).
//
// The verdict never flatters: a replayed process that exits, raises or dies where the
// recording did not is a divergence naming what happened and the last verified step, and
// "N of M verified" with N < M at the end is never success.
#include <cstdint>
#include <optional>
#include <string>

#include "replayer/ReplayReport.h"
#include "replayer/ReplayTarget.h"
#include "tools/common/ExitCodes.h"
#include "tools/dlreplay/Recomputation.h"

namespace dlrr {

// Exit codes: tools/common/ExitCodes.h.

struct ReplayFacts {
  ReplayReport report;  // the replayed process's; !attached: it never attached
  int waitStatus = 0;   // as waitpid() gave it
  ReplayTarget::Kind target = ReplayTarget::Kind::End;
  std::string targetText;  // ReplayTarget::describe()
  uint64_t recordedSteps = 0;
  std::string recordedFailureKind;  // "exception", "signal", "nonfinite", ... or empty
  int recordedSignal = 0;
  std::string recordedExceptionType;  // "exception": its type as recorded ("KeyError", "mod.Error")
  std::optional<int> recordedExit;    // the recorded job's exit status (128+N: signal N)
  int64_t jumpStep = -1;              // jump replay: the snapshot's step (steps before it not verified)
  std::string traceCut;               // traceCutReason(): why the trace ends early, "" when it does not
  // The recorder's note that batches held a container recorded as its plain base type (a
  // namedtuple as a tuple; kPlainBatchNote), "" when none: replay served them differently.
  std::string plainBatches;
  // A diverged jump replay's second computation from the same snapshot (Recomputation.h).
  Recomputation recomputation;
};

// Part of that note (pyhook/python/dlrr_hook/recorder.py, PLAIN_NOTE).
inline constexpr const char* kPlainBatchNote = "dlrr does not record the container's own type";

struct ReplayOutcome {
  int exitCode = kExitNotReached;
  std::string message;  // one line, escaped
  uint64_t verified = 0;
};

ReplayOutcome decideReplayOutcome(const ReplayFacts& f);

}  // namespace dlrr
