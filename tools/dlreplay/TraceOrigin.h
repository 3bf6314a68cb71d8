#pragma once
// Whether a trace is someone else's (docs/reliability.md, "What a replay can touch"), decided
// from what this machine knows: who owns the trace's directory and files here, as well as the
// host and user its header names (which the trace's author wrote, and could have forged). A
// foreign trace's command runs only with consent, and its environment never chooses the code
// the replay loads (LD_*, PYTHON*, PATH).
#include <string>

#include "format/Trace.h"

namespace dlrr {

struct TraceOrigin {
  bool foreign = false;
  std::string why;  // "recorded by USER on HOST" / "its files belong to uid N here": for the prompt
};

TraceOrigin traceOrigin(const std::string& traceDir, schema::TraceInfo::Reader recorded, const std::string& thisHost);

}  // namespace dlrr
