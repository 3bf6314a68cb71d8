#pragma once
// Whether the job's own Python sources changed since the recording: the replay runs the code
// as it is now, so a changed script can diverge for that reason alone.
#include <string>
#include <vector>

#include "format/StreamReader.h"

namespace dlrr {

// One line per recorded .py file of the job (not an installed package's) whose size or
// modification time differs here: "train.py changed since the recording (...)".
std::vector<std::string> changedSources(StreamReader& s);

}  // namespace dlrr
