#pragma once
// What dlreplay prints when a one-process replay ends: the outcome line with the count of
// verified steps, --check's verdict and triage line, the report's stop details, the files
// served and written, and the job library's warnings (text on stderr), or all of it as one
// JSON line on stdout after whatever the job printed (--json).
#include <cstdint>
#include <optional>
#include <string>

#include "replayer/ReplayReport.h"
#include "tools/dlreplay/Check.h"
#include "tools/dlreplay/ReplayFiles.h"
#include "tools/dlreplay/ReplayOutcome.h"
#include "triage/Classifier.h"

namespace dlrr {

struct ReplayResult {
  int exitCode = 0;       // the outcome's, or --check's
  ReplayOutcome outcome;  // decideReplayOutcome's
  std::string target;     // ReplayTarget::describe()
  uint64_t recordedSteps = 0;
  int64_t jumpStep = -1;
  ReplayReport report;  // the replayed job's
  std::optional<replaycheck::CheckVerdict> check;
  triage::TriageResult triage;      // --check: the recorded failure's kind
  bool determinismUnshown = false;  // --check did not reproduce a failure of a deterministic kind
  std::string determinism;          // why determinism cannot be claimed ("" when nothing says so)
};

void printReplayText(const ReplayResult& r, const ReplayFiles& files);
void printReplayJson(const ReplayResult& r, const ReplayFiles& files);

}  // namespace dlrr
