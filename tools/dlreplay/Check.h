#pragma once
// dlreplay's triage side: the pre-flight environment check (cheap: no Python is started) and
// the verdict of --check (does the recorded failure reproduce under replay?).
#include <string>
#include <vector>

#include "format/Trace.h"
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

}  // namespace dlrr::replaycheck
