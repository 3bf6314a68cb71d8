#pragma once
// Reads what triage needs from a trace: the failure, the timeline of the failing process up
// to it, the triage events (missing paths, library errors, resource peaks, packages), the
// runtime facts and the launcher's environment.
#include "format/Trace.h"
#include "triage/Facts.h"

namespace dlrr::triage {

// Streams that cannot be read to the end contribute what precedes the damage.
TriageInput gatherFacts(Trace& trace);
// The samples of step `step`'s batch in `s` that hold non-finite values, one phrase each
// ("sample 5 of the batch of step 30 (dataset index 1365): 12 non-finite input values in field 0").
std::vector<std::string> nonFiniteSamples(StreamReader& s, int64_t step);

}  // namespace dlrr::triage
