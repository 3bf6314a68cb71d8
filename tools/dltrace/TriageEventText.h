#pragma once
// One-line descriptions of the triage events (missingPaths, libraryLoadError, resourcePeak,
// packages) for `dltrace events`.
#include <string>

#include "schema/dlrr.capnp.h"

namespace dlrr::tools {

std::string describeTriageEvent(schema::Event::Reader e);

}  // namespace dlrr::tools
