#pragma once
// Reads what triage needs from a trace: the failure, the timeline of the failing process up
// to it, the triage events (missing paths, library errors, resource peaks, packages), the
// runtime facts and the launcher's environment.
#include "format/Trace.h"
#include "triage/Facts.h"

namespace dlrr::triage {

// Streams that cannot be read to the end contribute what precedes the damage.
TriageInput gatherFacts(Trace& trace);

}  // namespace dlrr::triage
