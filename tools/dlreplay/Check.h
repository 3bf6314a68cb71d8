#pragma once
// dlreplay's triage side: the pre-flight environment check (cheap: no Python is started) and
// the verdict of --check (does the recorded failure reproduce under replay?).
#include <optional>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "replayer/ReplayReport.h"
#include "triage/Classifier.h"
#include "triage/Facts.h"

namespace dlrr::replaycheck {

// Warnings on what differs here and matters for replay: interpreter and package versions
// (from their files), BLAS, CPU model, CUDA/driver, paths the job missed that exist now,
// libraries that failed to load and load now. Recorded environment variables are not
// compared: replay restores them. At most `max` lines.
std::vector<std::string> preflightWarnings(Trace& trace, const triage::TriageInput& facts, size_t max = 8);

// "during initialisation (before the first step)" / "at step 12".
std::string stepPhrase(const std::string& stopStep, const triage::TriageInput& facts);

// What --check found: whether the recorded failure happened again, the verdict line, and the
// exit code (the replay's, or kExitNotReproduced).
struct CheckVerdict {
  bool reproduced = false;
  std::string text;
  int exitCode = 0;
};

struct CheckInput {
  int replayExit = 0;             // decideReplayOutcome's exit code
  std::string replayMessage;      // and its outcome line
  int waitStatus = 0;             // the replayed job's
  ReplayReport report;            // its report
  bool checkExit = false;         // the recorded failure is an exit status alone
  std::string recordedFailure;    // formatFailure() of the recorded failure ("" when none)
  int64_t jumpStep = -1;          // the replay started from this snapshot
  bool nonDeterministic = false;  // computed twice from it, the step differed (Recomputation.h)
  std::string concurrencyCaveat;  // ReplaySelection's: racing trainers, unrecorded processes
};

CheckVerdict decideCheck(const CheckInput& in, const triage::TriageInput& facts);

}  // namespace dlrr::replaycheck
